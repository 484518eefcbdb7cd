"""XLA / PJRT through `jax.export`: serialized Exported, StableHLO bytecode and text, HLO text.

The function exported is the signature's flat function of named leaves, so the artifact carries no
custom pytree and deserializes in any process. The module's own `main` is the truth about its
arguments (`export.stablehlo.module_interface`): each input leaf's `param` is its real position there,
after a platform index (several platforms) and tokens (ordered effects), and `format.module_args` lists
every argument. The runner is `jax.jit(Exported.call)` on PJRT, in 64-bit mode when the artifact is.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from multiexport.sdk import (
    COMPILE_OPTIONS_FILE,
    WEIGHTS_FILE,
    ArtifactError,
    Availability,
    Backend,
    ExportError,
    FormatResult,
    JitRunner,
    Manifest,
    RunError,
    RunOptions,
    Runner,
    compile_options_proto,
    embedded,
    export_module,
    exported_header,
    iter_safetensors,
    leaf_binding,
    module_attributes,
    module_function,
    module_interface,
    plan,
    producer_version,
    static_key,
    static_size_sets,
    tpu_only,
    write_bytes_atomic,
    write_text_atomic,
)

from .facts import XlaFacts
from .native import PjrtConsumer
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


class XlaBackend(Backend):
    name = "xla"
    summary = "XLA/PJRT: serialized jax.export.Exported and StableHLO bytecode"
    requires = ("jax", "jaxlib")
    distributions = ("jax", "jaxlib")  # core dependencies: no extra
    color = "#1f77b4"
    order = 10
    runtime_modules = ("jax",)
    facts_type = XlaFacts
    precision_gaps = {p: ("XLA's CPU compiler has no post-training quantization or float16 mode for a float32 module: "
                          "reduced precision is written in the JAX function itself (params cast with astype, or a "
                          "quantization library such as AQT), then exported like any function")
                      for p in ("fp16", "int8-dynamic", "int8")}

    def native_consumer(self):
        """pjrt_run on the PJRT C API (`native.PjrtConsumer`)."""

        return PjrtConsumer()

    def _export_impl(self, fn, signature, out_dir: Path, options, resolved, frontend) -> FormatResult:
        import jax

        lifted = plan(fn, signature, options.external_weights)
        exported = export_module(fn, signature, keep_unused=options.keep_unused, platforms=options.platforms,
                                 lifted=lifted)
        leaf_names = [leaf.name for leaf in signature.inputs]
        args = module_interface(exported, leaf_names, lifted.names if lifted else ())
        used, params = leaf_binding(args, leaf_names)
        serialized = bytes(exported.serialize())
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
            flat, weight_specs = module_function(fn, signature, lifted)
            # for the module's own platform, not this machine's: a TPU-only call (a Pallas kernel) lowers for the TPU
            lowered = jax.jit(flat, keep_unused=options.keep_unused).trace(*signature.specs, *weight_specs).lower(
                lowering_platforms=tuple(exported.platforms))
            write_text_atomic(out_dir / FILES["hlo_text"], lowered.as_text(dialect="hlo"))
            files["hlo_text"] = FILES["hlo_text"]
        if exported.ordered_effects:
            warnings.append(f"ordered effects {exported.ordered_effects}: the module takes token arguments "
                            "(see format.module_args)")
        attributes = module_attributes(exported)
        native = native_section(exported, args, signature, options, weights, out_dir, warnings,
                                bool(attributes.get("jax.uses_shape_polymorphism", False)))
        files["compile_options"] = native["compile_options"]

        n = len(signature.inputs)
        declared = {leaf.name: aval.dtype.name for leaf, aval in zip(signature.inputs, exported.in_avals[:n])}
        declared.update({leaf.name: aval.dtype.name for leaf, aval in zip(signature.outputs, exported.out_avals)})
        stablehlo = producer_version(bytes(exported.mlir_module_serialized))
        until = dt.date.today() + dt.timedelta(days=COMPATIBILITY_DAYS)
        return FormatResult(
            files=files, used=used, params=params, output_params=list(range(len(signature.outputs))),
            versions={"calling_convention_version": str(exported.calling_convention_version),
                      "serialization_version": str(exported_header(serialized)["serialization_version"]),
                      "stablehlo_version": stablehlo or "unknown"},
            requires={
                "calling_convention_version": exported.calling_convention_version,
                "serialization_version": exported_header(serialized)["serialization_version"],
                "stablehlo_version": stablehlo,
                "jax_export_compatible_until": until.isoformat(),
                "note": (f"jax.export guarantees {COMPATIBILITY_DAYS} days of backward compatibility: JAX/PJRT "
                         "consumers released before jax_export_compatible_until run the artifact with the same "
                         "semantics; model.mlirbc is a StableHLO portable artifact for PJRT's 'mlir' format"),
            },
            format=XlaFacts(
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
            ),
            warnings=warnings, weights=weights, declared=declared, platforms=list(exported.platforms),
            native=native,
        )

    def _gpu_status_impl(self) -> Availability:
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError as exc:
            return Availability(False, f"JAX {jax.__version__} sees no GPU ({' '.join(str(exc).split())[:200]}); "
                                       "install the CUDA plugin: pip install 'multiexport[gpu]'")
        return Availability(True, f"{len(gpus)} GPU(s): {', '.join(d.device_kind for d in gpus)}")

    def classify(self, exc: BaseException, stage: str) -> tuple[str, str] | None:

        return tpu_only(exc, "an XLA module for the CPU") if stage == "export" else None

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        import jax
        from jax import export

        path = manifest.path(directory, "exported")
        try:
            exported = export.deserialize(bytearray(path.read_bytes()))
        except Exception as exc:
            raise ArtifactError(f"Artifact '{directory}' | cannot deserialize {path.name} with jax {jax.__version__} "
                                f"({type(exc).__name__}: {exc}); it was written by jax "
                                f"{manifest.versions.get('jax', '?')}") from exc
        tensors = manifest.external_weights()
        expected_inputs = len(manifest.inputs) + len(tensors)
        if len(exported.in_avals) != expected_inputs or len(exported.out_avals) != len(manifest.outputs):
            raise ArtifactError(
                f"Artifact '{directory}' | module has {len(exported.in_avals)} inputs / {len(exported.out_avals)} outputs, "
                f"manifest lists {expected_inputs} / {len(manifest.outputs)}"
                + (f" ({len(manifest.inputs)} leaves + {len(tensors)} lifted weights)" if tensors else "")
            )
        try:
            jax_device = jax.devices(options.device)[0]  # cpu, gpu or tpu (an artifact lowered for it: load)
        except RuntimeError as exc:
            raise RunError(f"Device '{options.device}' | JAX sees none: {exc}",
                           category="no-gpu" if options.device == "gpu" else "unavailable") from exc
        weights = load_weights(directory, manifest, jax_device) if tensors else []
        return XlaRunner(manifest, directory, options, exported, jax_device, weights)


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


def load_weights(directory: Path, manifest: Manifest, jax_device) -> list[Any]:
    """The lifted weights on `jax_device`, one tensor at a time from the file's memory map.

    Each tensor is paged in, copied to the device and unmapped before the next, so the host holds the
    device copy and at most one mapped tensor (on CPU the device copy is host memory too).
    """
    import jax

    path = manifest.path(directory, "weights")
    out = []
    for (name, array), expected in zip(iter_safetensors(path, manifest.external_weights()), manifest.weights["tensors"]):
        if list(array.shape) != expected.get("shape") or array.dtype.name != expected.get("dtype"):
            raise ArtifactError(f"Weight '{name}' | got {array.dtype.name}{list(array.shape)} in {path.name}, expected "
                                f"{expected.get('dtype')}{expected.get('shape')} (the manifest's)")
        out.append(jax.block_until_ready(jax.device_put(array, jax_device)))
        del array
    return out


class XlaRunner(JitRunner):
    """Compiles the deserialized module once per input shape and runs it through PJRT."""

    calling_path = "jax.jit(Exported.call) on PJRT; inputs committed to the device with jax.device_put"

    def __init__(self, manifest, directory, options, exported, jax_device, weights=()):
        # Lifted weights are on the device since load and passed after the leaves.
        super().__init__(manifest, directory, options, exported.call, jax_device, resident=weights,
                         x64=bool(manifest.supports.get("x64")))
        self.exported = exported


BACKEND = XlaBackend
