"""SavedModel -> .tflite with TensorFlow's TFLite converter, and the facts a consumer needs from the file.

The converter reads the SavedModel's `XlaCallModule` module with TensorFlow's own StableHLO reader and
legalizes it to TFLite builtins. Its real diagnostics (the op it cannot read or lower) are MLIR
messages printed on the C++ stderr (fd 2), not put in the Python exception, so every call that can
fail runs with fd 2 captured and the diagnostics travel in `ConversionFailed` to `classify`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

from multiexport.sdk import producer_version

from . import weights_outside

SIGNATURE_KEY = "serving_default"
MODEL_FILE = "model.tflite"
# ConverterErrorData.ErrorCode (tensorflow/compiler/mlir/lite/metrics/converter_error_data.proto).
NEEDS_FLEX_OPS, NEEDS_CUSTOM_OPS = 1, 2


class ConversionFailed(Exception):
    """The converter (or TensorFlow's StableHLO reader before it) refused the SavedModel.

    kind: "version-skew" when the module cannot be read, else "convert".
    text: the exception's text followed by the MLIR diagnostics captured from fd 2.
    errors: (ConverterErrorData error_code, operator name) pairs the converter reported.
    producer, consumer: the module's StableHLO version (from its bytecode header) and the one the
        converter reads.
    leaf_dtypes: the function's leaf dtypes (set by the backend), which tell a dtype gap from a missing op.
    """

    def __init__(self, kind: str, text: str, errors: list[tuple[int, str]], producer: str | None, consumer: str):
        super().__init__(" ".join(text.split())[:3000])
        self.kind, self.text, self.errors, self.producer, self.consumer = kind, text, errors, producer, consumer
        self.leaf_dtypes: list[str] = []  # the function's leaf dtypes, set by the backend (a dtype gap or an op gap)


@contextlib.contextmanager
def captured_stderr() -> Iterator[dict[str, str]]:
    """fd 2 into a temporary file for the duration; box["text"] holds what was written, afterwards."""
    box = {"text": ""}
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield box
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            box["text"] = sink.read().decode(errors="replace")


def diagnostics(text: str, limit: int = 6) -> list[str]:
    """The distinct MLIR `error:` / `note: in bytecode ...` lines of a captured stderr, locations dropped."""
    found: list[str] = []
    for line in text.splitlines():
        match = re.search(r"(?:error|note): (.*)", line)
        if match:
            message = match.group(1).strip()
            if message and message not in found and ("error" in line or "produced by" in message):
                found.append(message[:300])
    return found[:limit]


def converter_stablehlo() -> str:
    """The StableHLO version the installed converter (TensorFlow's StableHLO reader) reads."""
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tfhlo

    return str(tfhlo.get_current_version())


def call_modules(saved_model_dir: Path) -> list[bytes]:
    """The serialized StableHLO modules of every XlaCallModule op in saved_model.pb (graph and functions)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    modules = []
    for graph in proto.meta_graphs:
        nodes = list(graph.graph_def.node) + [n for f in graph.graph_def.library.function for n in f.node_def]
        modules += [bytes(n.attr["module"].s) for n in nodes if n.op == "XlaCallModule"]
    return modules


def check_modules(saved_model_dir: Path) -> dict[str, Any]:
    """Read every module with the converter's own StableHLO reader; ConversionFailed("version-skew") if one fails.

    Version numbers alone would say skew where there is none (most modules newer than the reader still
    read), so the reader decides; the versions are what the message names. Returns the facts.
    """
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tfhlo

    consumer = converter_stablehlo()
    producers = []
    for module in call_modules(saved_model_dir):
        producer = producer_version(module)
        producers.append(producer)
        with captured_stderr() as err:
            try:
                tfhlo.deserialize_portable_artifact_str(module)
                continue
            except Exception as exc:  # the reader's words are on fd 2; the exception says only "failed"
                failure = exc
        composites = sorted({c.decode() for c in re.findall(rb"chlo\.[a-z_]+", module)})
        text = f"{type(failure).__name__}: {failure}\n" + "\n".join(diagnostics(err["text"]))
        if composites:
            text += f"\ncomposites in the module: {', '.join(composites)}"
        raise ConversionFailed("version-skew", text, [], producer, consumer) from failure
    return {"module_stablehlo": sorted({p or "unknown" for p in producers}), "converter_stablehlo": consumer,
            "xla_call_modules": len(producers)}


# What each reduced precision sets on the converter (TFLite's post-training quantization guide), in words.
PRECISION_CALLS = {
    "fp16": "converter.optimizations = [tf.lite.Optimize.DEFAULT]; converter.target_spec.supported_types = "
            "[tf.float16]",
    "int8-dynamic": "converter.optimizations = [tf.lite.Optimize.DEFAULT] (dynamic range quantization)",
    "int8": "converter.optimizations = [tf.lite.Optimize.DEFAULT]; converter.representative_dataset = samples, "
            "each a dict keyed by the serving_default signature's input names (float inputs and outputs kept)",
}


# Past this many bytes of weights the converter writes them after the flatbuffer, addressed by 64-bit offsets
# (its `_experimental_use_buffer_offset`): a flatbuffer addresses at most 2 GiB, so a model whose weights reach
# that cannot be a plain .tflite. LiteRT's interpreter reads such a file as any other (checked at load).
OFFSET_BYTES = 1 << 30
# From this many bytes of variables the weights stay out of the converter (`weights_outside`). Below it the
# converter's ~7x of the weights stays under ~0.9 GiB, within the backend's declared export footprint, and its
# constant folding (a kernel's layout, a scale into its weights) is kept; from it on, the export worker holds
# the target, the file it writes and LiteRT's check of it (benchmarks/litert_memory.md).
OUTSIDE_BYTES = 128 << 20


def convert(saved_model_dir: Path, select_tf_ops: bool, precision: str = "fp32",
            samples: list[dict[str, Any]] | None = None, buffer_offsets: bool = False,
            out: Path | None = None) -> tuple[Any, list[str]]:
    """(the .tflite bytes, the ops sets used) converted from the SavedModel's serving_default signature, at
    `precision` (samples: the int8 calibration feeds keyed by signature input name); `buffer_offsets`: the
    constant buffers after the flatbuffer, addressed by offsets (OFFSET_BYTES). With `out`, the model is
    written there and the bytes are a read-only map of that file (only what is read of it becomes resident).

    At fp32, a SavedModel holding OUTSIDE_BYTES or more of variables is converted with its weights as inputs and
    the weights written after the flatbuffer (`weights_outside`): the converter never holds them (it would hold
    ~6 copies at once); the bytes are then a read-only map of the file written (`out`, else a temporary one)."""
    import tensorflow as tf

    ops = [tf.lite.OpsSet.TFLITE_BUILTINS] + ([tf.lite.OpsSet.SELECT_TF_OPS] if select_tf_ops else [])
    names = [o.name for o in ops]
    call = weights_outside.serving_call(saved_model_dir, SIGNATURE_KEY) if precision == "fp32" else None
    if call is None or call.nbytes < OUTSIDE_BYTES:
        blob = _run(_converter(saved_model_dir, ops, precision, samples, buffer_offsets), saved_model_dir)
        if out is None:
            return blob, names
        out.write_bytes(blob)
        del blob
        return _mapped(out), names
    with tempfile.TemporaryDirectory(prefix=".litert-weights-", dir=saved_model_dir.parent) as tmp:
        inputs_dir = Path(tmp) / "weights-as-inputs"
        weights_outside.save_weights_as_inputs(call, inputs_dir, SIGNATURE_KEY)
        blob = _run(_converter(inputs_dir, ops, precision, samples, False), saved_model_dir)
        with open(out, "w+b") if out is not None else tempfile.TemporaryFile(dir=tmp) as file:
            weights_outside.write_with_weights(blob, call, saved_model_dir, file)
            file.flush()
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ), names


def _mapped(path: Path) -> mmap.mmap:
    """A read-only map of the file at `path`."""
    with open(path, "rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def _converter(saved_model_dir: Path, ops, precision: str, samples, buffer_offsets: bool):
    """The TFLite converter for the SavedModel's serving_default, with the ops sets and precision set."""
    import numpy as np
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir), signature_keys=[SIGNATURE_KEY])
    converter.target_spec.supported_ops = ops
    converter._experimental_use_buffer_offset = buffer_offsets  # the converter's large-model path (no public name)
    if precision != "fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if precision == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    if precision == "int8":
        feeds = [{k: np.asarray(v) for k, v in sample.items()} for sample in samples or []]
        converter.representative_dataset = lambda: iter(feeds)
    return converter


