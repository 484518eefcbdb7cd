"""IREE: the signature's StableHLO compiled ahead of time into a `.vmfb`, run by IREE's own runtimes.

Export lowers the flat function with jax.export (for the cpu platform), adapts the StableHLO where
IREE 3.13 needs it (`fixups.prepare_stablehlo`), and compiles it with iree.compiler for `llvm-cpu` with
this host's CPU features and, when asked and a GPU is here, for `cuda`. A 64-bit target keeps its
64-bit types (IREE would demote them). When IREE cannot compile a symbolic batch the artifact is built
for the example's sizes only and says so (`supports.dims`), and compare checks it at those sizes only.
The artifact holds the `.vmfb`, the StableHLO that was compiled (to recompile with other flags), the
manifest's native section: the argv of IREE's own native tools (example inputs in `inputs/`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from multiexport.sdk import (
    ArtifactError,
    Availability,
    Backend,
    BackendFacts,
    ExportJob,
    FormatResult,
    Intermediates,
    IntermediatesRequest,
    Manifest,
    Presentation,
    RunError,
    RunOptions,
    Runner,
    Site,
    leaf_binding,
    module_interface,
    tpu_only,
)

from .compile import (
    cuda_arch,
    precision_facts as _precision,
)
from .config import IreeOptions
from .driver import CPU_DRIVERS
from .export import (  # noqa: F401  (STABLEHLO, LIFTED_SOURCE: re-exported, they were defined here)
    LIFTED_SOURCE,
    STABLEHLO,
    choose_cpu_driver,
    compile_module,
    declaration_of,
    declared_dtypes,
    facts_of,
    iree_versions,
    native_and_warnings,
    write_files,
)
from .facts import IreeFacts
from .intermediates import iree_intermediates, reduced_iree
from .native import IreeConsumer, check_iree_tools
from .runner import IreeRunner
from .targets import DEVICE_TARGET, DRIVERS


class IreeBackend(Backend):
    spec = BackendFacts(
        name="iree",
        requires=("jax", "iree.compiler", "iree.runtime"),
        extra="iree",
        distributions=("iree-base-compiler", "iree-base-runtime"),
        runtime_modules=("iree.runtime",),
        facts_type=IreeFacts,
        options_type=IreeOptions,
        precisions=("fp32", "fp16"),
        precision_gaps={p: "iree-compile has no post-training weight quantization for a float StableHLO module (its "
                           "integer paths take modules already quantized: QDQ ops in the input)"
                        for p in ("int8-dynamic", "int8")},
        carries_code=True,  # a .vmfb holds compiled machine code (not inspected: the README says so)
        export_memory=(2.0, 0.5), runner_memory=(2.0, 0.25),  # measured peaks, docs/large-models.md "Memory"
        export_cost=3.9,  # median export seconds over the compare_time zoo (benchmarks/README.md)
        needs_target=False, export_modules=("iree.compiler",),
    )
    presentation = Presentation(summary="IREE: StableHLO compiled ahead of time to a .vmfb (llvm-cpu, cuda)",
                                color="#9467bd", order=40)

    def _check_untrusted_impl(self, manifest: Manifest, directory: Path) -> None:
        # What can be checked without running anything: the manifest names no program of its own choosing.
        if manifest.native is not None:
            check_iree_tools(manifest.native, directory)

    def native_consumer(self):
        """the iree-base-runtime wheel's iree-run-module and iree-benchmark-module (`native.IreeConsumer`)."""

        return IreeConsumer()

    def _export_impl(self, job: ExportJob[IreeOptions]) -> FormatResult:
        signature, options, out_dir = job.signature, job.options, job.out_dir
        compiled = compile_module(job)
        files, weights = write_files(out_dir, compiled, signature)
        lifted, targets = compiled.lifted, compiled.targets
        leaf_names = [leaf.name for leaf in signature.inputs]
        args = module_interface(compiled.exported, leaf_names, lifted.names if lifted else ())
        used, params = leaf_binding(args, leaf_names)
        arg_index = [leaf_names.index(str(a.name)) for a in args if a.kind == "leaf"]  # a leaf's is its name
        drivers = {t: DRIVERS[t] for t in targets}
        choice = None
        if "llvm-cpu" in targets:
            choice = choose_cpu_driver(job.backend_options.driver, out_dir, files, signature, arg_index)
            drivers["llvm-cpu"] = choice["driver"]
        native, warnings = native_and_warnings(signature, arg_index, compiled, drivers[targets[0]])
        declaration = declaration_of(compiled.vmfb)
        precision = (_precision(options.precision, compiled.exported.mlir_module())
                     if options.precision != "fp32" else None)
        return FormatResult(
            files=files, used=used, params=params, output_params=list(range(len(signature.outputs))),
            versions=iree_versions(),
            requires={"iree_runtime": iree_versions()["iree_base_runtime"],
                      "note": "an IREE runtime of the same release as the compiler (a .vmfb is tied to its IREE "
                              "version); llvm-cpu code needs this host's CPU features"},
            format=facts_of(compiled, signature, weights, drivers, choice, declaration, args),
            warnings=warnings, weights=weights,
            platforms=["cpu" if t == "llvm-cpu" else "cuda" for t in targets],
            declared=declared_dtypes(declaration, [signature.inputs[i] for i in arg_index], list(signature.outputs)),
            native=native, precision=precision,
        )

    def _gpu_status_impl(self) -> Availability:
        import iree.runtime as rt

        if "cuda" not in rt.query_available_drivers():
            return Availability(False, f"this IREE runtime has no cuda driver ({', '.join(rt.query_available_drivers())})")
        try:
            devices = rt.get_driver("cuda").query_available_devices()
        except RuntimeError as exc:  # e.g. libcuda.so missing: IREE's own words
            return Availability(False, f"IREE's cuda driver: {' '.join(str(exc).split())[:240]}")
        if not devices:
            return Availability(False, "IREE's cuda driver sees no device")
        arch = cuda_arch()
        if arch is None:
            return Availability(False, "no nvidia-smi to read the GPU's architecture, which IREE compiles for")
        return Availability(True, f"{len(devices)} CUDA device(s), compiling for {arch}")

    def classify(self, exc: BaseException, stage: str) -> tuple[str, str] | None:

        return tpu_only(exc, "IREE's llvm-cpu") if stage == "export" else None

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        target = DEVICE_TARGET[options.device]
        facts = IreeFacts.from_json(manifest.format, f"Artifact '{directory}'")
        compiled = facts.target_backends
        if target not in compiled:
            raise RunError(
                f"Artifact '{directory}' | compiled for {', '.join(map(str, compiled))}, expected {target}: re-export "
                f"with --platforms {','.join(['cpu', 'cuda'] if target == 'cuda' else ['cpu'])} on a machine with that "
                "device", category="unsupported-platform")
        return IreeRunner(manifest, directory, options, _driver(facts, directory, target), facts)

    def _intermediates_impl(self, request: IntermediatesRequest) -> Intermediates:
        """The shipped StableHLO instrumented and re-compiled with the artifact's flags (intermediates.py)."""
        return iree_intermediates(request)

    def _reduced_artifact_impl(self, request: IntermediatesRequest, site: Site, operands: Sequence[Site],
                               op_module: bytes, out_dir: Path) -> str:
        """The op alone compiled with the artifact's flags (intermediates.py)."""
        return reduced_iree(request, op_module, out_dir)


def _driver(facts: IreeFacts, directory: Path, target: str) -> str:
    """The driver the export chose for `target` (format.drivers), checked: the manifest is data."""
    chosen = facts.drivers.get(target, DRIVERS[target])
    allowed = CPU_DRIVERS if target == "llvm-cpu" else (DRIVERS[target],)
    if chosen not in allowed:
        raise ArtifactError(f"Artifact '{directory}' | manifest field format.drivers.{target} is {ascii(chosen)[:60]}, "
                            f"expected one of {', '.join(allowed)}")
    return chosen


BACKEND = IreeBackend
