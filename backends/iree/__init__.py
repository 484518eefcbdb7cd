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

import re
from pathlib import Path
from typing import Any

from multiexport.sdk import (
    WEIGHTS_FILE,
    ArtifactError,
    Availability,
    Backend,
    ExportError,
    FormatResult,
    Manifest,
    NoNativeSection,
    RunError,
    RunOptions,
    Runner,
    concrete_specs,
    embedded,
    evaluate_dim,
    export_module,
    leaf_binding,
    module_interface,
    parse_dtype,
    plan,
    present,
    tpu_only,
    usable_cpus,
    write_bytes_atomic,
)

from .compile import (
    PRECISION_FLAGS,
    compile_exported,
    compile_flags,
    cuda_arch,
    precision_facts as _precision,
    targets_for,
)
from .config import OPTIONS, CpuConfig, cpu_config
from .driver import CPU_DRIVERS, choose_driver
from .facts import IreeFacts
from .fixups import FUNCTION, PARAMETER_SCOPE, SHAPE_ASSERTIONS_WHY
from .native import IreeConsumer, check_iree_tools, iree_section
from .runner import IreeRunner
from .targets import DEVICE_TARGET, DRIVERS, MODULE

STABLEHLO = "model.mlirbc"
LIFTED_SOURCE = "model.mlir"  # with lifted weights the module mixes in IREE's util dialect: text, not VHLO bytecode
_ELEMENT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i1": "bool",
            "complex<f32>": "complex64", "complex<f64>": "complex128"}


