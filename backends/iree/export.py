"""The steps of IREE's export, each a function: compile the module, write its files, choose the CPU driver, and
describe the result.

A symbolic module IREE cannot compile fails here with IREE's own words; the export driver's static-size fallback
(multiexport.exporting.static_fallback) then compiles one module per requested size, as for every format, so the
artifact holds each size a compare checks, not the example's alone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from multiexport.sdk import (
    WEIGHTS_FILE,
    ExportError,
    ExportJob,
    Leaf,
    LiftedWeights,
    NoNativeSection,
    Signature,
    embedded,
    export_module,
    parse_dtype,
    plan,
    usable_cpus,
    write_bytes_atomic,
)

from .compile import PRECISION_FLAGS, compile_exported, compile_flags, targets_for
from .config import CpuConfig, IreeOptions, cpu_config
from .driver import choose_driver
from .facts import IreeFacts
from .fixups import FUNCTION, PARAMETER_SCOPE, SHAPE_ASSERTIONS_WHY
from .native import iree_section
from .targets import DRIVERS, MODULE

STABLEHLO = "model.mlirbc"
LIFTED_SOURCE = "model.mlir"  # with lifted weights the module mixes in IREE's util dialect: text, not VHLO bytecode
_ELEMENT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i1": "bool",
            "complex<f32>": "complex64", "complex<f64>": "complex128"}


@dataclass(frozen=True)
class Compiled:
    """One compiled module and how it was made.

    exported: the jax.export module compiled; stablehlo: the source written beside the .vmfb; notes: what
    compile_exported found in the module (custom calls, shape assertions); vmfb: the compiled bytes.
    flags: the compile flags used; base_flags: those without the performance flags; config: the CPU config chosen.
    targets: IREE's target backends; lifted: the lifted weights, or None.
    """

    exported: Any
    stablehlo: bytes
    notes: dict[str, Any]
    vmfb: bytes
    flags: list[str]
    base_flags: list[str]
    config: CpuConfig
    targets: list[str]
    lifted: LiftedWeights | None


def compile_module(job: ExportJob[IreeOptions]) -> Compiled:
    """The module lowered for cpu (the StableHLO of ordinary ops is the same for every platform, and one module
    with no platform-index argument serves all IREE targets) and compiled."""
    fn, signature, options = job.fn, job.signature, job.options
    targets, arch = targets_for(options.platforms)
    base_flags = [*compile_flags(targets, arch, x64=signature.x64), *PRECISION_FLAGS.get(options.precision, ())]
    lifted = plan(fn, signature, options.external_weights)
    exported = export_module(fn, signature, keep_unused=options.keep_unused, platforms=("cpu",), lifted=lifted)
    config = cpu_config(job.backend_options, targets, exported.mlir_module())
    made = _compile(exported, targets, base_flags, config, lifted, len(signature.inputs), bool(signature.symbolic_dims))
    return Compiled(exported, *made, base_flags, config, targets, lifted)


# What iree-compile says of a symbolic module it cannot take whatever the flags (a dynamic dimension it cannot
# lower): the static-size fallback answers those, so compiling once more without the performance flags is waste
# (1.5 CPU s on keras_hub_gpt2).
_SHAPE_REFUSALS = ("must be statically shaped", "failed to legalize operation 'stablehlo.dynamic_")


def _compile(exported: Any, targets: list[str], base_flags: list[str], config: CpuConfig,
             lifted: LiftedWeights | None, n: int, symbolic: bool = False
             ) -> tuple[bytes, dict[str, Any], bytes, list[str]]:
    """compile_exported with the performance flags, and again without them if IREE rejects the module with
    them (a flag's bug must not cost the artifact), unless a symbolic module was refused for its dynamic
    shapes (`_SHAPE_REFUSALS`): (stablehlo, notes, vmfb, the flags used)."""
    flags = [*base_flags, *config.flags]
    try:
        return (*compile_exported(exported, targets, flags, lifted, n), flags)
    except ExportError as exc:
        said = getattr(exc, "diagnostics", str(exc))
        if not config.flags or (symbolic and any(refusal in said for refusal in _SHAPE_REFUSALS)):
            raise
    return (*compile_exported(exported, targets, base_flags, lifted, n), list(base_flags))


def write_files(out_dir: Path, compiled: Compiled, signature: Signature) -> tuple[dict[str, str], dict[str, Any]]:
    """The .vmfb, its StableHLO source and the lifted weights: (files by role, the weights' facts)."""
    lifted = compiled.lifted
    source = LIFTED_SOURCE if lifted else STABLEHLO
    write_bytes_atomic(out_dir / MODULE, compiled.vmfb)
    write_bytes_atomic(out_dir / source, compiled.stablehlo)
    files = {"module": MODULE, "stablehlo_text" if lifted else "stablehlo_bytecode": source}
    weights = lifted.write(out_dir) if lifted else embedded(signature)
    if lifted:
        files["weights"] = WEIGHTS_FILE
    return files, weights


def choose_cpu_driver(option: str, out_dir: Path, files: dict[str, str], signature: Signature,
                      arg_index: list[int]) -> dict[str, Any]:
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


def native_and_warnings(signature: Signature, arg_index: list[int], compiled: Compiled, driver: str
                        ) -> tuple[dict[str, Any] | None, list[str]]:
    """The native section for iree-run-module (None, with a warning saying why, when it cannot take the artifact)
    and the export's warnings: custom call targets."""
    warnings = []
    try:
        native = iree_section([(i, signature.inputs[i]) for i in arg_index], list(signature.outputs), driver=driver,
                              module=MODULE, function=FUNCTION,
                              parameters=f"{PARAMETER_SCOPE}={WEIGHTS_FILE}" if compiled.lifted else None)
    except NoNativeSection as exc:
        native = None
        warnings.append(f"no native section: {exc}")
    if compiled.notes["custom_call_targets"]:
        warnings.append(f"the module calls custom call targets {compiled.notes['custom_call_targets']}")
    return native, warnings


def facts_of(compiled: Compiled, signature: Signature, weights: dict[str, Any], drivers: dict[str, str],
             choice: dict[str, Any] | None, declaration: str, args: list[Any]) -> IreeFacts:
    """The format facts: targets, drivers, flags and the command that reproduces the .vmfb, the ABI."""
    targets, flags, config, lifted = compiled.targets, compiled.flags, compiled.config, compiled.lifted
    source = LIFTED_SOURCE if lifted else STABLEHLO
    return IreeFacts(
        weights=(
            f"baked weights lifted out of the module as IREE parameters (util.global bound to "
            f"#stream.parameter.named<\"{PARAMETER_SCOPE}\"::\"NAME\">, NAME as in the manifest's "
            f"weights.tensors), stored in {WEIGHTS_FILE}; runtimes load them with "
            f"--parameters={PARAMETER_SCOPE}={WEIGHTS_FILE} (iree.runtime: ParameterIndex.load(path, "
            "mode=\"file_async\") + create_io_parameters_module: read into the device's buffers, not mapped beside them)") if lifted else (
            "embedded as constants in the .vmfb" if weights["embedded_bytes"] else "no baked weights"),
        target_backends=targets,
        drivers=drivers,
        driver_choice=choice,
        compile_flags=flags,
        cpu_config=config.to_json() if flags[len(compiled.base_flags):] == list(config.flags) else {
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
        dynamic=bool(signature.symbolic_dims),
        stablehlo={"lowered_for": "cpu", **compiled.notes, "shape_assertions_why": SHAPE_ASSERTIONS_WHY},
    )


def declaration_of(vmfb: bytes) -> str:
    """The compiled function's ABI declaration, as IREE reflects it (`sync func @main(...)`)."""
    import iree.runtime as rt

    module = rt.VmModule.copy_buffer(rt.VmInstance(), vmfb)
    function = module.lookup_function(FUNCTION)
    return function.reflection.get("iree.abi.declaration", "") if function is not None else ""


def declared_dtypes(declaration: str, args: list[Leaf], outputs: list[Leaf]) -> dict[str, str]:
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


def iree_versions() -> dict[str, str]:
    """The compiler's and runtime's distributions and builds."""
    from iree.compiler import version as compiler_version
    from iree.runtime import version as runtime_version

    return {
        "iree_base_compiler": version("iree-base-compiler"),
        "iree_base_runtime": version("iree-base-runtime"),
        "iree_compiler_build": f"{compiler_version.VERSION} @ {compiler_version.REVISIONS.get('IREE', '')}",
        "iree_runtime_build": f"{runtime_version.VERSION} @ {runtime_version.REVISIONS.get('IREE', '')}",
    }
