"""The steps of XLA's export, each a function: the module's files, its facts and requirements, and the native
section for a PJRT C API consumer (with its static and single-platform modules)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from multiexport.sdk import (
    COMPILE_OPTIONS_FILE,
    WEIGHTS_FILE,
    ExportError,
    ExportJob,
    LiftedWeights,
    Signature,
    compile_options_proto,
    embedded,
    exported_header,
    module_function,
    producer_version,
    static_key,
    static_size_sets,
    write_bytes_atomic,
    write_text_atomic,
)

from .facts import XlaFacts
from .section import platform_module, refine_static, static_module, xla_section

FILES = {
    "exported": "model.jax_exported",
    "stablehlo_bytecode": "model.mlirbc",
    "stablehlo_text": "model.mlir",
    "hlo_text": "model.hlo.txt",
}
# Past this many bytes of baked constants the text forms (.mlir, .hlo.txt) are skipped: they print every
# weight in decimal, ~3x the binary size, and take longer to write than the export itself.
TEXT_LIMIT_BYTES = 16 << 20
# jax.export promises that a serialized artifact keeps working with JAX releases of the next 6 months.
COMPATIBILITY_DAYS = 180


def write_module_files(job: ExportJob[Any], exported: Any, serialized: bytes, lifted: LiftedWeights | None
                       ) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """The serialized Exported, the StableHLO bytecode, the lifted weights, and the text forms when the baked
    weights are small enough to print: (files by role, the weights' facts, warnings)."""
    out_dir, signature = job.out_dir, job.signature
    write_bytes_atomic(out_dir / FILES["exported"], serialized)
    write_bytes_atomic(out_dir / FILES["stablehlo_bytecode"], bytes(exported.mlir_module_serialized))
    files = {k: FILES[k] for k in ("exported", "stablehlo_bytecode")}
    weights = lifted.write(out_dir) if lifted else embedded(signature)
    if lifted:
        files["weights"] = WEIGHTS_FILE
    warnings = []
    baked = weights["embedded_bytes"]
    text = baked <= TEXT_LIMIT_BYTES
    if text:
        write_text_atomic(out_dir / FILES["stablehlo_text"], exported.mlir_module())
        files["stablehlo_text"] = FILES["stablehlo_text"]
    else:
        warnings.append(
            f"no text forms (model.mlir, model.hlo.txt): {baked / 2**20:.0f} MiB of baked constants would print "
            "as about 3x that in text (measured: 64 MiB of weights made a 219 MB HLO text); the bytecode "
            "(model.mlirbc) and the serialized Exported are complete")
    multi_platform = len(exported.platforms) > 1
    if text and (signature.symbolic_dims or multi_platform):
        why = "symbolic dimensions" if signature.symbolic_dims else "several platforms"
        warnings.append(f"no HLO text: HLO has no form for {why}; compile the StableHLO (model.mlirbc) instead")
    elif text:
        write_text_atomic(out_dir / FILES["hlo_text"], hlo_text(job, exported, lifted))
        files["hlo_text"] = FILES["hlo_text"]
    if exported.ordered_effects:
        warnings.append(f"ordered effects {exported.ordered_effects}: the module takes token arguments "
                        "(see format.module_args)")
    return files, weights, warnings


def hlo_text(job: ExportJob[Any], exported: Any, lifted: LiftedWeights | None) -> str:
    """The module as HLO text, lowered for the module's own platforms, not this machine's: a TPU-only call (a
    Pallas kernel) lowers for the TPU."""
    import jax

    flat, weight_specs = module_function(job.fn, job.signature, lifted)
    lowered = jax.jit(flat, keep_unused=job.options.keep_unused).trace(*job.signature.specs, *weight_specs).lower(
        lowering_platforms=tuple(exported.platforms))
    return lowered.as_text(dialect="hlo")


def versions_of(exported: Any, serialized: bytes) -> dict[str, str]:
    """The module's calling convention, serialization and StableHLO versions, as the manifest's versions."""
    return {"calling_convention_version": str(exported.calling_convention_version),
            "serialization_version": str(exported_header(serialized)["serialization_version"]),
            "stablehlo_version": producer_version(bytes(exported.mlir_module_serialized)) or "unknown"}


def requires_of(exported: Any, serialized: bytes) -> dict[str, Any]:
    """What a consumer needs to read the artifact, with the window jax.export guarantees it."""
    until = dt.date.today() + dt.timedelta(days=COMPATIBILITY_DAYS)
    return {
        "calling_convention_version": exported.calling_convention_version,
        "serialization_version": exported_header(serialized)["serialization_version"],
        "stablehlo_version": producer_version(bytes(exported.mlir_module_serialized)),
        "jax_export_compatible_until": until.isoformat(),
        "note": (f"jax.export guarantees {COMPATIBILITY_DAYS} days of backward compatibility: JAX/PJRT "
                 "consumers released before jax_export_compatible_until run the artifact with the same "
                 "semantics; model.mlirbc is a StableHLO portable artifact for PJRT's 'mlir' format"),
    }


def aliases_of(aliases: dict[int, int], args: list[Any], signature: Signature) -> dict[str, str]:
    """The module's input/output aliases by leaf: input leaf -> the output leaf it is donated to."""
    return {args[i].name: signature.outputs[j].name for i, j in sorted(aliases.items())
            if i < len(args) and args[i].kind == "leaf" and j < len(signature.outputs)}


def facts_of(exported: Any, args: list[Any], signature: Signature, lifted: LiftedWeights | None,
             weights: dict[str, Any], attributes: dict[str, Any], aliases: dict[str, str] | None = None) -> XlaFacts:
    """The format facts: how `main` is called, where the weights are, which inputs are donated."""
    baked = weights["embedded_bytes"]
    return XlaFacts(
        # The weights' copies on disk: model.jax_exported embeds the same StableHLO as model.mlirbc;
        # lifted weights are stored once, in weights.safetensors.
        weight_copies=1 if lifted else (2 if baked else 0),
        weights=(
            f"baked weights lifted to the module's trailing parameters ({', '.join(lifted.names[:3])}"
            f"{', ...' if len(lifted.names) > 3 else ''}), stored in {WEIGHTS_FILE}; the runner puts them on "
            "the device once at load and passes them to every call") if lifted else (
            "embedded as constants in the module" if baked else "no baked weights"),
        platforms=list(exported.platforms),
        module_args=list(args),
        module_results=[o.name for o in signature.outputs],
        nr_devices=exported.nr_devices,
        uses_shape_polymorphism=bool(attributes.get("jax.uses_shape_polymorphism", False)),
        module_attributes=attributes,
        aliases=dict(aliases or {}),
    )


def declared_dtypes(exported: Any, signature: Signature) -> dict[str, str]:
    """Leaf name -> the dtype the module itself declares, for each input leaf and output."""
    n = len(signature.inputs)
    declared = {leaf.name: aval.dtype.name for leaf, aval in zip(signature.inputs, exported.in_avals[:n])}
    declared.update({leaf.name: aval.dtype.name for leaf, aval in zip(signature.outputs, exported.out_avals)})
    return declared


def native_section(exported, args, signature, options, weights, out_dir: Path, warnings: list[str],
                   polymorphic: bool) -> dict[str, Any]:
    """The manifest's native section for a PJRT C API consumer, and the files it names.

    PJRT compiles no polymorphic module, so a symbolic export also carries modules refined to static
    shapes: for `--static-sizes`, else for the example's sizes (what compare runs natively). Sizes the
    user asked for must refine; the example's may fail (a shape assertion), which is then a warning.
    """


    tensors = weights.get("tensors", []) if weights.get("storage") == "external" else []
    section = xla_section(exported, args, signature.inputs, signature.outputs, weights=tensors,
                          weights_file=WEIGHTS_FILE, program=FILES["stablehlo_bytecode"],
                          uses_shape_polymorphism=polymorphic)
    write_bytes_atomic(out_dir / COMPILE_OPTIONS_FILE, compile_options_proto())
    combos = static_size_sets(signature.symbolic_dims, options.static_sizes, signature.example_sizes())
    platform = refine_platform(exported.platforms)
    for sizes in combos:
        try:
            code, arg_shapes, result_shapes, how = refine_static(exported, sizes, platform)
            entry = static_module(section, sizes, code, arg_shapes, result_shapes, how, platform)
        except Exception as exc:  # a shape assertion of the module, or refinement leaving a dynamic shape
            text = f"static module for {static_key(sizes)} | {' '.join(str(exc).split())[:400]}"
            if any(symbol in options.static_sizes for symbol in sizes):
                raise ExportError(f"Backend 'xla' | {text}", backend="xla", category="converter-error") from exc
            warnings.append(f"no {text}")
            continue
        write_bytes_atomic(out_dir / entry["program"], code)
        section["static_modules"][static_key(sizes)] = entry
    if len(exported.platforms) > 1 and not signature.symbolic_dims:
        section["platform_modules"] = platform_modules(exported, section, out_dir, warnings)
    baked = int(weights.get("embedded_bytes", 0))
    copies = len(section["static_modules"]) + len(section.get("platform_modules", {}))
    if baked and copies and baked * copies > TEXT_LIMIT_BYTES:
        warnings.append(f"each of the {copies} refined static or single-platform modules embeds the "
                        f"{baked / 2**20:.0f} MiB of baked weights again; --external-weights always stores them once")
    return section


def platform_modules(exported, section, out_dir: Path, warnings: list[str]) -> dict[str, Any]:
    """One program per platform of a multi-platform module, each `jax.jit(Exported.call)` lowered for that
    platform alone (no platform index, no `case` over platforms), so a native consumer compiles what jax
    compiles on its plugin's platform (section.platform_module says why). One that fails to lower is a warning:
    the consumer then runs the multi-platform main on that platform, and says so."""

    made: dict[str, Any] = {}
    for platform in [p.lower() for p in exported.platforms]:
        try:
            code, arg_shapes, result_shapes, how = refine_static(exported, {}, platform)
            entry = platform_module(section, platform, code, arg_shapes, result_shapes,
                                    how.replace("at these sizes", f"for {platform} alone"))
        except Exception as exc:  # lowering for one platform (a call it lacks): the main module still serves it
            warnings.append(f"no single-platform program for {platform} | {' '.join(str(exc).split())[:400]}; "
                            "its native consumer runs the multi-platform module")
            continue
        write_bytes_atomic(out_dir / entry["program"], code)
        made[platform] = entry
    return made


def refine_platform(platforms) -> str:
    """The platform the refined static modules are lowered for: this machine's when the module has it
    (`jax.export.default_export_platform()`: 'cuda' with a GPU, where jax.default_backend() says 'gpu'),
    else the module's first, which lowering needs no device of (a CUDA artifact refined on a CPU machine)."""
    from jax import export

    lowered = [p.lower() for p in platforms]
    here = export.default_export_platform().lower()
    return here if here in lowered else lowered[0]