class IreeBackend(Backend):
    name = "iree"
    summary = "IREE: StableHLO compiled ahead of time to a .vmfb (llvm-cpu, cuda)"
    requires = ("jax", "iree.compiler", "iree.runtime")
    extra = "iree"
    distributions = ("iree-base-compiler", "iree-base-runtime")
    color = "#9467bd"
    order = 40
    runtime_modules = ("iree.runtime",)
    facts_type = IreeFacts
    precisions = ("fp32", "fp16")
    precision_gaps = {p: "iree-compile has no post-training weight quantization for a float StableHLO module (its "
                         "integer paths take modules already quantized: QDQ ops in the input)"
                      for p in ("int8-dynamic", "int8")}
    carries_code = True  # a .vmfb holds compiled machine code (not inspected: the README says so)
    options = OPTIONS

    def _check_untrusted_impl(self, manifest: Manifest, directory: Path) -> None:
        # What can be checked without running anything: the manifest names no program of its own choosing.
        if manifest.native is not None:
            check_iree_tools(manifest.native, directory)

    def native_consumer(self):
        """the iree-base-runtime wheel's iree-run-module and iree-benchmark-module (`native.IreeConsumer`)."""

        return IreeConsumer()

    def _export_impl(self, fn, signature, out_dir: Path, options, resolved, frontend) -> FormatResult:
        targets, arch = targets_for(options.platforms)
        base_flags = [*compile_flags(targets, arch, x64=signature.x64), *PRECISION_FLAGS.get(options.precision, ())]
        # Lowered for cpu whatever the targets: the StableHLO of ordinary ops is the same for every
        # platform, and one module with no platform-index argument serves all IREE targets.
        lifted = plan(fn, signature, options.external_weights)
        n = len(signature.inputs)
        exported = export_module(fn, signature, keep_unused=options.keep_unused, platforms=("cpu",), lifted=lifted)
        config = cpu_config(resolved, targets, exported.mlir_module())
        flags = [*base_flags, *config.flags]
        sizes, dynamic_error = None, None
        try:
            stablehlo, notes, vmfb, flags = _compile(exported, targets, base_flags, config, lifted, n)
        except ExportError as exc:
            sizes = signature.example_sizes() or None
            if sizes is None:
                raise
            # IREE could not compile the symbolic module: specialise to the example's sizes, and say so.
            dynamic_error = getattr(exc, "diagnostics", str(exc))
            exported = export_module(fn, signature, keep_unused=options.keep_unused, platforms=("cpu",),
                                     lifted=lifted, specs=concrete_specs(signature, sizes))
            stablehlo, notes, vmfb, flags = _compile(exported, targets, base_flags, config, lifted, n)

        source = LIFTED_SOURCE if lifted else STABLEHLO
        write_bytes_atomic(out_dir / MODULE, vmfb)
        write_bytes_atomic(out_dir / source, stablehlo)
        files = {"module": MODULE, "stablehlo_text" if lifted else "stablehlo_bytecode": source}
        weights = lifted.write(out_dir) if lifted else embedded(signature)
        if lifted:
            files["weights"] = WEIGHTS_FILE
        leaf_names = [leaf.name for leaf in signature.inputs]
        args = module_interface(exported, leaf_names, lifted.names if lifted else ())
        used, params = leaf_binding(args, leaf_names)
        arg_index = [leaf_names.index(a.name) for a in args if a.kind == "leaf"]
        arg_leaves = [signature.inputs[i] for i in arg_index]
        drivers = {t: DRIVERS[t] for t in targets}
        choice = None
        if "llvm-cpu" in targets:
            choice = _choose_driver(resolved["driver"], out_dir, files, signature, arg_index)
            drivers["llvm-cpu"] = choice["driver"]
        warnings = []
        try:
            native = iree_section([(i, _at_sizes(signature.inputs[i], sizes)) for i in arg_index],
                                  [_at_sizes(leaf, sizes) for leaf in signature.outputs], driver=drivers[targets[0]],
                                  module=MODULE, function=FUNCTION,
                                  parameters=f"{PARAMETER_SCOPE}={WEIGHTS_FILE}" if lifted else None)
        except NoNativeSection as exc:
            native = None
            warnings.append(f"no native section: {exc}")
        if sizes is not None:
            dynamic_error = present(dynamic_error, "set with sizes, when the symbolic module failed")
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            warnings.append(
                f"specialised: IREE could not compile the symbolic module, so this artifact is compiled for "
                f"{shown} only (every leaf at the example's shape); other sizes are not supported by it. IREE said: "
                f"{dynamic_error.splitlines()[0][:500]}")
        if notes["custom_call_targets"]:
            warnings.append(f"the module calls custom call targets {notes['custom_call_targets']}")
        declaration = _declaration(vmfb)
        precision = _precision(options.precision, exported.mlir_module()) if options.precision != "fp32" else None
        return FormatResult(
            files=files, used=used, params=params, output_params=list(range(len(signature.outputs))),
            versions=_iree_versions(),
            requires={"iree_runtime": _iree_versions()["iree_base_runtime"],
                      "note": "an IREE runtime of the same release as the compiler (a .vmfb is tied to its IREE "
                              "version); llvm-cpu code needs this host's CPU features"},
            format=IreeFacts(
                weights=(
                    f"baked weights lifted out of the module as IREE parameters (util.global bound to "
                    f"#stream.parameter.named<\"{PARAMETER_SCOPE}\"::\"NAME\">, NAME as in the manifest's "
                    f"weights.tensors), stored in {WEIGHTS_FILE}; runtimes load them with "
                    f"--parameters={PARAMETER_SCOPE}={WEIGHTS_FILE} (iree.runtime: ParameterIndex + "
                    "create_io_parameters_module)") if lifted else (
                    "embedded as constants in the .vmfb" if weights["embedded_bytes"] else "no baked weights"),
                target_backends=targets,
                drivers=drivers,
                driver_choice=choice,
                compile_flags=flags,
                cpu_config=config.to_json() if flags[len(base_flags):] == list(config.flags) else {
                    **config.to_json(), "flags": [], "data_tiling": False, "im2col": False,
                    "rejected": f"iree-compile rejected the module with {' '.join(config.flags)}: compiled without"},
                compile_command=["iree-compile", source, "--iree-input-type=stablehlo",
                                 *[f"--iree-hal-target-backends={t}" for t in targets], *flags, "-o", MODULE],
                host_cpu_note=(
                    "llvm-cpu code uses this host's CPU features (--iree-llvmcpu-target-cpu=host) and may not "
                    "run on older CPUs; recompile the StableHLO with --iree-llvmcpu-target-cpu=generic to ship "
                    "to other machines") if "llvm-cpu" in targets else None,
                function=FUNCTION,
                module_signature=declaration,
                module_args=[str(a.name) for a in args if a.kind == "leaf"],
                module_results=[leaf.name for leaf in signature.outputs],
                dynamic=sizes is None and bool(signature.symbolic_dims),
                specialised_to=sizes,
                dynamic_compile_error=dynamic_error,
                stablehlo={"lowered_for": "cpu", **notes, "shape_assertions_why": SHAPE_ASSERTIONS_WHY},
            ),
            warnings=warnings, weights=weights, fixed_dims=sizes,
            platforms=["cpu" if t == "llvm-cpu" else "cuda" for t in targets],
            declared=_declared(declaration, arg_leaves, signature.outputs), native=native, precision=precision,
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


def _driver(facts: IreeFacts, directory: Path, target: str) -> str:
    """The driver the export chose for `target` (format.drivers), checked: the manifest is data."""
    chosen = facts.drivers.get(target, DRIVERS[target])
    allowed = CPU_DRIVERS if target == "llvm-cpu" else (DRIVERS[target],)
    if chosen not in allowed:
        raise ArtifactError(f"Artifact '{directory}' | manifest field format.drivers.{target} is {ascii(chosen)[:60]}, "
                            f"expected one of {', '.join(allowed)}")
    return chosen


def _compile(exported, targets, base_flags: list[str], config: CpuConfig, lifted, n: int):
    """compile_exported with the performance flags, and again without them if IREE rejects the module with
    them (a flag's bug must not cost the artifact): (stablehlo, notes, vmfb, the flags used)."""
    flags = [*base_flags, *config.flags]
    try:
        return (*compile_exported(exported, targets, flags, lifted, n), flags)
    except ExportError:
        if not config.flags:
            raise
    return (*compile_exported(exported, targets, base_flags, lifted, n), list(base_flags))


def _choose_driver(option: str, out_dir: Path, files: dict[str, str], signature, arg_index: list[int]) -> dict[str, Any]:
    """The llvm-cpu driver: the option's, or local-sync and local-task timed on the example inputs."""
    if option != "auto":
        return {"driver": option, "rule": f"set by the backend option iree.driver={option}"}

    feed = signature.example_feed()
    arrays = [feed[signature.inputs[i].name] for i in arg_index]
    weights = out_dir / files["weights"] if "weights" in files else None
    try:
        return choose_driver(out_dir / MODULE, weights, arrays, len(signature.outputs), usable_cpus())
    except Exception as exc:  # a module the runtime cannot run is the load check's to report, in its words
        return {"driver": DRIVERS["llvm-cpu"], "rule": f"not measured ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}): IREE's default driver"}


def _at_sizes(leaf, sizes: dict[str, int] | None):
    """The leaf with the symbolic dims a specialised build fixed written as their sizes."""
    import dataclasses


    if not sizes or not leaf.is_symbolic:
        return leaf
    return dataclasses.replace(leaf, shape=tuple(d if isinstance(d, int) else evaluate_dim(d, sizes)
                                                 for d in leaf.shape))


def _declaration(vmfb: bytes) -> str:
    """The compiled function's ABI declaration, as IREE reflects it (`sync func @main(...)`)."""
    import iree.runtime as rt

    module = rt.VmModule.copy_buffer(rt.VmInstance(), vmfb)
    function = module.lookup_function(FUNCTION)
    return function.reflection.get("iree.abi.declaration", "") if function is not None else ""


def _declared(declaration: str, args, outputs) -> dict[str, str]:
    """Leaf -> dtype as the compiled module declares it (integers by width: IREE's types are signless)."""
    inputs, _, results = declaration.partition("->")
    found: dict[str, str] = {}
    for leaves, text in ((args, inputs), (outputs, results)):
        types = re.findall(r"tensor<(?:[^<>]*?x)?((?:complex<[a-z0-9]+>)|[a-z]+[0-9]+)>", text)
        if len(types) != len(leaves):
            continue  # a declaration we cannot read: no claim either way
        for leaf, element in zip(leaves, types):
            if element in _ELEMENT:
                found[leaf.name] = _ELEMENT[element]
            elif element.startswith(("i", "si", "ui")):
                width = int(re.sub(r"\D", "", element))
                same = parse_dtype(leaf.dtype).itemsize * 8 == width if leaf.dtype != "bool" else False
                found[leaf.name] = leaf.dtype if same else f"int{width}"
    return found


def _iree_versions() -> dict[str, str]:
    from importlib.metadata import version

    from iree.compiler import version as compiler_version
    from iree.runtime import version as runtime_version

    return {
        "iree_base_compiler": version("iree-base-compiler"),
        "iree_base_runtime": version("iree-base-runtime"),
        "iree_compiler_build": f"{compiler_version.VERSION} @ {compiler_version.REVISIONS.get('IREE', '')}",
        "iree_runtime_build": f"{runtime_version.VERSION} @ {runtime_version.REVISIONS.get('IREE', '')}",
    }


BACKEND = IreeBackend
