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
                "int64": "i64", "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
                "bfloat16": "bf16"}
CONSUMERS = {"xla": "pjrt_c_api", "savedmodel": "tf_c_api", "iree": "iree_tools", "openvino": "openvino_c_api",
             "onnx": "onnxruntime_c_api", "litert": "litert_c_api"}
# The IREE native tools by role: the only programs an IREE section may name (binaries of the
# iree-base-runtime wheel, found by multiexport in iree/_runtime_libs/).
IREE_TOOLS = {"run": "iree-run-module", "benchmark": "iree-benchmark-module"}

MLIR_DTYPES = {
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


class NoNativeSection(Exception):
    """The format's native consumer cannot take this artifact: the export writes no native section and says why
    in the manifest's warnings (never a section naming files or flags that cannot work)."""


def npy_describes(dtype: str) -> bool:
    """Whether a .npy header names `dtype` itself; bfloat16 and the float8s (ml_dtypes) are stored as opaque
    bytes, `V2` / `V1`, whose type only the manifest gives."""
    from ..dtypes import is_extension, parse_dtype

    return not is_extension(parse_dtype(dtype))


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


def symbolic_names(leaves: Sequence[Any]) -> list[str]:
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
        "symbolic_dims": symbolic_names(inputs),
    }


# -- OpenVINO / its C API ----------------------------------------------------------------------------------

# What ov_run compiles with: the Python runner's configuration (backends/openvino/runner.py `config`) less
# the threads, which the caller chooses. Fixed, so a manifest cannot ask the consumer for bf16 math.
OPENVINO_PROPERTIES = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_PRECISION_HINT": "f32"}


def openvino_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                     output_params: Sequence[str | None], *, model: str,
                     properties: Mapping[str, str]) -> dict[str, Any]:
    """The section of an OpenVINO artifact for an OpenVINO C API consumer (csrc/ov_run.c).

    params / output_params: each leaf's port name in the model (None: an input the model does not take).
    properties: the compile_model properties the Python runner uses (threads are the caller's choice).
    """
    args = [{**leaf_entry(leaf, i, "input"), "tensor": port}
            for i, (leaf, port) in enumerate(zip(inputs, params, strict=True)) if port is not None]
    results = [{**leaf_entry(leaf, j, "output"), "tensor": port}
               for j, (leaf, port) in enumerate(zip(outputs, output_params, strict=True))]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["openvino"],
        "model": model,
        "device": "CPU",
        "properties": dict(properties),
        "args": args,
        "results": results,
        "symbolic_dims": symbolic_names(inputs),
    }


# -- ONNX / ONNX Runtime's C API ----------------------------------------------------------------------------

# The SessionOptions of every ONNX Runtime session here (backends/onnx/runner.py `session_options` reads
# them from this table, and ort_run sets the same), less the intra-op threads, which the caller chooses.
# Names, not numbers: the program maps each to ONNX Runtime's documented enum value and refuses others.
ONNX_SESSION_OPTIONS: dict[str, Any] = {
    "graph_optimization_level": "ORT_ENABLE_ALL",
    "execution_mode": "ORT_SEQUENTIAL",
    "inter_op_threads": 1,
    # the thread pools spin after their work (ONNX Runtime's default, stated so it is read back)
    "config_entries": {"session.intra_op.allow_spinning": "1", "session.inter_op.allow_spinning": "1"},
}


def onnx_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                 output_params: Sequence[str | None], *, model: str,
                 session_options: Mapping[str, Any]) -> dict[str, Any]:
    """The section of an ONNX artifact for an ONNX Runtime C API consumer (csrc/ort_run.c).

    params / output_params: each leaf's value name in the ONNX graph (None: an input the graph does not
    take). session_options: what the Python runner sets (ONNX_SESSION_OPTIONS; threads are the caller's).
    """
    args = [{**leaf_entry(leaf, i, "input"), "tensor": name}
            for i, (leaf, name) in enumerate(zip(inputs, params, strict=True)) if name is not None]
    results = [{**leaf_entry(leaf, j, "output"), "tensor": name}
               for j, (leaf, name) in enumerate(zip(outputs, output_params, strict=True))]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["onnx"],
        "model": model,
        "provider": "CPUExecutionProvider",
        "session_options": {**session_options, "config_entries": dict(session_options["config_entries"])},
        "args": args,
        "results": results,
        "symbolic_dims": symbolic_names(inputs),
    }


# -- LiteRT / its C API ------------------------------------------------------------------------------------

LITERT_SIGNATURE = "serving_default"  # the signature backends/litert converts and binds by (its SIGNATURE_KEY)