def _run(converter, saved_model_dir: Path) -> bytes:
    """converter.convert(), its MLIR diagnostics captured into ConversionFailed (about `saved_model_dir`)."""
    with captured_stderr() as err, warnings.catch_warnings():
        # int8 calibration runs TF's own tf.lite.Interpreter inside the converter, which warns that it is deprecated
        warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated", category=UserWarning)
        try:
            blob = converter.convert()
            failure = None
        except Exception as exc:  # tensorflow.lite.python.convert_phase.ConverterError, mostly
            failure = exc
    if failure is not None:
        errors = [(int(e.error_code), str(e.operator.name)) for e in getattr(failure, "errors", None) or []]
        modules = call_modules(saved_model_dir)
        producer = producer_version(modules[0]) if modules else None
        text = f"{type(failure).__name__}: {failure}\n" + "\n".join(diagnostics(err["text"]))
        raise ConversionFailed("convert", text, errors, producer, converter_stablehlo()) from failure
    return blob if isinstance(blob, bytes) else bytes(blob)


def precision_ops(blob: bytes) -> tuple[dict[str, int], dict[str, int]]:
    """(op name -> count of ops taking int8/float16 weights or activations (float16 weights through the
    DEQUANTIZE that widens them), op name -> count of the arithmetic ops left in float32), read from the
    flatbuffer's tensor types."""
    from collections import Counter

    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(blob, 0)
    names = _builtin_names(schema)
    reduced_types = {schema.TensorType.INT8, schema.TensorType.UINT8, schema.TensorType.FLOAT16,
                     schema.TensorType.INT16}
    arithmetic = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV",
                  "STABLEHLO_DOT_GENERAL", "STABLEHLO_CONVOLUTION", "EMBEDDING_LOOKUP"}
    reduced: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    for g in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(g)
        ops = [subgraph.Operators(i) for i in range(subgraph.OperatorsLength())]
        # tensors a DEQUANTIZE makes from reduced-precision weights (fp16 weights are stored so, and widened at load)
        widened = {op.Outputs(0) for op in ops if _code_name(model.OperatorCodes(op.OpcodeIndex()), names) == "DEQUANTIZE"
                   and subgraph.Tensors(op.Inputs(0)).Type() in reduced_types}
        for op in ops:
            name = _code_name(model.OperatorCodes(op.OpcodeIndex()), names)
            inputs = [op.Inputs(j) for j in range(op.InputsLength()) if op.Inputs(j) >= 0]
            types = {subgraph.Tensors(t).Type() for t in inputs}
            if name in ("QUANTIZE", "DEQUANTIZE"):
                continue
            if types & reduced_types or widened.intersection(inputs):
                reduced[name] += 1
            elif name in arithmetic:
                kept[name] += 1
    return dict(sorted(reduced.items())), dict(sorted(kept.items()))


