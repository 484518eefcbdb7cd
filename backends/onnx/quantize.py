"""Reduced-precision ONNX models with ONNX Runtime's own tools, from the fp32 model this backend just wrote.

fp16: `onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)` (inputs and outputs stay
float32; ops ONNX Runtime has no float16 kernel for stay float32 behind Casts). int8-dynamic:
`onnxruntime.quantization.quantize_dynamic` (int8 weights, activations quantized per call). int8:
`quantize_static` in ONNX Runtime's default QDQ format, calibrated (MinMax) from sample feeds that arrive keyed
by leaf name and are mapped here to the graph's input names, never by position.

The quantizers' scratch files (the calibrator's augmented model) go to a directory inside the artifact's
staging directory, removed before the artifact is published: nothing is written outside the output directory.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Sequence

from multiexport.sdk import CalibrationFacts, ExportError, PrecisionFacts, dist_version

# Ops whose work is the model's arithmetic (what a quantizer targets); layout and elementwise glue aside.
COMPUTE_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention", "LSTM", "GRU", "RNN"})
INTEGER_OPS = frozenset({"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv", "DynamicQuantizeMatMul",
                         "MatMulIntegerToFloat", "QGemm", "QAttention", "DynamicQuantizeLSTM"})
SCRATCH = ".quantize-scratch"


def quantize(out_dir: Path, model_file: str, data_file: str, precision: str, feeds: Sequence[dict[str, Any]],
             calibration: CalibrationFacts | None, input_names: dict[str, str]) -> PrecisionFacts:
    """Rewrite `out_dir/model_file` (fp32, with `data_file` beside it when external) at `precision`, embedded
    in one file. feeds: calibration samples by leaf name (int8 only); input_names: leaf name -> graph input.
    Returns what was done; ExportError (converter-error) naming the quantizer when it fails."""
    import onnx

    source = out_dir / model_file
    scratch = out_dir / SCRATCH
    scratch.mkdir()
    fp32 = scratch / "fp32.onnx"
    try:
        model = onnx.load(str(source))  # external data read in
        onnx.save(model, str(fp32))
        (out_dir / data_file).unlink(missing_ok=True)
        with _temporary_in(scratch):
            method, notes = _run(precision, fp32, source, model, feeds, input_names)
    except ExportError:
        raise
    except Exception as exc:  # the quantizer's own failure, named as such
        raise ExportError(f"Backend 'onnx' | ONNX Runtime's {precision} quantizer failed: "
                          f"{' '.join(f'{type(exc).__name__}: {exc}'.split())[:600]}", backend="onnx",
                          category="converter-error") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    written = onnx.load(str(source))
    quantized, kept = op_counts(written, precision)
    if not quantized:  # never a float model under a reduced-precision name
        raise ExportError(f"Backend 'onnx' | ONNX Runtime's {precision} quantizer reduced none of the model's ops "
                          f"(left in float32: {', '.join(f'{k} x{v}' for k, v in kept.items()) or 'none it targets'})",
                          backend="onnx", category="unsupported-precision")
    return PrecisionFacts(precision=precision, method=method, toolchain=f"onnxruntime {dist_version('onnxruntime')}",
                          calibration=calibration, quantized_ops=quantized, float_ops=kept,
                          io="float32 inputs and outputs, as the leaves declare", notes=notes)


def _run(precision: str, fp32: Path, target: Path, model, feeds, input_names) -> tuple[str, list[str]]:
    """Quantize `fp32` into `target`; (the call made, notes)."""
    if precision == "fp16":
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        del model.graph.value_info[:]  # the exporter's intermediate shape hints: the converter infers its own
        half = convert_float_to_float16(model, keep_io_types=True)
        onnx.save(half, str(target))
        return ("onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=True)",
                ["ops ONNX Runtime's converter blocks by default stay float32 behind Casts (its op_block_list)"])
    from onnxruntime.quantization import QuantType, quantize_dynamic, quantize_static

    if precision == "int8-dynamic":
        import onnx

        rewritten = gemm_to_matmul(model)
        if rewritten:
            onnx.save(model, str(fp32))
        quantize_dynamic(str(fp32), str(target), weight_type=QuantType.QInt8)
        return ("onnxruntime.quantization.quantize_dynamic(model, weight_type=QuantType.QInt8)",
                ["no pre-processing (onnxruntime.quantization.shape_inference.quant_pre_process) was run",
                 *([f"{rewritten} Gemm node(s) with constant weights rewritten as MatMul (+ Add) first: the dynamic "
                    "quantizer has an integer kernel for MatMul, none for Gemm"] if rewritten else [])])
    if precision == "int8":
        quantize_static(str(fp32), str(target), LeafReader(feeds, input_names))
        return ("onnxruntime.quantization.quantize_static(model, reader, quant_format=QuantFormat.QDQ, "
                "activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=MinMax), the "
                "reader yielding each sample keyed by graph input name",
                ["QDQ format: ONNX Runtime fuses each DequantizeLinear -> op -> QuantizeLinear into an integer "
                 "kernel at session creation where it has one"])
    raise ExportError(f"Backend 'onnx' | got precision {precision!r}, expected fp16, int8-dynamic or int8",
                      backend="onnx", category="unsupported-precision")


def gemm_to_matmul(model) -> int:
    """Rewrite each Gemm(A, B[, C]) with alpha = 1, beta 0 or 1, transA = 0 and B a constant as MatMul(A, B or
    B^T) (+ Add C where beta is 1): the same arithmetic, in the op ONNX Runtime's dynamic quantizer has an
    integer kernel for.
    Returns how many were rewritten."""
    from onnx import helper, numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    nodes, count = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (node.op_type == "Gemm" and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) in (0.0, 1.0)
                 and not attrs.get("transA", 0) and node.input[1] in initializers)
        if not plain:
            nodes.append(node)
            continue
        weight = node.input[1]
        if attrs.get("transB", 0):
            transposed = numpy_helper.to_array(initializers[weight]).T.copy()
            weight = f"{node.input[1]}__transposed"
            if weight not in initializers:
                initializers[weight] = numpy_helper.from_array(transposed, weight)
                model.graph.initializer.append(initializers[weight])
        has_bias = len(node.input) > 2 and node.input[2] and attrs.get("beta", 1.0) == 1.0
        product = f"{node.output[0]}__matmul" if has_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product], name=f"{node.name}__matmul"))
        if has_bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=f"{node.name}__add"))
        count += 1
    if count:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return count


class LeafReader:
    """An `onnxruntime.quantization.CalibrationDataReader` over feeds keyed by leaf name: each sample is handed
    to ONNX Runtime keyed by the graph input the leaf became (leaves the graph dropped are left out)."""

    def __init__(self, feeds: Sequence[dict[str, Any]], input_names: dict[str, str]):
        self._samples = iter([{input_names[leaf]: value for leaf, value in feed.items() if leaf in input_names}
                              for feed in feeds])

    def get_next(self) -> dict[str, Any] | None:
        """The next sample keyed by graph input name, None after the last (ONNX Runtime's reader protocol)."""
        return next(self._samples, None)

    # ONNX Runtime's reader protocol (CalibrationDataReader is an ABC with these two methods)
    def __iter__(self):
        return self

    def __next__(self):
        sample = self.get_next()
        if sample is None:
            raise StopIteration
        return sample


def op_counts(model, precision: str) -> tuple[dict[str, int], dict[str, int]]:
    """(op type -> count computing in reduced precision, op type -> count of compute ops left in float32)."""
    nodes = list(model.graph.node)
    if precision == "fp16":
        return _fp16_counts(model)
    produced_by = {out: node.op_type for node in nodes for out in node.output}
    quantized: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    for node in nodes:
        if node.op_type in INTEGER_OPS:
            quantized[node.op_type] += 1
        elif node.op_type in COMPUTE_OPS:
            fed_by_dq = any(produced_by.get(name) == "DequantizeLinear" for name in node.input[:2])
            (quantized if fed_by_dq else kept)[node.op_type] += 1
    return dict(sorted(quantized.items())), dict(sorted(kept.items()))


def _fp16_counts(model) -> tuple[dict[str, int], dict[str, int]]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    half: Counter[str] = Counter()
    single: Counter[str] = Counter()
    for node in model.graph.node:
        if node.op_type in ("Cast", "Constant") or not node.output:
            continue
        kind = types.get(node.output[0])
        if kind == onnx.TensorProto.FLOAT16:
            half[node.op_type] += 1
        elif kind == onnx.TensorProto.FLOAT:
            single[node.op_type] += 1
    return dict(sorted(half.items())), dict(sorted(single.items()))


@contextlib.contextmanager
def _temporary_in(directory: Path) -> Iterator[None]:
    """Python's temporary files (where ONNX Runtime's calibrator writes its augmented model) in `directory`."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(directory)
    try:
        yield
    finally:
        tempfile.tempdir = saved
