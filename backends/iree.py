"""IREE: the signature's StableHLO compiled ahead of time into a `.vmfb`, checked by IREE's own runtimes.

Export lowers the flat function with jax.export (for the cpu platform), adapts the StableHLO where
IREE 3.13 needs it (`prepare_stablehlo`), and compiles it with iree.compiler for `llvm-cpu` with this
host's CPU features and, when asked and a GPU is here, for `cuda`. The artifact holds the `.vmfb`, the
StableHLO that was compiled (`model.mlirbc`, to recompile with other flags), the example inputs as
`.npy` files in module argument order, and a manifest with the exact `iree-run-module` command line.

Two runners read the artifact directory alone: `IreeRunner` (iree.runtime in Python, what `load`
returns) and `run_native` / `native_benchmark`, which run the real `iree-run-module` /
`iree-benchmark-module` binaries on `.npy` files, no Python in the loop.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from multiexport.backend import (
    Availability,
    Backend,
    ExportOptions,
    Runner,
    base_versions,
    bindings,
    utc_now,
)
from multiexport.dtypes import parse_dtype
from multiexport.errors import ArtifactError, ExportError, RunError, leaf_message
from multiexport.feed import check_feed
from multiexport.manifest import Manifest, write_bytes_atomic
from multiexport.signature import Signature

from multiexport.weights import WEIGHTS_FILE, LiftedWeights, embedded, module_function, plan

from .xla import export_module, external_tensors, parameter_binding

FILES = {"module": "model.vmfb", "stablehlo_bytecode": "model.mlirbc"}
LIFTED_SOURCE = "model.mlir"  # with lifted weights the module mixes in IREE's util dialect: text, not VHLO bytecode
PARAMETER_SCOPE = "model"  # iree-run-module --parameters=model=weights.safetensors
FUNCTION = "main"
INPUT_DIR, OUTPUT_DIR = "inputs", "outputs"
RUN_TOOL, BENCH_TOOL = "iree-run-module", "iree-benchmark-module"
TARGETS = {"cpu": "llvm-cpu", "cuda": "cuda", "gpu": "cuda"}  # ExportOptions.platforms -> IREE target
DRIVERS = {"llvm-cpu": "local-task", "cuda": "cuda"}  # IREE target -> runtime HAL driver
DEVICE_TARGET = {"cpu": "llvm-cpu", "gpu": "cuda"}  # Runner device -> IREE target
_EXAMPLE_LIMIT_BYTES = 64 << 20
_MESSAGE_LIMIT = 3000

SHAPE_ASSERTIONS_WHY = (
    "jax.export guards symbolic dimensions with `shape_assertion` custom calls and jax 0.10 offers no "
    "DisabledSafetyCheck for them; IREE accepts them but drops them without checking (measured: a feed "
    "giving one symbolic dimension two different sizes ran and returned a result instead of failing). "
    "multiexport removes them explicitly and checks the same constraints (each symbolic dimension >= 1 "
    "and equal across leaves) in Runner.prepare and run_native before every call. A C/C++ caller must "
    "check them itself."
)


# -- StableHLO adaptations --------------------------------------------------------------------------------

def prepare_stablehlo(exported, weights: Sequence[str] = ()) -> tuple[bytes, dict[str, Any]]:
    """The Exported's StableHLO adapted for IREE, as portable bytecode, and what was changed.

    With `weights` (names of the lifted weights among the module's trailing arguments), the module is
    returned as text instead, with those arguments turned into IREE parameters (see `_bind_parameters`).

    1. `shape_assertion` custom calls are removed (see SHAPE_ASSERTIONS_WHY).
    2. `dynamic_broadcast_in_dim` ops get `known_nonexpanding_dimensions` for their dynamic operand
       dimensions, after composing chains of them ourselves. IREE lowers a dynamic broadcast only when
       it knows which dimensions expand, and its own chain folding drops the attribute. The annotation
       is sound for JAX's output: lax.broadcast_in_dim requires each operand dimension to be 1 or equal
       to its output dimension, so a symbolic (dynamic) one is never 1 by construction and never expands.
    3. A batch-free `dot_general` whose lhs leads with a dynamic free dimension and whose result has
       rank > 2 becomes a batched one against the rhs broadcast along that dimension. IREE would flatten
       it into a 2-D dot with `dynamic_reshape`, which IREE 3.13 cannot lower (flax Dense on
       [b, seq, d]); the batched form lowers straight to linalg and computes the same numbers.
    """
    from jax.extend import mlir as jmlir
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo as hlo

    notes = {"shape_assertions_removed": 0, "dynamic_broadcasts_annotated": 0, "dot_generals_batched": 0,
             "custom_call_targets": []}
    with _ir_context(), ir.Location.unknown():
        module = ir.Module.parse(exported.mlir_module())
        ops: list[Any] = []
        module.operation.walk(lambda op: (ops.append(op.operation), ir.WalkResult.ADVANCE)[1])
        for op in ops:
            if op.name == "stablehlo.custom_call":
                target = ir.StringAttr(op.attributes["call_target_name"]).value
                if target == "shape_assertion":
                    op.erase()
                    notes["shape_assertions_removed"] += 1
                elif target not in notes["custom_call_targets"]:
                    notes["custom_call_targets"].append(target)
            elif op.name == "stablehlo.dynamic_broadcast_in_dim":
                _annotate_broadcast(op, ir)
                notes["dynamic_broadcasts_annotated"] += 1
            elif op.name == "stablehlo.dot_general" and _batch_dot_general(op, ir, hlo):
                notes["dot_generals_batched"] += 1
        if weights:
            return _bind_parameters(module, weights, ir).encode(), notes
        version = hlo.get_version_from_compatibility_requirement(hlo.StablehloCompatibilityRequirement.WEEK_4)
        return bytes(jmlir.serialize_portable_artifact(module, version, False)), notes


def _bind_parameters(module, weights: Sequence[str], ir) -> str:
    """The module as text, its trailing `weights` arguments read from IREE parameters instead.

    `main` becomes the private `main_lifted`; a new `main` takes the leaves only, loads each weight from
    a `util.global` bound to `#stream.parameter.named<"model"::"params.Dense_0.kernel">` (the weight's
    name in weights.safetensors) and calls it. IREE then
    reads the values from the parameter file at load (mapped, not copied, where the device allows)
    instead of carrying them in the .vmfb: `iree-run-module --parameters=model=weights.safetensors`.
    """
    main = next(op for op in module.body.operations
                if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == FUNCTION)
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    ins, outs = [str(t) for t in ftype.inputs], [str(t) for t in ftype.results]
    leaves = len(ins) - len(weights)
    main.attributes["sym_name"] = ir.StringAttr.get(f"{FUNCTION}_lifted")
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    text = module.operation.get_asm(enable_debug_info=False).rstrip()
    if not text.endswith("}"):
        raise ExportError("Backend 'iree' | cannot bind parameters: the module's text does not end its body",
                          backend="iree", category="converter-error")
    # Symbols by position (a weight's name may hold characters MLIR identifiers cannot); keys by name.
    lines = [f'  util.global private @{FUNCTION}_weight_{k} = #stream.parameter.named<"{PARAMETER_SCOPE}"::"{w}"> : {t}'
             for k, (w, t) in enumerate(zip(weights, ins[leaves:]))]
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(ins[:leaves]))
    lines.append(f"  func.func @{FUNCTION}({args}) -> ({', '.join(outs)}) {{")
    lines += [f"    %w{k} = util.global.load @{FUNCTION}_weight_{k} : {t}" for k, t in enumerate(ins[leaves:])]
    operands = [f"%arg{i}" for i in range(leaves)] + [f"%w{k}" for k in range(len(weights))]
    results = ", ".join(f"%r#{i}" for i in range(len(outs)))
    lines.append(f"    %r:{len(outs)} = func.call @{FUNCTION}_lifted({', '.join(operands)}) : "
                 f"({', '.join(ins)}) -> ({', '.join(outs)})")
    lines.append(f"    return {results} : {', '.join(outs)}")
    lines.append("  }")
    return text[:-1] + "\n".join(lines) + "\n}\n"


def _ir_context():
    # The MLIR context jax itself parses exported modules in (func, stablehlo, chlo, sdy registered);
    # jax.extend.mlir exposes the dialects but not a context with the upstream ones loaded.
    from jax._src.interpreters import mlir

    return mlir.make_ir_context()


def _annotate_broadcast(op, ir) -> None:
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    inner = op.operands[0].owner
    if isinstance(inner, (ir.Operation, ir.OpView)) and inner.name == "stablehlo.dynamic_broadcast_in_dim":
        # Compose broadcast(broadcast(x)) into one broadcast of x, as IREE would, but keeping the facts.
        inner_dims = list(ir.DenseI64ArrayAttr(inner.attributes["broadcast_dimensions"]))
        op.operands[0] = inner.operands[0]
        dims = [dims[d] for d in inner_dims]
        op.attributes["broadcast_dimensions"] = ir.DenseI64ArrayAttr.get(dims)
    operand = ir.RankedTensorType(op.operands[0].type)
    op.attributes["known_nonexpanding_dimensions"] = ir.DenseI64ArrayAttr.get(
        [i for i in range(operand.rank) if operand.is_dynamic_dim(i)])


def _batch_dot_general(op, ir, hlo) -> bool:
    """Rewrite lhs[b, ...] . rhs[...] as a dot_general batched over b (rhs broadcast); True if done."""
    numbers = hlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lhs, rhs = op.operands[0], op.operands[1]
    lhs_type, rhs_type = ir.RankedTensorType(lhs.type), ir.RankedTensorType(rhs.type)
    result_type = ir.RankedTensorType(op.results[0].type)
    if (numbers.lhs_batching_dimensions or result_type.rank <= 2 or not lhs_type.is_dynamic_dim(0)
            or 0 in numbers.lhs_contracting_dimensions or not rhs_type.has_static_shape):
        return False
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(op):
        size = hlo.ReshapeOp(ir.RankedTensorType.get([1], i32), hlo.GetDimensionSizeOp(lhs, 0).result).result
        rest = hlo.ConstantOp(ir.DenseElementsAttr.get(np.asarray(rhs_type.shape, np.int32))).result
        shape = hlo.ConcatenateOp([size, rest], 0).result
        broadcast_type = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size(), *rhs_type.shape],
                                                 rhs_type.element_type)
        broadcast = hlo.DynamicBroadcastInDimOp(
            broadcast_type, rhs, shape, list(range(1, rhs_type.rank + 1)),
            known_nonexpanding_dimensions=list(range(rhs_type.rank)))
        batched = hlo.DotDimensionNumbers.get(
            [0], [0], list(numbers.lhs_contracting_dimensions), [d + 1 for d in numbers.rhs_contracting_dimensions])
        # Batch dims lead the result, then lhs free dims, then rhs free dims: the same order as before.
        new = hlo.DotGeneralOp(result_type, lhs, broadcast.result, batched)
        for name in ("precision_config", "algorithm"):
            if name in op.attributes:
                new.operation.attributes[name] = op.attributes[name]
    op.results[0].replace_all_uses_with(new.result)
    op.erase()
    return True


# -- compile ------------------------------------------------------------------------------------------------

def compile_flags(targets: Sequence[str], cuda_arch: str | None = None) -> list[str]:
    """iree-compile flags besides input type and target backends, per target."""
    flags = []
    if "llvm-cpu" in targets:
        flags.append("--iree-llvmcpu-target-cpu=host")  # this host's CPU features (recorded in the manifest)
    if "cuda" in targets:
        flags.append(f"--iree-cuda-target={cuda_arch}")
    return flags


def compile_vmfb(stablehlo: bytes, targets: Sequence[str], flags: Sequence[str], why: str = "") -> bytes:
    """Compile StableHLO (bytecode or text) to a .vmfb; IREE's rejection is ExportError 'compile-failed'.

    why: what we already know about the module that explains a failure, put before IREE's message.
    """
    from iree.compiler import CompilerToolError, compile_str

    try:
        return compile_str(stablehlo, target_backends=list(targets), input_type="stablehlo", extra_args=list(flags))
    except CompilerToolError as exc:
        said = _diagnostics(str(exc))
        error = ExportError(f"Backend 'iree' | iree-compile rejected the module for {', '.join(targets)}{why}: {said}",
                            backend="iree", category="compile-failed")
        error.diagnostics = said  # IREE's words alone, for callers that quote them
        raise error from exc


def _diagnostics(text: str) -> str:
    """IREE's own error lines from a CompilerToolError, without MLIR location suffixes, bounded in length."""
    body = text.split("Diagnostics:", 1)[-1].split("\n\nInvoked with:", 1)[0].strip()
    errors = [line.strip().split(" loc(", 1)[0] for line in body.splitlines() if "error:" in line]
    found = "\n".join(errors) if errors else body
    return found if len(found) <= _MESSAGE_LIMIT else found[:_MESSAGE_LIMIT] + " ..."


def _compile(exported, targets: Sequence[str], flags: Sequence[str],
             lifted: LiftedWeights | None = None, n_leaves: int = 0) -> tuple[bytes, dict[str, Any], bytes]:
    """(StableHLO given to IREE, what prepare_stablehlo changed, .vmfb) for one Exported."""
    names = list(lifted.names) if lifted else []
    weights = [names[i - n_leaves] for i in sorted(exported.module_kept_var_idx) if i >= n_leaves] if lifted else []
    stablehlo, notes = prepare_stablehlo(exported, weights)
    calls = notes["custom_call_targets"]
    why = (f" (it calls custom call targets {', '.join(calls)}: kernels of the JAX/XLA runtime, which IREE "
           "does not implement)") if calls else ""
    return stablehlo, notes, compile_vmfb(stablehlo, targets, flags, why)


def _targets(platforms: Sequence[str] | None) -> tuple[list[str], str | None]:
    """IREE targets for ExportOptions.platforms, and the CUDA architecture when cuda is asked for."""
    targets = []
    for platform in platforms or ("cpu",):
        if platform not in TARGETS:
            raise ExportError(f"Platform '{platform}' | unknown to IREE, expected one of cpu, cuda",
                              backend="iree", category="unsupported-platform")
        if TARGETS[platform] not in targets:
            targets.append(TARGETS[platform])
    arch = None
    if "cuda" in targets:
        arch = _cuda_arch()
        if arch is None:
            raise ExportError(
                "Platform 'cuda' | got no visible NVIDIA GPU (nvidia-smi), expected one: IREE compiles for the "
                "GPU's architecture (sm_XX) and the artifact is checked on it",
                backend="iree", category="unsupported-platform")
    return targets, arch


def _cuda_arch() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    caps = proc.stdout.split()
    if proc.returncode != 0 or not caps:
        return None
    arch = "sm_" + caps[0].replace(".", "")
    # Measured: IREE 3.13 rejects sm_90 and sm_100 ("missing GPU target in #hal.executable.target") and
    # compiles sm_70..sm_89 and sm_120. It embeds PTX, which the driver JIT-compiles for newer GPUs.
    return _CUDA_FALLBACK.get(arch, arch)


_CUDA_FALLBACK = {"sm_90": "sm_89", "sm_90a": "sm_89", "sm_100": "sm_89", "sm_100a": "sm_89"}


# -- the backend ----------------------------------------------------------------------------------------------

class IreeBackend(Backend):
    name = "iree"
    requires = ("jax", "iree.compiler", "iree.runtime")
    extra = "iree"

    def _export_impl(self, fn, signature: Signature, out_dir: Path, options: ExportOptions) -> Manifest:
        import jax

        targets, arch = _targets(options.platforms)
        flags = compile_flags(targets, arch)
        # Lowered for cpu whatever the targets: the StableHLO of ordinary ops is the same for every
        # platform, and one module with no platform-index argument serves all IREE targets.
        lowering = ExportOptions(keep_unused=options.keep_unused, platforms=("cpu",))
        lifted = plan(fn, signature, options.external_weights)
        n = len(signature.inputs)
        exported = export_module(fn, signature, lowering, lifted)
        sizes, dynamic_error = None, None
        try:
            stablehlo, notes, vmfb = _compile(exported, targets, flags, lifted, n)
        except ExportError as exc:
            sizes = _example_sizes(signature)
            if sizes is None:
                raise
            # IREE could not compile the symbolic module: specialise to the example's sizes, and say so.
            dynamic_error = getattr(exc, "diagnostics", str(exc))
            exported = _export_specialised(fn, signature, options, lifted)
            stablehlo, notes, vmfb = _compile(exported, targets, flags, lifted, n)

        source = LIFTED_SOURCE if lifted else FILES["stablehlo_bytecode"]
        write_bytes_atomic(out_dir / FILES["module"], vmfb)
        write_bytes_atomic(out_dir / source, stablehlo)
        files = {"module": FILES["module"], "stablehlo_text" if lifted else "stablehlo_bytecode": source}
        weights = lifted.write(out_dir) if lifted else embedded(signature)
        if lifted:
            files["weights"] = WEIGHTS_FILE
        used, params = parameter_binding(exported, len(signature.inputs))
        inputs, outputs = list(signature.inputs), list(signature.outputs)
        if sizes is not None:
            inputs = [dataclasses.replace(leaf, shape=tuple(ex.shape)) for leaf, ex in zip(inputs, signature.examples)]
            outputs = [dataclasses.replace(leaf, shape=tuple(a.shape)) for leaf, a in zip(outputs, exported.out_avals)]
        args = [leaf for leaf, p in zip(inputs, params) if p is not None]  # params count up in leaf order
        files.update(_write_example_inputs(out_dir, signature, args))

        warnings = list(signature.warnings)
        if sizes is not None:
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            warnings.append(
                f"specialised: IREE could not compile the symbolic module, so this artifact is compiled for "
                f"{shown} only (every leaf at the example's shape); other sizes are refused. IREE said: "
                f"{dynamic_error.splitlines()[0][:500]}")
        if notes["custom_call_targets"]:
            warnings.append(f"the module calls custom call targets {notes['custom_call_targets']}")
        opaque = sorted({leaf.dtype for leaf in [*args, *outputs] if not npy_can_carry(leaf.dtype)})
        if opaque:
            warnings.append(f"{', '.join(opaque)} has no .npy form: the native command needs raw inputs and outputs "
                            "(--input=SHAPExTYPE=@file.bin, --output=@file.bin); run_native refuses it")
        if exported.ordered_effects:
            warnings.append(f"ordered effects {exported.ordered_effects}: the module takes token arguments first")

        parameters = WEIGHTS_FILE if lifted else None
        command = native_command(args, outputs, targets[0], parameters=parameters)
        return Manifest(
            backend=self.name,
            target=signature.name,
            inputs=bindings(inputs, used, params),
            outputs=bindings(outputs, [True] * len(outputs), range(len(outputs))),
            keep_unused=options.keep_unused,
            symbolic_dims=[] if sizes is not None else list(signature.symbolic_dims),
            files=files,
            versions={**base_versions(), "jax": jax.__version__, **_iree_versions()},
            created=utc_now(),
            weights=weights,
            format={
                "weights": (
                    f"baked weights lifted out of the module as IREE parameters (util.global bound to "
                    f"#stream.parameter.named<\"{PARAMETER_SCOPE}\"::\"NAME\">, NAME as in the manifest's weights.tensors), stored in {WEIGHTS_FILE}; "
                    f"runtimes load them with --parameters={PARAMETER_SCOPE}={WEIGHTS_FILE} (iree.runtime: "
                    "ParameterIndex + create_io_parameters_module)") if lifted else (
                    "embedded as constants in the .vmfb" if weights["embedded_bytes"] else "no baked weights"),
                "target_backends": targets,
                "drivers": {t: DRIVERS[t] for t in targets},
                "compile_flags": flags,
                "compile_command": ["iree-compile", source, "--iree-input-type=stablehlo",
                                    *[f"--iree-hal-target-backends={t}" for t in targets], *flags,
                                    "-o", FILES["module"]],
                "host_cpu_note": (
                    "llvm-cpu code uses this host's CPU features (--iree-llvmcpu-target-cpu=host) and may not "
                    "run on older CPUs; recompile model.mlirbc with --iree-llvmcpu-target-cpu=generic to ship "
                    "to other machines") if "llvm-cpu" in targets else None,
                "function": FUNCTION,
                "module_signature": _declaration(vmfb),
                "module_args": [leaf.name for leaf in args],
                "module_results": [leaf.name for leaf in outputs],
                "native_command": command,
                "native_command_line": shlex.join(command),
                "native_command_note": (
                    f"run in the artifact directory after `mkdir -p {OUTPUT_DIR}`; {INPUT_DIR}/ holds the example "
                    "inputs as .npy in module argument order (replace them with yours, same names); outputs "
                    f"land in {OUTPUT_DIR}/ named by output alias"),
                "dynamic": sizes is None and bool(signature.symbolic_dims),
                "specialised_to": sizes,
                "dynamic_compile_error": dynamic_error,
                "stablehlo": {"lowered_for": "cpu", **notes, "shape_assertions_why": SHAPE_ASSERTIONS_WHY},
            },
            warnings=warnings,
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
        arch = _cuda_arch()
        if arch is None:
            return Availability(False, "no nvidia-smi to read the GPU's architecture, which IREE compiles for")
        return Availability(True, f"{len(devices)} CUDA device(s), compiling for {arch}")

    def _load_impl(self, manifest: Manifest, directory: Path, device: str) -> Runner:
        target = DEVICE_TARGET[device]
        compiled = manifest.format.get("target_backends", [])
        if target not in compiled:
            raise RunError(
                f"Artifact '{directory}' | compiled for {', '.join(compiled)}, expected {target}: re-export with "
                f"--platforms {','.join(['cpu', 'cuda'] if target == 'cuda' else ['cpu'])} on a machine with that device"
            )
        return IreeRunner(manifest, directory, device, DRIVERS[target])


def _example_sizes(signature: Signature) -> dict[str, int] | None:
    """Symbol -> size in the example values, or None when there are no symbols or no examples to read."""
    if not signature.symbolic_dims or any(ex is None for ex in signature.examples):
        return None
    sizes: dict[str, int] = {}
    for leaf, example in zip(signature.inputs, signature.examples):
        for dim, size in zip(leaf.shape, np.shape(example)):
            if dim in signature.symbolic_dims:  # plain symbols; expressions like 2*b follow from them
                sizes.setdefault(dim, int(size))
    return sizes


def _export_specialised(fn, signature: Signature, options: ExportOptions, lifted: LiftedWeights | None = None):
    """jax.export of the flat function at the example's concrete shapes."""
    import jax
    from jax import export

    specs = [jax.ShapeDtypeStruct(np.shape(ex), spec.dtype, weak_type=spec.weak_type)
             for spec, ex in zip(signature.specs, signature.examples)]
    flat, weight_specs = module_function(fn, signature, lifted)
    return export.export(jax.jit(flat, keep_unused=options.keep_unused), platforms=("cpu",))(*specs, *weight_specs)


def _write_example_inputs(out_dir: Path, signature: Signature, args) -> dict[str, str]:
    """The example value of each module argument as inputs/<alias>.npy, so the native command runs as is."""
    examples = dict(zip((leaf.name for leaf in signature.inputs), signature.examples))
    if any(examples[leaf.name] is None for leaf in args):
        return {}
    if sum(np.asarray(examples[leaf.name]).nbytes for leaf in args) > _EXAMPLE_LIMIT_BYTES:
        return {}
    files = {}
    for leaf in args:
        rel = f"{INPUT_DIR}/{leaf.alias}.npy"
        write_bytes_atomic(out_dir / rel, _npy_bytes(np.asarray(examples[leaf.name])))
        files[f"example_input:{leaf.name}"] = rel
    return files


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _declaration(vmfb: bytes) -> str:
    """The compiled function's ABI declaration, as IREE reflects it (`sync func @main(...)`)."""
    import iree.runtime as rt

    module = rt.VmModule.copy_buffer(rt.VmInstance(), vmfb)
    function = module.lookup_function(FUNCTION)
    return function.reflection.get("iree.abi.declaration", "") if function is not None else ""


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


# -- the Python runner -----------------------------------------------------------------------------------

class IreeRunner(Runner):
    """The .vmfb in iree.runtime: inputs uploaded once as HAL buffer views, the module's sync `main` invoked."""

    calling_path = ("iree.runtime VmContext.invoke of the module's synchronous main on an argument list packed "
                    "once in prepare (HAL buffer views uploaded there); results stay in device buffers")

    def __init__(self, manifest: Manifest, directory: Path, device: str, driver: str):
        import iree.runtime as rt

        super().__init__(manifest, directory, device)
        self._rt, self._driver = rt, driver
        try:
            self._config = rt.Config(driver)
        except Exception as exc:  # no such driver or device here: IREE's reason is the message
            raise RunError(f"Device '{device}' | IREE driver '{driver}' unavailable: {exc}") from exc
        path = directory / manifest.files["module"]
        modules = [self._parameters_module(rt, directory, manifest)] if external_tensors(manifest) else []
        try:
            module = rt.VmModule.mmap(self._config.vm_instance, str(path))
            self._context = rt.SystemContext(vm_modules=[*modules, module], config=self._config)
        except Exception as exc:
            raise ArtifactError(f"Artifact '{directory}' | IREE cannot load {path.name}: {exc}") from exc
        self._function = module.lookup_function(FUNCTION)
        if self._function is None:
            raise ArtifactError(f"Artifact '{directory}' | {path.name} has no function '{FUNCTION}'")
        self.declaration = self._function.reflection.get("iree.abi.declaration", "")
        # Positions (in manifest input order) of the module's arguments, in argument order.
        kept = [i for i, leaf in enumerate(manifest.inputs) if leaf.param is not None]
        self._arg_positions = sorted(kept, key=lambda i: manifest.inputs[i].param)
        declared = self.declaration.count("%input")
        if declared != len(self._arg_positions):
            raise ArtifactError(
                f"Artifact '{directory}' | {path.name} takes {declared} arguments, manifest binds {len(self._arg_positions)}")
        self._invoke = self._context.vm_context.invoke  # bound once: the timed call pays no lookups

    def _parameters_module(self, rt, directory: Path, manifest: Manifest):
        """The io_parameters module serving the artifact's weights file (memory-mapped) under scope "model"."""
        path = directory / manifest.files.get("weights", WEIGHTS_FILE)
        try:
            index = rt.ParameterIndex()
            index.load(str(path))
        except Exception as exc:
            raise ArtifactError(f"Artifact '{directory}' | IREE cannot read the weights file {path.name}: {exc}") from exc
        have = {key for key, _ in index.items()}
        missing = [name for name in external_tensors(manifest) if name not in have]
        if missing:
            raise ArtifactError(f"Weight '{missing[0]}' | missing from {path}, expected it (the manifest lists "
                                f"{len(external_tensors(manifest))} weights)")
        self._parameter_index = index  # the provider reads through it for the context's lifetime
        return rt.create_io_parameters_module(self._config.vm_instance, index.create_provider(scope=PARAMETER_SCOPE))

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Any:
        rt = self._rt
        from iree.runtime.array_interop import map_dtype_to_element_type

        device = self._config.device
        args = rt.VmVariantList(len(self._arg_positions))
        views = []
        for i in self._arg_positions:
            array = np.asarray(arrays[i], order="C")  # ascontiguousarray would make 0-d arrays 1-d
            element_type = map_dtype_to_element_type(array.dtype)
            if element_type is None:
                raise RunError(leaf_message("Input", self.manifest.inputs[i].name, array.dtype.name,
                                            "a dtype iree.runtime maps to a HAL element type"))
            view = device.allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=device,
                buffer=array, element_type=element_type)
            views.append(view)  # keep the buffers alive as long as the argument list
            args.push_ref(view.ref)
        return args, views

    def _call(self, prepared: Any):
        results = self._rt.VmVariantList(len(self.manifest.outputs))
        try:
            self._invoke(self._function, prepared[0], results)
        except Exception as exc:
            raise RunError(f"Artifact '{self.directory}' | IREE failed to run {FUNCTION}: {exc}") from exc
        return results

    def _run_impl(self, prepared: Any) -> None:
        # A `sync func` returns once its results are computed: the call is synchronous as it stands.
        self._call(prepared)

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        rt = self._rt
        results = self._call(prepared)
        out = []
        for i in range(len(results)):
            view = results.get_as_object(i, rt.HalBufferView)
            out.append(np.array(rt.DeviceArray(self._config.device, view, implicit_host_transfer=True).to_host()))
        return out

    def native_figures(self, feed: Mapping[str, Any], budget_s: float) -> dict[str, Any] | None:
        """`iree-benchmark-module` on the same artifact and feed: the latency a C/C++ caller gets."""
        return native_benchmark(self.directory, feed, device=self.device, repetitions=5,
                                min_time_s=max(0.05, budget_s / 5))

    def compile_count(self) -> int | None:
        return 0  # compiled ahead of time at export; nothing compiles at run time, whatever the shapes

    def _describe_impl(self) -> dict[str, Any]:
        return {"driver": self._driver, "module_signature": self.declaration,
                "target_backends": self.manifest.format.get("target_backends")}


# -- the native runner -------------------------------------------------------------------------------------

def find_native_tool(name: str, search_path: str | None = None) -> str:
    """Path of IREE's native tool `name`.

    search_path: directories to look in (os.pathsep-separated). Default: the iree-base-runtime wheel's
    own binaries (the runtime version the artifact was compiled for), this Python's bin directory, PATH.
    """
    dirs = search_path.split(os.pathsep) if search_path is not None else _default_tool_dirs()
    for directory in dirs:
        candidate = Path(directory or ".") / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise RunError(
        f"Native tool '{name}' | got nothing in {os.pathsep.join(dirs) or '(no directories)'}, expected the "
        f"{name} binary of iree-base-runtime (pip install 'multiexport[iree]') or one on PATH")


def _default_tool_dirs() -> list[str]:
    dirs = []
    try:
        spec = importlib.util.find_spec("iree._runtime_libs")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs += list(spec.submodule_search_locations)
    dirs.append(str(Path(sys.executable).parent))
    return dirs + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]


