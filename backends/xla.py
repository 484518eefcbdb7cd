"""XLA / PJRT through `jax.export`: serialized Exported, StableHLO bytecode and text, HLO text.

The function exported is the signature's flat function of named leaves, so the artifact carries no
custom pytree and deserializes in any process. `Exported.module_kept_var_idx` is the truth about
which leaves became module parameters; the manifest records it per leaf.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

from multiexport.backend import (
    EXAMPLE_INPUTS,
    Availability,
    Backend,
    ExportOptions,
    Runner,
    base_versions,
    bindings,
    dist_version,
    utc_now,
    write_example_inputs,
)
from multiexport.errors import ArtifactError, RunError
from multiexport.jit_runner import JitRunner
from multiexport.manifest import Manifest, write_bytes_atomic, write_text_atomic
from multiexport.signature import Signature
from multiexport.weights import WEIGHTS_FILE, LiftedWeights, embedded, iter_safetensors, module_function, plan

FILES = {
    "exported": "model.jax_exported",
    "stablehlo_bytecode": "model.mlirbc",
    "stablehlo_text": "model.mlir",
    "hlo_text": "model.hlo.txt",
    "example_inputs": EXAMPLE_INPUTS,
}
# Past this many bytes of baked constants the text forms (.mlir, .hlo.txt) are skipped: they print every
# weight in decimal, ~3x the binary size, and take longer to write than the export itself.
TEXT_LIMIT_BYTES = 16 << 20
# jax.export promises that a serialized artifact keeps working with JAX releases of the next 6 months.
COMPATIBILITY_DAYS = 180


def export_module(fn: Callable[..., Any], signature: Signature, options: ExportOptions = ExportOptions(),
                  lifted: LiftedWeights | None = None):
    """`jax.export.Exported` of the signature's flat function; with `lifted`, its weights are trailing parameters."""
    import jax
    from jax import export

    kwargs = {"platforms": tuple(options.platforms)} if options.platforms else {}
    flat, weight_specs = module_function(fn, signature, lifted)
    return export.export(jax.jit(flat, keep_unused=options.keep_unused), **kwargs)(*signature.specs, *weight_specs)


def parameter_binding(exported, n_inputs: int) -> tuple[list[bool], list[int | None]]:
    """Per input leaf: whether the module reads it, and its parameter index among the module's leaves."""
    kept = sorted(exported.module_kept_var_idx)
    index = {leaf: pos for pos, leaf in enumerate(kept)}
    return [i in index for i in range(n_inputs)], [index.get(i) for i in range(n_inputs)]