def litert_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                   output_params: Sequence[str | None], *, model: str) -> dict[str, Any]:
    """The section of a LiteRT artifact for a LiteRT C API consumer (csrc/lite_run.c).

    params / output_params: each leaf's name in the model's `serving_default` signature (its alias; None: an
    input the SavedModel stage dropped, which the signature does not declare). The consumer binds by these
    names, never by tensor position, and runs on the CPU accelerator (XNNPACK) with the caller's threads.
    """
    args = [{**leaf_entry(leaf, i, "input"), "key": key}
            for i, (leaf, key) in enumerate(zip(inputs, params, strict=True)) if key is not None]
    results = [{**leaf_entry(leaf, j, "output"), "key": key}
               for j, (leaf, key) in enumerate(zip(outputs, output_params, strict=True))]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["litert"],
        "model": model,
        "signature": LITERT_SIGNATURE,
        "accelerator": "cpu",
        "args": args,
        "results": results,
        "symbolic_dims": symbolic_names(inputs),
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
    results = [leaf_entry(leaf, j, "output") for j, leaf in enumerate(outputs)]
    for role, entry in [*(("Input", e) for e in entries), *(("Output", e) for e in results)]:
        if not npy_describes(entry["dtype"]):
            # IREE's tools read and write no .npy of bfloat16 / float8 (numpy writes them as opaque bytes), but
            # take raw bytes with the shape and element type in the flag: possible only for a static shape.
            if entry["dtype"] not in IREE_ELEMENT or not all(isinstance(d, int) for d in entry["shape"]):
                raise NoNativeSection(
                    f"{role} '{entry['leaf']}' | {entry['dtype']} of shape {entry['shape']}: IREE's tools read no .npy "
                    "of it and take raw bytes only for a static shape of " + ", ".join(IREE_ELEMENT))
            entry.update(file=entry["file"].replace(".npy", ".bin"), encoding="raw")
        elif role == "Input" and entry["shape"] == [] and entry["dtype"] in IREE_ELEMENT:
            # iree-run-module reads a 0-d .npy as shape [1] (measured, IREE 3.13): a scalar goes in as raw bytes.
            entry.update(file=entry["file"].replace(".npy", ".bin"), encoding="raw")
    common = [f"--device={driver}", *([f"--parameters={parameters}"] if parameters else []),
              f"--module={module}", f"--function={function}",
              *[f"--input={''.join(f'{d}x' for d in e['shape'])}{IREE_ELEMENT[e['dtype']]}=@{INPUT_DIR}/{e['file']}"
                if e.get("encoding") == "raw" else f"--input=@{INPUT_DIR}/{e['file']}" for e in entries]]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMERS["iree"],
        "tools": dict(IREE_TOOLS),
        "tool_location": "iree-base-runtime wheel: site-packages/iree/_runtime_libs/ (native binaries)",
        "mkdir": [OUTPUT_DIR],
        "run_args": common + [f"--output=@{OUTPUT_DIR}/{e['file']}" for e in results],
        "benchmark_args": common + ["--benchmark_format=json", "--benchmark_min_time=1x",
                                    "--benchmark_report_aggregates_only=false"],
        "args": entries,
        "results": results,
        "symbolic_dims": symbolic_names([leaf for _, leaf in args]),
    }


# -- reading one back ---------------------------------------------------------------------------------------

def check_iree_tools(native: Mapping[str, Any], directory) -> None:
    """Refuse an IREE section whose `tools` are not exactly IREE_TOOLS: the field is data that documents
    the consumer, never a program path (an absolute path, or one leaving the wheel's tools directory,
    would run whatever the artifact's author chose). One ArtifactError line names the field."""
    tools = native.get("tools")
    if not isinstance(tools, dict):
        raise ArtifactError(f"Artifact '{directory}' | manifest field native.tools is {type(tools).__name__}, "
                            f"expected {IREE_TOOLS}")
    for key in sorted(set(tools) | set(IREE_TOOLS)):
        if tools.get(key) != IREE_TOOLS.get(key):
            raise ArtifactError(
                f"Artifact '{directory}' | manifest field native.tools.{ascii(key)[1:-1][:40]} is "
                f"{ascii(tools.get(key))[:120]}, expected {IREE_TOOLS.get(key)!r}: multiexport runs only the "
                "iree-base-runtime wheel's own tools, found by itself; an artifact never names the program that runs it")


_FILE = re.compile(r"^(input|output)\d+\.(npy|bin)$")


def check_section(manifest, directory) -> dict[str, Any]:
    """The manifest's native section, validated as user input: its consumer matches the backend, every
    leaf entry names a manifest leaf by index with the file name the index gives, and every path the
    consumer opens stays inside the artifact. One ArtifactError line names what is wrong."""
    from pathlib import Path

    from ..files import inside

    where = f"Artifact '{directory}' | native section"
    native = manifest.native
    fallback = manifest.format.get("static_fallback")
    if not isinstance(native, dict) and isinstance(fallback, dict) and isinstance(fallback.get("models"), dict):
        models = ", ".join(f"{key}: {rel}" for key, rel in sorted(fallback["models"].items()))
        raise ArtifactError(f"Artifact '{directory}' | holds one model per size ({models}) because its converter could "
                            "not keep the symbolic dims, and has no native section of its own: run the model of your "
                            "size natively (each is a complete artifact), e.g. `multiexport native DIR/<its directory>`")
    if not isinstance(native, dict):
        why = next((w for w in manifest.warnings if w.startswith("no native section: ")), None)
        raise ArtifactError(f"Artifact '{directory}' | manifest.json has no \"native\" section: " + (
            why[len("no native section: "):] if why else
            f"backend '{manifest.backend}' has no native consumer, or the artifact predates it"))
    if native.get("schema") != NATIVE_SCHEMA or native.get("consumer") != CONSUMERS.get(manifest.backend):
        raise ArtifactError(f"{where} | got schema {native.get('schema')!r} consumer {native.get('consumer')!r}, expected "
                            f"{NATIVE_SCHEMA!r} {CONSUMERS.get(manifest.backend)!r}")
    if manifest.backend == "iree":
        check_iree_tools(native, directory)
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
    if "model" in native:
        inside(Path(directory), str(native["model"]), "native model")
    for key in ("compile_options",):
        if key in native:
            inside(Path(directory), str(native[key]), "native compile options")
    return native
