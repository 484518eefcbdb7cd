"""openvino@int8: NNCF's post-training quantization of the OpenVINO model, checked against OpenVINO's own reference.

NNCF (`nncf.quantize`, the optional extra `openvino-int8`) inserts FakeQuantize ops on activations and stores the
weights as int8 with per-channel scales; the CPU plugin then runs the quantized ops on int8 kernels. It is
calibrated from multiexport's calibration samples, each fed by the model's input names (the leaves' ONNX graph
input names), never by position.

Why the self-check: on OpenVINO 2026.4.1's CPU plugin with the AVX512_CORE_VNNI int8 kernels (an AMD EPYC with
avx512_vnni, no AMX), NNCF's default IR of an MLP whose two quantized branches meet in an Add before a ReLU and
a MatMul computed all zeros, while the same IR evaluated by OpenVINO's reference implementation
(`Model.evaluate`) and by the CPU plugin capped at AVX512_CORE (ONEDNN_MAX_CPU_ISA) both gave jax.jit's values
within int8 error (benchmarks/openvino_int8_repro.py prints the figures). So the IR is right and the kernel
is not: the export runs the compiled IR on calibration samples and compares it with `Model.evaluate`. When
they disagree it quantizes again with NNCF's transformer scheme (`model_type=TRANSFORMER`: elementwise ops'
inputs are not quantized, so no such fusion), which that MLP computes right; when that disagrees too, no
artifact (unsupported-precision, with the figures).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from multiexport.sdk import ExportError, PrecisionFacts, calibration_facts, calibration_feeds

from .runner import config, write_ir

EXTRA = "openvino-int8"
COMPUTE = ("MatMul", "Convolution", "GroupConvolution", "ConvolutionBackpropData")
# The CPU plugin's result vs OpenVINO's reference evaluation of the same IR, as a fraction of the reference's
# largest magnitude: both compute the same int8 math, so they differ by at most a few quantization steps at
# rounding ties (measured 0 to 2e-7 on the test MLPs); the wrong kernel was off by 100% (zeros).
AGREE = 0.05
CHECK_SAMPLES = 2  # reference evaluation is slow on large models: two calibration samples tell a wrong kernel


def nncf_missing() -> str | None:
    """Why openvino@int8 cannot be made here (nncf not installed), or None."""
    try:
        found = importlib.util.find_spec("nncf") is not None
    except ValueError:  # sys.modules["nncf"] is None: the import is blocked, as good as absent
        found = False
    if not found:
        return (f"OpenVINO's int8 is NNCF's post-training quantization, and nncf is not installed: pip install "
                f"'multiexport[{EXTRA}]' (Python 3.11; nncf 3.4 needs numpy < 2.5)")
    return None


def quantize(ov, model, out_dir: Path, files: dict[str, str], front, options, signature, backend: str):
    """The int8 artifact: `model` (read from the ONNX file) quantized by nncf.quantize from the calibration
    samples and written as IR (model.xml, model.bin) in place of the ONNX file. Returns (files, the IR read back,
    PrecisionFacts); ExportError (unsupported-precision) when the CPU plugin computes every candidate wrong."""
    import nncf


    feeds = calibration_feeds(signature, options.calibration)
    taken = [leaf for leaf in front.inputs if leaf.param is not None]
    samples = [{str(leaf.param): np.asarray(feed[leaf.name]) for leaf in taken} for feed in feeds]
    tried = []
    for scheme, kwargs in (("default", {}), ("transformer", {"model_type": nncf.ModelType.TRANSFORMER})):
        quantized = nncf.quantize(model.clone(), nncf.Dataset(samples), subset_size=len(samples), **kwargs)
        disagreement = cpu_vs_reference(ov, quantized, samples[:CHECK_SAMPLES])
        tried.append((scheme, disagreement))
        if disagreement is None or disagreement <= AGREE:
            break
    else:
        shown = "; ".join(f"{s} scheme off by {d:.3g} of the reference's max" for s, d in tried)
        raise ExportError(f"Backend '{backend}' | OpenVINO's CPU plugin computes NNCF's int8 IR of this model wrong "
                          f"against OpenVINO's own reference evaluation of the same IR ({shown}): no int8 artifact",
                          backend=backend, category="unsupported-precision")
    written = write_ir(ov, quantized, out_dir, list(files.values()), compress_to_fp16=False)
    reduced, kept = ops(written)
    scheme, disagreement = tried[-1]
    call = "nncf.quantize(ov.Core().read_model('model.onnx'), nncf.Dataset(samples), subset_size=N" + (
        ", model_type=nncf.ModelType.TRANSFORMER)" if scheme == "transformer" else ")")
    notes = [f"self-check: the CPU plugin's outputs vs OpenVINO's reference evaluation (Model.evaluate) of the same "
             f"IR on {min(CHECK_SAMPLES, len(samples))} calibration sample(s): "
             + ("not comparable (the reference could not evaluate the IR)" if disagreement is None else
                f"max difference {disagreement:.3g} of the reference's max |value|"),
             "the math is int8 where FakeQuantize feeds a MatMul/Convolution, on the CPU plugin's int8 kernels; the "
             "rest stays f32 (INFERENCE_PRECISION_HINT=f32)"]
    if len(tried) > 1:
        notes.append(f"NNCF's default scheme was computed wrong by this machine's CPU plugin (off by {tried[0][1]:.3g} "
                     "of the reference's max; where it was measured, its AVX512_CORE_VNNI int8 kernels: "
                     "benchmarks/openvino_int8_repro.py), so the transformer scheme (elementwise inputs left in "
                     "float) was used: a CPU with such kernels may compute the default scheme's IR wrong")
    facts = PrecisionFacts(
        precision="int8", method=call, toolchain=f"nncf {nncf.__version__}, openvino {ov.get_version()}",
        calibration=calibration_facts(feeds, options.calibration, [leaf.name for leaf in taken]),
        quantized_ops=reduced, float_ops=kept,
        io="float32 inputs and outputs, as the leaves declare (FakeQuantize inside the IR)", notes=notes)
    return {"model": "model.xml", "ir_weights": "model.bin"}, written, facts


def cpu_vs_reference(ov, model, samples: list[dict[str, np.ndarray]]) -> float | None:
    """The largest |CPU plugin - Model.evaluate| over `samples` and the float outputs, as a fraction of the
    reference's largest |value|; None when the reference cannot evaluate the model (an op without a reference
    implementation): then the compare's accuracy budget is the only judge."""
    compiled = ov.Core().compile_model(model, "CPU", config(1))
    worst = 0.0
    for feed in samples:
        got = compiled(feed)
        outs = [ov.Tensor(np.zeros_like(np.asarray(got[i]))) for i in range(len(model.outputs))]
        try:
            ok = model.evaluate(outs, [ov.Tensor(np.ascontiguousarray(feed[_name(p, feed)])) for p in model.inputs])
        except Exception:  # the reference has no implementation of some op: nothing to compare with
            return None
        if not ok:
            return None
        for i, out in enumerate(outs):
            ref = np.asarray(out.data)
            if not np.issubdtype(ref.dtype, np.floating):
                continue
            scale = float(np.max(np.abs(ref))) or 1.0
            worst = max(worst, float(np.max(np.abs(np.asarray(got[i], ref.dtype) - ref))) / scale)
    return worst


def _name(port, feed: dict[str, Any]) -> str:
    """The feed's key among the port's names (the leaf's graph input name)."""
    return next(n for n in port.get_names() if n in feed)


def ops(model) -> tuple[dict[str, int], dict[str, int]]:
    """(compute op type -> count fed by a FakeQuantize: int8 on the CPU plugin, those that stayed float)."""
    reduced: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind in COMPUTE:
            fed = any(i.get_source_output().get_node().get_type_name() == "FakeQuantize" for i in op.inputs())
            (reduced if fed else kept)[kind] += 1
    return dict(sorted(reduced.items())), dict(sorted(kept.items()))
