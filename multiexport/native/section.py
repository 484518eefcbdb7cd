"""The manifest's `"native"` section: everything a compiled, Python-free consumer reads to run an artifact.

Pure functions of what a backend has at export time (the `jax.export.Exported`, the module's real
argument list from `export.stablehlo.module_interface`, the signature's leaves, the SavedModel's tensor
names). A backend stores the result in `FormatResult.native`; the core writes the example inputs the
section names into `inputs/`, so the printed native command runs in the artifact directory as is.
`csrc/README.md` specifies every field; `check_section` validates one read back from disk.

File names never come from leaf names: input leaf `i` of the manifest is `inputs/input{i}.npy` and
output leaf `j` is `outputs/output{j}.npy`, for every consumer, whatever the module's positions are.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Mapping, Sequence

from ..errors import ArtifactError, UsageError

NATIVE_SCHEMA = "multiexport.native/1"
COMPILE_OPTIONS_FILE = "compile_options.pb"
STATIC_DIR = "static"
INPUT_DIR, OUTPUT_DIR = "inputs", "outputs"  # relative to the directory the consumer runs in
MAX_STATIC_MODULES = 32  # the product of --static-sizes; each refined module is a full copy of embedded weights
IREE_ELEMENT = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16", "int32": "i32",
                "int64": "i64", "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64"}
CONSUMERS = {"xla": "pjrt_c_api", "savedmodel": "tf_c_api", "iree": "iree_tools"}

_MLIR_DTYPES = {
    "f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16", "i1": "bool",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2",
}


def input_file(index: int) -> str:
    """The .npy file (in the consumer's inputs directory) of the manifest's input leaf `index`."""
    return f"input{index}.npy"


def output_file(index: int) -> str:
    """The .npy file (in the consumer's outputs directory) of the manifest's output leaf `index`."""
    return f"output{index}.npy"


def leaf_entry(leaf: Any, index: int, role: str, shape: Sequence[int | str] | None = None) -> dict[str, Any]:
    """One leaf argument or result: `{"kind": "leaf", "leaf", "index", "file", "shape", "dtype"}`."""
    return {"kind": "leaf", "leaf": leaf.name, "index": index,
            "file": input_file(index) if role == "input" else output_file(index),
            "shape": list(leaf.shape if shape is None else shape), "dtype": str(leaf.dtype)}


def compile_options_proto(num_replicas: int = 1, num_partitions: int = 1) -> bytes:
    """A serialized `xla.CompileOptionsProto` for `PJRT_Client_Compile`: 1 replica, 1 partition.

    Hand-encoded (`executable_build_options`, field 3, holding `num_replicas` field 4 and
    `num_partitions` field 5), so it depends on no protobuf library or jaxlib version. Nothing else is set
    on purpose: with no `debug_options` the plugin applies its own XLA's defaults, whereas jaxlib's
    serialized CompileOptions fix ~1 KB of flags an older plugin may not know (measured: xla-cpu-pjrt
    logs "Unsupported fusion type: 5" on jaxlib 0.10.2's). Empty options abort the CPU client
    (`Check failed: replica_count > 0`).
    """
    inner = b"\x20" + _varint(num_replicas) + b"\x28" + _varint(num_partitions)
    return b"\x1a" + _varint(len(inner)) + inner


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def static_key(sizes: Mapping[str, int]) -> str:
    """The key of a refined module in `static_modules`: `"b=8"`, `"b=8,s=16"` (symbols sorted); the native
    program builds the same key from the sizes its inputs bind."""
    return ",".join(f"{name}={int(sizes[name])}" for name in sorted(sizes))


def static_filename(sizes: Mapping[str, int]) -> str:
    """Where the refined module for `sizes` lives: `static/b8.mlirbc`, `static/b8_s16.mlirbc`."""
    return f"{STATIC_DIR}/" + "_".join(f"{name}{int(sizes[name])}" for name in sorted(sizes)) + ".mlirbc"


def static_size_sets(symbols: Sequence[str], requested: Mapping[str, Sequence[int]],
                     example: Mapping[str, int] | None) -> list[dict[str, int]]:
    """The size bindings to refine static modules for: every combination of the requested sizes and the
    example's (the printed native command runs on the example inputs); nothing requested: the example's."""
    unknown = sorted(set(requested) - set(symbols))
    if unknown:
        raise UsageError(f"Option 'static_sizes' | got {unknown[0]}, expected one of the target's symbolic dims "
                         f"({', '.join(symbols) or 'none: the target has static shapes'})")
    if not symbols:
        return []
    choices = []
    for symbol in sorted(symbols):
        sizes = {int(s) for s in requested.get(symbol, ())} | ({int(example[symbol])} if example and symbol in example else set())
        if not sizes:
            return []  # no size to refine for: the section lists none and the program says so
        choices.append(sorted(sizes))
    combos = [dict(zip(sorted(symbols), values)) for values in itertools.product(*choices)]
    if len(combos) > MAX_STATIC_MODULES:
        raise UsageError(f"Option 'static_sizes' | asks for {len(combos)} refined modules, expected at most "
                         f"{MAX_STATIC_MODULES} (each is a full module)")
    return combos


# -- XLA / PJRT ------------------------------------------------------------------------------------------

def xla_section(exported, args: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any], *,
                weights: Sequence[Mapping[str, Any]] = (), weights_file: str = "weights.safetensors",
                program: str = "model.mlirbc", static_modules: Mapping[str, Mapping[str, Any]] | None = None,
                uses_shape_polymorphism: bool = False) -> dict[str, Any]:
    """The section of an XLA artifact for a PJRT C API consumer (csrc/pjrt_run.cc).

    args: `module_interface(exported, ...)`, the module's real arguments (platform index, tokens, leaves,
    weights) in order. weights: the manifest's `weights.tensors` for lifted weights. static_modules:
    `static_key(sizes) -> static_module(...)`; PJRT cannot compile the polymorphic `program` itself.
    """
    index = {leaf.name: i for i, leaf in enumerate(inputs)}
    tensors = {t["name"]: t for t in weights}
    entries: list[dict[str, Any]] = []
    for a in args:
        if a.kind == "platform_index":
            entries.append({"kind": "platform_index", "dtype": "int32", "shape": []})
        elif a.kind == "token":
            entries.append({"kind": "token"})
        elif a.kind == "leaf":
            entries.append(leaf_entry(inputs[index[a.name]], index[a.name], "input"))
        else:
            t = tensors[a.name]
            entries.append({"kind": "weight", "tensor": t["name"], "file": weights_file, "shape": list(t["shape"]),
                            "dtype": str(t["dtype"])})
    symbolic = _symbols(inputs)
    poly = bool(symbolic) or uses_shape_polymorphism
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["xla"],
        "program": program,
        "format": "mlir",  # PJRT_Program.format: StableHLO portable-artifact bytecode
        "stablehlo_version": _producer(exported.mlir_module_serialized),
        "compile_options": COMPILE_OPTIONS_FILE,
        "compile_options_text": "executable_build_options { num_replicas: 1 num_partitions: 1 }",
        "platforms": [p.lower() for p in exported.platforms],
        "nr_devices": int(exported.nr_devices),
        "uses_shape_polymorphism": poly,
        "symbolic_dims": symbolic,
        # PJRT refuses dynamic shapes ("'stablehlo.dynamic_broadcast_in_dim' op can't be translated").
        "compilable": not poly,
        "args": entries,
        "results": [*({"kind": "token"} for _ in exported.ordered_effects),
                    *(leaf_entry(leaf, j, "output") for j, leaf in enumerate(outputs))],
        "static_modules": dict(static_modules or {}),
    }


def _producer(bytecode: bytes) -> str | None:
    from ..export.stablehlo import producer_version

    return producer_version(bytes(bytecode))


def refine_static(exported, sizes: Mapping[str, int]) -> tuple[bytes, list[list[int]], list[list[int]], str]:
    """A static-shape module for `sizes`: what JAX itself compiles when it calls `exported` at those sizes.

    Lowers `jax.jit(call)` at the concrete shapes, where `call` takes the kept arguments and calls
    `exported.call` (so the argument layout is the kept leaves and weights, no platform index or
    tokens), then runs JAX's own shape refinement, the pass pxla applies before compiling any module that
    uses shape polymorphism: it checks the module's shape assertions at these sizes and fails if a
    dynamic shape survives. JAX has no public entry point for it; where the private one is missing, the
    lowering is used unrefined and PJRT will say if a dynamic shape is left. Serialized as a StableHLO
    portable artifact at the Exported's own version, so it needs the same consumer.

    Returns (bytecode, arg shapes, result shapes, how it was refined).
    """
    import jax
    import jax.numpy as jnp
    from jax.extend.mlir.dialects import stablehlo

    from ..export.stablehlo import evaluate_dim

    if exported.ordered_effects:
        raise ValueError(f"ordered effects {exported.ordered_effects} | a native consumer supports none "
                         "(they come with host callbacks, which no native consumer can run)")
    env = {k: int(v) for k, v in sizes.items()}
    specs = [jax.ShapeDtypeStruct(tuple(d if isinstance(d, int) else evaluate_dim(d, env) for d in aval.shape),
                                  aval.dtype, weak_type=aval.weak_type) for aval in exported.in_avals]
    kept = sorted(exported.module_kept_var_idx)

    def call_kept(*kept_args):
        full = [jnp.zeros(s.shape, s.dtype) for s in specs]  # a leaf the module does not read: dropped by call
        for i, a in zip(kept, kept_args):
            full[i] = a
        return exported.call(*full)

    x64 = any(s.dtype.itemsize == 8 for s in specs) or any(a.dtype.itemsize == 8 for a in exported.out_avals)
    with jax.enable_x64(x64 or bool(jax.config.read("jax_enable_x64"))):
        lowered = jax.jit(call_kept, keep_unused=True).lower(*[specs[i] for i in kept])
        module = lowered.compiler_ir("stablehlo")
        assert module is not None  # None only where the backend offers no StableHLO, which everything below needs
        try:
            from jax._src.interpreters import mlir as jax_mlir  # private: JAX's refinement pass, no public API

            module = jax_mlir.refine_polymorphic_shapes(module)
            how = "JAX's refine_polymorphic_shapes of jax.jit(Exported.call) lowered at these sizes"
        except (ImportError, AttributeError):
            how = "jax.jit(Exported.call) lowered at these sizes, unrefined (this JAX has no refinement pass)"
        arg_types, result_types = main_signature(module)  # before serializing, which rewrites it to VHLO
        target = _producer(exported.mlir_module_serialized) or str(stablehlo.get_current_version())
        with module.context:
            bytecode = stablehlo.serialize_portable_artifact(module, target)
    return bytes(bytecode), [s for s, _ in arg_types], [s for s, _ in result_types], how


def main_signature(module) -> tuple[list[tuple[list[int], str]], list[tuple[list[int], str]]]:
    """(shape, dtype) of each argument and result of the module's public `main`."""
    from jax.extend.mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            return [_tensor(t) for t in ftype.inputs], [_tensor(t) for t in ftype.results]
    raise ValueError("module has no main function")


def _tensor(t) -> tuple[list[int], str]:
    from jax.extend.mlir import ir

    if t.typeid != ir.RankedTensorType.static_typeid:
        return [], str(t)  # !stablehlo.token
    ranked = ir.RankedTensorType(t)
    dims = [-1 if ranked.is_dynamic_dim(i) else ranked.get_dim_size(i) for i in range(ranked.rank)]
    return dims, _MLIR_DTYPES.get(str(ranked.element_type), str(ranked.element_type))


def static_module(section: Mapping[str, Any], sizes: Mapping[str, int], bytecode: bytes, arg_shapes, result_shapes,
                  how: str, platform: str) -> dict[str, Any]:
    """The `static_modules[static_key(sizes)]` entry for a module made by `refine_static`: the section's
    leaf and weight arguments at concrete shapes, lowered for one platform (no platform index, no tokens)."""
    args = [dict(a) for a in section["args"] if a["kind"] in ("leaf", "weight")]
    results = [dict(r) for r in section["results"] if r["kind"] == "leaf"]
    if len(args) != len(arg_shapes) or len(results) != len(result_shapes):
        raise ValueError(f"refined module for {static_key(sizes)} | takes {len(arg_shapes)} arguments and returns "
                         f"{len(result_shapes)} results, expected {len(args)} and {len(results)}")
    for entry, shape in [*zip(args, arg_shapes), *zip(results, result_shapes)]:
        if any(d < 0 for d in shape):
            raise ValueError(f"refined module for {static_key(sizes)} | still has a dynamic shape {shape}")
        entry["shape"] = list(shape)
    return {"program": static_filename(sizes), "sizes": {k: int(v) for k, v in sorted(sizes.items())},
            "stablehlo_version": _producer(bytecode), "refined_by": how, "platforms": [platform],
            "args": args, "results": results}


def _symbols(leaves: Sequence[Any]) -> list[str]:
    found: set[str] = set()
    for leaf in leaves:
        for dim in leaf.shape:
            if isinstance(dim, str):
                found.update(s for s in re.findall(r"[A-Za-z_]\w*", dim) if s not in ("floordiv", "mod", "max", "min"))
    return sorted(found)


# -- SavedModel / TF C API ---------------------------------------------------------------------------------

def savedmodel_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                       input_tensors: Mapping[str, str], output_tensors: Mapping[str, str], *,
                       signature: str = "serving_default", tag: str = "serve") -> dict[str, Any]:
    """The section of a SavedModel artifact for a TF C API consumer (csrc/tf_run.c).

    params: each input leaf's signature key (None: not declared). input_tensors / output_tensors: key ->
    graph tensor, read back from the SavedModel's own SignatureDef (`serving_default_<key>:0`,
    `StatefulPartitionedCall:<i>` where `<i>` is the key's position among the *sorted* output keys).
    """
    args = []
    for i, (leaf, key) in enumerate(zip(inputs, params, strict=True)):
        if key is not None:
            args.append({**leaf_entry(leaf, i, "input"), "key": key, "tensor": input_tensors[key]})
    results = [{**leaf_entry(leaf, j, "output"), "key": leaf.alias, "tensor": output_tensors[leaf.alias]}
               for j, leaf in enumerate(outputs)]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["savedmodel"],
        "export_dir": ".",
        "tags": [tag],
        "signature": signature,
        "args": args,
        "results": results,
        "output_index_rule": "StatefulPartitionedCall:<i>, i = position of the output key in sorted(keys)",
        "symbolic_dims": _symbols(inputs),
    }