def model_metadata(blob: bytes) -> dict[str, Any]:
    """What the .tflite flatbuffer says about itself: schema version, description, min_runtime_version, and who
    wrote the weights when multiexport did (`weights_outside`)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(blob, 0)
    found: dict[str, Any] = {"schema_version": model.Version(),
                             "description": (model.Description() or b"").decode(errors="replace")}
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name() in (b"min_runtime_version", weights_outside.WRITTEN_BY[0]):
            raw = bytes(model.Buffers(entry.Buffer()).DataAsNumpy())
            found[entry.Name().decode()] = raw.rstrip(b"\0").decode(errors="replace")
    found["subgraphs"] = model.SubgraphsLength()
    return found


def op_names(blob: bytes) -> list[str]:
    """The distinct operator codes the model uses (builtins by name, custom ops by their custom code)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(blob, 0)
    names = _builtin_names(schema)
    return sorted({_code_name(model.OperatorCodes(i), names) for i in range(model.OperatorCodesLength())})


def _builtin_names(schema) -> dict[int, str]:
    return {value: key for key, value in vars(schema.BuiltinOperator).items() if not key.startswith("_")}


def _code_name(code, names: dict[int, str]) -> str:
    """An operator code's name: a builtin by its name, a custom op as custom:CODE."""
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    custom = code.CustomCode()
    return f"custom:{custom.decode()}" if custom else names.get(builtin, str(builtin))