def native_command(args, outputs, target: str, tool: str = RUN_TOOL, module: str = FILES["module"],
                   parameters: str | None = None) -> list[str]:
    """The iree-run-module command line for module arguments `args` and `outputs`, paths relative.

    parameters: the file holding the module's lifted weights, if any (the IREE parameter scope "model").
    """
    return [
        tool, f"--device={DRIVERS[target]}",
        *([f"--parameters={PARAMETER_SCOPE}={parameters}"] if parameters else []),
        f"--module={module}", f"--function={FUNCTION}",
        *[f"--input=@{INPUT_DIR}/{leaf.alias}.npy" for leaf in args],
        *[f"--output=@{OUTPUT_DIR}/{leaf.alias}.npy" for leaf in outputs],
    ]


def run_native(
    artifact_dir: str | os.PathLike, feed: Mapping[str, Any], *, device: str = "cpu",
    search_path: str | None = None, timeout: float = 600,
) -> dict[str, np.ndarray]:
    """Run the artifact with the native `iree-run-module`: named inputs in, named outputs out.

    The feed is checked against the manifest first (names, dtypes, shapes, symbolic sizes), inputs are
    written as .npy in module argument order, and the tool gets nothing but the artifact's .vmfb.
    """
    directory, manifest, arrays = _native_inputs(artifact_dir, feed)
    tool = find_native_tool(RUN_TOOL, search_path)
    with tempfile.TemporaryDirectory(prefix="multiexport-iree-") as work:
        command = _write_and_command(Path(work), directory, manifest, arrays, device, tool)
        (Path(work) / OUTPUT_DIR).mkdir()
        _run_tool(command, Path(work), timeout)
        named = {}
        for leaf in manifest.outputs:
            value = np.load(Path(work) / OUTPUT_DIR / f"{leaf.alias}.npy", allow_pickle=False)
            if value.dtype.name != leaf.dtype:
                raise RunError(leaf_message("Output", leaf.name, value.dtype.name, leaf.dtype))
            named[leaf.name] = value
    return named