# -- IREE ------------------------------------------------------------------------------------------------

def iree_section(args: Sequence[tuple[int, Any]], outputs: Sequence[Any], *, driver: str, module: str,
                 function: str, parameters: str | None = None) -> dict[str, Any]:
    """The section of an IREE artifact: argv for IREE's own native tools (no program of ours).

    args: (manifest input index, leaf) of the module's arguments in order. parameters: the
    `--parameters=` value for lifted weights (`model=weights.safetensors`). The tools are the
    iree-base-runtime wheel's binaries (`iree/_runtime_libs/`); those on PATH are Python wrappers.
    """
    entries = [leaf_entry(leaf, i, "input") for i, leaf in args]
    for entry in entries:
        if entry["shape"] == [] and entry["dtype"] in IREE_ELEMENT:
            # iree-run-module reads a 0-d .npy as shape [1] (measured, IREE 3.13): a scalar goes in as raw bytes.
            entry.update(file=entry["file"].replace(".npy", ".bin"), encoding="raw")
    common = [f"--device={driver}", *([f"--parameters={parameters}"] if parameters else []),
              f"--module={module}", f"--function={function}",
              *[f"--input={IREE_ELEMENT[e['dtype']]}=@{INPUT_DIR}/{e['file']}" if e.get("encoding") == "raw"
                else f"--input=@{INPUT_DIR}/{e['file']}" for e in entries]]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["iree"],
        "tools": {"run": "iree-run-module", "benchmark": "iree-benchmark-module"},
        "tool_location": "iree-base-runtime wheel: site-packages/iree/_runtime_libs/ (native binaries)",
        "mkdir": [OUTPUT_DIR],
        "run_args": common + [f"--output=@{OUTPUT_DIR}/{output_file(j)}" for j in range(len(outputs))],
        "benchmark_args": common + ["--benchmark_format=json", "--benchmark_min_time=1x",
                                    "--benchmark_report_aggregates_only=false"],
        "args": entries,
        "results": [leaf_entry(leaf, j, "output") for j, leaf in enumerate(outputs)],
        "symbolic_dims": _symbols([leaf for _, leaf in args]),
    }