class XlaBackend(Backend):
    name = "xla"
    requires = ("jax", "jaxlib")

    def _export_impl(self, fn, signature: Signature, out_dir: Path, options: ExportOptions) -> Manifest:
        import jax
        from jax._src.export import serialization

        lifted = plan(fn, signature, options.external_weights)
        exported = export_module(fn, signature, options, lifted)
        used, params = parameter_binding(exported, len(signature.inputs))
        write_bytes_atomic(out_dir / FILES["exported"], bytes(exported.serialize()))
        write_bytes_atomic(out_dir / FILES["stablehlo_bytecode"], bytes(exported.mlir_module_serialized))
        files = {k: FILES[k] for k in ("exported", "stablehlo_bytecode")}
        weights = lifted.write(out_dir) if lifted else embedded(signature)
        if lifted:
            files["weights"] = WEIGHTS_FILE
        warnings = list(signature.warnings)
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
            lowered = jax.jit(flat, keep_unused=options.keep_unused).lower(*signature.specs, *weight_specs)
            write_text_atomic(out_dir / FILES["hlo_text"], lowered.as_text(dialect="hlo"))
            files["hlo_text"] = FILES["hlo_text"]

        if write_example_inputs(signature, out_dir):
            files["example_inputs"] = FILES["example_inputs"]
        if exported.ordered_effects:
            warnings.append(f"ordered effects {exported.ordered_effects}: the module takes token arguments first")

        names = [leaf.name for leaf in signature.inputs] + list(lifted.names if lifted else [])
        kept_names = [names[i] for i in sorted(exported.module_kept_var_idx)]
        created = utc_now()
        until = dt.datetime.fromisoformat(created) + dt.timedelta(days=COMPATIBILITY_DAYS)
        return Manifest(
            backend=self.name,
            target=signature.name,
            inputs=bindings(signature.inputs, used, params),
            outputs=bindings(signature.outputs, [True] * len(signature.outputs), range(len(signature.outputs))),
            keep_unused=options.keep_unused,
            symbolic_dims=list(signature.symbolic_dims),
            files=files,
            versions={
                **base_versions(),
                "jax": jax.__version__,
                "jaxlib": dist_version("jaxlib"),
                "calling_convention_version": str(exported.calling_convention_version),
                "serialization_version": str(getattr(serialization, "_SERIALIZATION_VERSION", "unknown")),
            },
            created=created,
            weights=weights,
            format={
                # The weights' copies on disk: model.jax_exported embeds the same StableHLO as model.mlirbc;
                # lifted weights are stored once, in weights.safetensors.
                "weight_copies": 1 if lifted else (2 if baked else 0),
                "weights": (
                    f"baked weights lifted to the module's trailing parameters ({', '.join(lifted.names[:3])}"
                    f"{', ...' if len(lifted.names) > 3 else ''}), stored in {WEIGHTS_FILE}; the runner puts them on "
                    "the device once at load and passes them to every call") if lifted else (
                    "embedded as constants in the module" if baked else "no baked weights"),
                "platforms": list(exported.platforms),
                # The module's positional arguments in order: a platform index comes first when
                # lowered for several platforms; then the kept leaves.
                "module_args": (["<platform_index: int32 scalar>"] if multi_platform else []) + kept_names,
                "module_results": [o.name for o in signature.outputs],
                "nr_devices": exported.nr_devices,
                "uses_shape_polymorphism": bool(signature.symbolic_dims),
                "compatible_until": until.date().isoformat(),
                "compatibility_note": (
                    f"jax.export guarantees {COMPATIBILITY_DAYS} days of backward compatibility: JAX/PJRT "
                    "consumers released before this date run the artifact with the same semantics"
                ),
            },
            warnings=warnings,
        )

    def _gpu_status_impl(self) -> Availability:
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError as exc:
            return Availability(False, f"JAX {jax.__version__} sees no GPU ({' '.join(str(exc).split())[:200]}); "
                                       "install the CUDA plugin: pip install 'multiexport[gpu]'")
        return Availability(True, f"{len(gpus)} GPU(s): {', '.join(d.device_kind for d in gpus)}")

    def _load_impl(self, manifest: Manifest, directory: Path, device: str) -> Runner:
        import jax
        from jax import export

        try:
            exported = export.deserialize(bytearray((directory / manifest.files["exported"]).read_bytes()))
        except Exception as exc:
            raise ArtifactError(f"Artifact '{directory}' | cannot deserialize {manifest.files['exported']}: {exc}") from exc
        tensors = external_tensors(manifest)
        expected_inputs = len(manifest.inputs) + len(tensors)
        if len(exported.in_avals) != expected_inputs or len(exported.out_avals) != len(manifest.outputs):
            raise ArtifactError(
                f"Artifact '{directory}' | module has {len(exported.in_avals)} inputs / {len(exported.out_avals)} outputs, "
                f"manifest lists {expected_inputs} / {len(manifest.outputs)}"
                + (f" ({len(manifest.inputs)} leaves + {len(tensors)} lifted weights)" if tensors else "")
            )
        platform = {"cpu": "cpu", "gpu": "cuda"}[device]
        if platform not in exported.platforms:
            raise RunError(
                f"Artifact '{directory}' | exported for {', '.join(exported.platforms)}, expected {platform}: "
                f"re-export with --platforms {','.join([*exported.platforms, platform])}"
            )
        try:
            jax_device = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        except RuntimeError as exc:
            raise RunError(f"Device '{device}' | JAX sees none: {exc}") from exc
        weights = load_weights(directory, manifest, jax_device) if tensors else []
        return XlaRunner(manifest, directory, device, exported, jax_device, weights)


def external_tensors(manifest: Manifest) -> list[str]:
    """Names of the lifted weights an artifact keeps outside its module, in parameter order."""
    if manifest.weights.get("storage") != "external":
        return []
    return [t["name"] for t in manifest.weights.get("tensors", [])]


def load_weights(directory: Path, manifest: Manifest, jax_device) -> list[Any]:
    """The lifted weights on `jax_device`, one tensor at a time from the file's memory map.

    Each tensor is paged in, copied to the device and unmapped before the next, so the host holds the
    device copy and at most one mapped tensor (on CPU the device copy is host memory too).
    """
    import jax

    path = directory / manifest.weights.get("file", WEIGHTS_FILE)
    names = external_tensors(manifest)
    out = []
    for (name, array), expected in zip(iter_safetensors(path, names), manifest.weights["tensors"]):
        if list(array.shape) != expected["shape"] or array.dtype.name != expected["dtype"]:
            raise ArtifactError(f"Weight '{name}' | got {array.dtype.name}{list(array.shape)} in {path.name}, expected "
                                f"{expected['dtype']}{expected['shape']} (the manifest's)")
        out.append(jax.block_until_ready(jax.device_put(array, jax_device)))
        del array
    return out


class XlaRunner(JitRunner):
    """Compiles the deserialized module once per input shape and runs it through PJRT."""

    calling_path = "jax.jit(Exported.call) on PJRT; inputs committed to the device with jax.device_put"

    def __init__(self, manifest, directory, device, exported, jax_device, weights=()):
        # Lifted weights are on the device since load and passed after the leaves.
        super().__init__(manifest, directory, device, exported.call, jax_device, resident=weights)
        self.exported = exported


