"""XLA / PJRT through `jax.export`: serialized Exported, StableHLO bytecode and text, HLO text.

The function exported is the signature's flat function of named leaves, so the artifact carries no
custom pytree and deserializes in any process. The module's own `main` is the truth about its
arguments (`export.stablehlo.module_interface`): each input leaf's `param` is its real position there,
after a platform index (several platforms) and tokens (ordered effects), and `format.module_args` lists
every argument. The runner is `jax.jit(Exported.call)` on PJRT, in 64-bit mode when the artifact is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiexport.sdk import (
    ArtifactError,
    Availability,
    Backend,
    BackendFacts,
    ExportJob,
    FormatResult,
    Intermediates,
    IntermediatesRequest,
    JitRunner,
    Manifest,
    NoOptions,
    Presentation,
    RunError,
    RunOptions,
    Runner,
    export_module,
    iter_safetensors,
    leaf_binding,
    module_aliases,
    module_attributes,
    module_interface,
    plan,
    tpu_only,
)

from .export import (  # noqa: F401  (FILES, TEXT_LIMIT_BYTES: re-exported, they were defined here)
    FILES,
    TEXT_LIMIT_BYTES,
    aliases_of,
    declared_dtypes,
    facts_of,
    native_section,
    requires_of,
    versions_of,
    write_module_files,
)
from .facts import XlaFacts
from .intermediates import xla_intermediates
from .native import PjrtConsumer


class XlaBackend(Backend):
    spec = BackendFacts(
        name="xla",
        requires=("jax", "jaxlib"),
        distributions=("jax", "jaxlib"),  # core dependencies: no extra
        runtime_modules=("jax",),
        facts_type=XlaFacts,
        precision_gaps={p: ("XLA's CPU compiler has no post-training quantization or float16 mode for a float32 "
                            "module: reduced precision is written in the JAX function itself (params cast with "
                            "astype, or a quantization library such as AQT), then exported like any function")
                        for p in ("fp16", "int8-dynamic", "int8")},
        export_memory=(1.5, 0.5), runner_memory=(1.5, 0.5),  # measured peaks, docs/large-models.md "Memory"
        export_cost=0.7,  # median export seconds over the compare_time zoo (benchmarks/README.md)
        needs_target=False,  # jax.export's module, which a compare hands its export workers
    )
    presentation = Presentation(summary="XLA/PJRT: serialized jax.export.Exported and StableHLO bytecode",
                                color="#1f77b4", order=10)

    def native_consumer(self):
        """pjrt_run on the PJRT C API (`native.PjrtConsumer`)."""

        return PjrtConsumer()

    def needs_target_for(self, backend_options, signature) -> bool:
        """The HLO text (written for a module of fixed shapes) is lowered from the function itself."""
        return not signature.symbolic_dims

    def _export_impl(self, job: ExportJob[NoOptions]) -> FormatResult:
        signature, options = job.signature, job.options
        lifted = plan(job.fn, signature, options.external_weights)
        exported = export_module(job.fn, signature, keep_unused=options.keep_unused, platforms=options.platforms,
                                 lifted=lifted, donate=True)
        leaf_names = [leaf.name for leaf in signature.inputs]
        args = module_interface(exported, leaf_names, lifted.names if lifted else ())
        used, params = leaf_binding(args, leaf_names)
        serialized = bytes(exported.serialize())
        files, weights, warnings = write_module_files(job, exported, serialized, lifted)
        attributes = module_attributes(exported)
        polymorphic = bool(attributes.get("jax.uses_shape_polymorphism", False))
        native = native_section(exported, args, signature, options, weights, job.out_dir, warnings, polymorphic)
        files["compile_options"] = native["compile_options"]
        return FormatResult(
            files=files, used=used, params=params, output_params=list(range(len(signature.outputs))),
            versions=versions_of(exported, serialized), requires=requires_of(exported, serialized),
            format=facts_of(exported, args, signature, lifted, weights, attributes,
                            aliases_of(module_aliases(exported), args, signature)), warnings=warnings,
            weights=weights, declared=declared_dtypes(exported, signature), platforms=list(exported.platforms),
            native=native)

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

    def _intermediates_impl(self, request: IntermediatesRequest) -> Intermediates:
        """The shipped module instrumented and re-compiled by XLA on the CPU (intermediates.py)."""
        return xla_intermediates(request)


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