# -- reading one back ---------------------------------------------------------------------------------------

_FILE = re.compile(r"^(input|output)\d+\.(npy|bin)$")


def check_section(manifest, directory) -> dict[str, Any]:
    """The manifest's native section, validated as user input: its consumer matches the backend, every
    leaf entry names a manifest leaf by index with the file name the index gives, and every path the
    consumer opens stays inside the artifact. One ArtifactError line names what is wrong."""
    from pathlib import Path

    from ..files import inside

    where = f"Artifact '{directory}' | native section"
    native = manifest.native
    if not isinstance(native, dict):
        raise ArtifactError(f"Artifact '{directory}' | manifest.json has no \"native\" section: backend "
                            f"'{manifest.backend}' has no native consumer, or the artifact predates it")
    if native.get("schema") != NATIVE_SCHEMA or native.get("consumer") != CONSUMERS.get(manifest.backend):
        raise ArtifactError(f"{where} | got schema {native.get('schema')!r} consumer {native.get('consumer')!r}, expected "
                            f"{NATIVE_SCHEMA!r} {CONSUMERS.get(manifest.backend)!r}")
    modules = [native, *(native.get("static_modules") or {}).values()]
    for module in modules:
        if not isinstance(module, dict) or not isinstance(module.get("args"), list) \
                or not isinstance(module.get("results"), list):
            raise ArtifactError(f"{where} | a module binding has no args/results lists")
        for role, entries, leaves in (("input", module["args"], manifest.inputs),
                                      ("output", module["results"], manifest.outputs)):
            for entry in entries:
                if not isinstance(entry, dict):
                    raise ArtifactError(f"{where} | got {entry!r} among the {role}s, expected an object")
                if entry.get("kind") == "leaf":
                    i = entry.get("index")
                    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(leaves) \
                            or leaves[i].name != entry.get("leaf") or str(entry.get("file")).rsplit(".", 1)[0] != (
                                input_file(i) if role == "input" else output_file(i)).rsplit(".", 1)[0] \
                            or not _FILE.match(str(entry.get("file"))):
                        raise ArtifactError(f"{where} | {role} entry {entry.get('leaf')!r} does not match the "
                                            f"manifest's {role} leaf {i!r} and its file")
                elif entry.get("kind") == "weight":
                    inside(Path(directory), str(entry.get("file")), "native weights file")
        if "program" in module:
            inside(Path(directory), str(module["program"]), "native program")
    for key in ("compile_options",):
        if key in native:
            inside(Path(directory), str(native[key]), "native compile options")
    return native