def native_benchmark(
    artifact_dir: str | os.PathLike, feed: Mapping[str, Any], *, device: str = "cpu", repetitions: int = 5,
    min_time_s: float = 0.5, single_calls: bool = False, search_path: str | None = None, timeout: float = 600,
) -> dict[str, Any]:
    """Native latency from `iree-benchmark-module` on the artifact and feed.

    Default: each of `repetitions` runs calls for `min_time_s` and Google Benchmark reports their mean
    wall time per call; `median_ms` is the median of those means. single_calls: each repetition is one
    call (`--benchmark_min_time=1x`), so `real_time_ms` is a per-call sample and `median_ms` its p50,
    comparable with a per-call p50 measured in Python.
    """
    directory, manifest, arrays = _native_inputs(artifact_dir, feed)
    tool = find_native_tool(BENCH_TOOL, search_path)
    with tempfile.TemporaryDirectory(prefix="multiexport-iree-") as work:
        command = _write_and_command(Path(work), directory, manifest, arrays, device, tool)
        command = [c for c in command if not c.startswith("--output=")] + [
            "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
            "--benchmark_min_time=" + ("1x" if single_calls else f"{min_time_s}s"),
            "--benchmark_report_aggregates_only=false"]
        stdout = _run_tool(command, Path(work), timeout)
    try:
        rows = [r for r in json.loads(stdout)["benchmarks"] if r.get("run_type") == "iteration"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise RunError(f"Native tool '{BENCH_TOOL}' | got unreadable output ({exc}), expected Google Benchmark JSON") from exc
    if not rows:
        raise RunError(f"Native tool '{BENCH_TOOL}' | reported no iterations for {FUNCTION}")
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    real = [r["real_time"] * scale[r["time_unit"]] for r in rows]
    return {
        "tool": command[0], "command": command, "benchmark": rows[0]["name"], "repetitions": len(rows),
        "iterations": [int(r["iterations"]) for r in rows], "real_time_ms": real,
        "cpu_time_ms": [r["cpu_time"] * scale[r["time_unit"]] for r in rows],
        "median_ms": statistics.median(real), "mean_ms": statistics.fmean(real), "min_ms": min(real),
        "statistic": ("wall time of single calls; median_ms is their p50" if single_calls else
                      "mean wall time per call within each repetition; median_ms is the median over repetitions"),
    }


def _native_inputs(artifact_dir, feed):
    directory = Path(artifact_dir).resolve()
    manifest = Manifest.read(directory)
    if manifest.backend != "iree":
        raise ArtifactError(f"Artifact '{artifact_dir}' | got a '{manifest.backend}' artifact, expected 'iree'")
    for kind, leaves in (("Input", [leaf for leaf in manifest.inputs if leaf.param is not None]), ("Output", manifest.outputs)):
        for leaf in leaves:
            if not npy_can_carry(leaf.dtype):
                raise RunError(leaf_message(
                    kind, leaf.name, leaf.dtype, "a dtype .npy files describe (numpy saves ml_dtypes' "
                    f"{leaf.dtype} as raw bytes, which {RUN_TOOL} refuses): use the Python runner"))
    arrays, _ = check_feed(manifest.inputs, feed)
    return directory, manifest, arrays


def npy_can_carry(dtype: str) -> bool:
    """Whether .npy describes `dtype` itself (bfloat16 and the float8s are written as opaque void)."""
    return not np.lib.format.dtype_to_descr(parse_dtype(dtype)).lstrip("<>|=").startswith("V")


def _write_and_command(work: Path, directory: Path, manifest: Manifest, arrays, device: str, tool: str) -> list[str]:
    target = DEVICE_TARGET.get(device)
    if target not in manifest.format.get("target_backends", []):
        raise RunError(f"Artifact '{directory}' | compiled for {manifest.format.get('target_backends')}, "
                       f"expected {target} for device '{device}'")
    args = sorted((leaf for leaf in manifest.inputs if leaf.param is not None), key=lambda leaf: leaf.param)
    by_name = {leaf.name: a for leaf, a in zip(manifest.inputs, arrays)}
    (work / INPUT_DIR).mkdir()
    for leaf in args:
        np.save(work / INPUT_DIR / f"{leaf.alias}.npy", np.asarray(by_name[leaf.name], order="C"), allow_pickle=False)
    parameters = str(directory / manifest.files["weights"]) if external_tensors(manifest) else None
    return native_command(args, manifest.outputs, target, tool, str(directory / manifest.files["module"]), parameters)


def _run_tool(command: list[str], cwd: Path, timeout: float) -> str:
    name = Path(command[0]).name
    try:
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RunError(f"Native tool '{name}' | ran past {timeout} s, expected it to finish") from exc
    except OSError as exc:
        raise RunError(f"Native tool '{name}' | cannot start: {exc}") from exc
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip())[-_MESSAGE_LIMIT:]
        raise RunError(f"Native tool '{name}' | exited {proc.returncode}: {said}")
    return proc.stdout