# The combining ops LiteRT's STABLEHLO_SCATTER kernel takes in its region (ai_edge_litert 2.x,
# stablehlo_scatter.cc: OpCodeToComputationType); an empty region is a plain update.
SCATTER_REGION_OPS = ("STABLEHLO_ADD", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM", "STABLEHLO_MINIMUM")


def scatter_regions(blob: bytes) -> list[list[str]]:
    """Per STABLEHLO_SCATTER op in the model, the ops of its combining region, as the converter wrote them.

    The converter legalizes the region's `stablehlo.add` to a TFLite ADD, which the kernel does not take,
    so a scatter-add converts and then cannot prepare; this names the op the kernel saw.
    """
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(blob, 0)
    names = _builtin_names(schema)

    def op_name(op) -> str:
        return _code_name(model.OperatorCodes(op.OpcodeIndex()), names)

    regions = []
    for g in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(g)
        for i in range(subgraph.OperatorsLength()):
            op = subgraph.Operators(i)
            if op_name(op) != "STABLEHLO_SCATTER" or op.BuiltinOptions2Type() != schema.BuiltinOptions2.StablehloScatterOptions:
                continue
            table, options = op.BuiltinOptions2(), schema.StablehloScatterOptions()
            options.Init(table.Bytes, table.Pos)
            region = model.Subgraphs(options.UpdateComputationSubgraphIndex())
            regions.append([op_name(region.Operators(j)) for j in range(region.OperatorsLength())])
    return regions


# TFLite's int8/int16 ADD and SUB kernels (add.cc, sub.cc Prepare) rescale through `(1 << left_shift) * output
# scale` in float32 and abort (QuantizeMultiplierSmallerThanOneExp's CHECK) when that overflows to inf or a scale
# is not a positive finite number: a native crash, not an error, when the model is first prepared.
_LEFT_SHIFT = {"INT8": 20, "INT16": 15}
_FLOAT32_MAX = 3.4028234663852886e38


def requantization_gap(blob: bytes) -> str | None:
    """What makes LiteRT's quantized ADD/SUB kernel abort on this model, in words (the op, its tensor and the
    range calibration gave it), or None. Such a scale comes from float32's extremes calibrated into int8: an
    attention mask's bias of finfo(float32).min (HF BERT) gives a range of +-3.4e38, a scale of ~1.3e36."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(blob, 0)
    names = _builtin_names(schema)
    types = {value: key for key, value in vars(schema.TensorType).items() if not key.startswith("_")}
    for g in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(g)
        for i in range(subgraph.OperatorsLength()):
            op = subgraph.Operators(i)
            name = _code_name(model.OperatorCodes(op.OpcodeIndex()), names)
            out = subgraph.Tensors(op.Outputs(0)) if op.OutputsLength() else None
            if name not in ("ADD", "SUB") or out is None or types.get(out.Type()) not in _LEFT_SHIFT:
                continue
            shift = _LEFT_SHIFT[types[out.Type()]]
            tensors = [subgraph.Tensors(op.Inputs(j)) for j in range(op.InputsLength()) if op.Inputs(j) >= 0] + [out]
            for tensor in tensors:
                quant = tensor.Quantization()
                scale = float(quant.Scale(0)) if quant is not None and quant.ScaleLength() else None
                if scale is None:
                    continue
                overflows = tensor is out and (1 << shift) * scale > _FLOAT32_MAX
                if overflows or not (0 < scale < float("inf")):
                    role = "output" if tensor is out else "input"
                    return (f"its {types[out.Type()].lower()} {name} '{(tensor.Name() or b'').decode(errors='replace')}' "
                            f"has an {role} scale of {scale:.3g} (a calibrated range of +-{scale * 127:.3g}), which "
                            f"TFLite's {name} kernel cannot requantize: it aborts when the model is prepared")
    return None


def uses_buffer_offsets(blob: bytes) -> bool:
    """Whether the .tflite keeps its constant buffers after the flatbuffer (the converter's `buffer_location`
    metadata entry, which it writes exactly then)."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(blob, 0)
    return any(model.Metadata(i).Name() == b"buffer_location" for i in range(model.MetadataLength()))
