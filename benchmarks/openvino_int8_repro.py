"""The OpenVINO CPU plugin's wrong int8 results, reduced: NNCF's int8 IR of a two-branch MLP on this CPU.

    python -m benchmarks.openvino_int8_repro            (needs the extra openvino-int8: nncf)

The model is tests/precision_models.py's two_inputs (relu(image @ w1 + extra @ w2) @ w3), written to ONNX by
multiexport's openvino export (jax2onnx: Gemm nodes) and quantized by nncf.quantize from 16 calibration samples
fed by input name. Printed for one feed, the first six logits of:
- jax.jit (float32), and ONNX Runtime's own QDQ int8 model of the same file (quantize_static) on ONNX Runtime;
- NNCF's default IR evaluated by OpenVINO's reference implementation (Model.evaluate), and compiled by the CPU
  plugin with every ISA it detects and capped at AVX512_CORE (ONEDNN_MAX_CPU_ISA, read when oneDNN loads: each
  capped run is a child process);
- ONNX Runtime's QDQ model compiled by the CPU plugin, the same two ways;
- NNCF's IR with model_type=TRANSFORMER (what openvino@int8 falls back to) on the CPU plugin.
Measured 2026-12-05, OpenVINO 2026.4.1, nncf 3.4.0, an AMD EPYC (avx512_vnni, avx512_bf16, no AMX): the
default IR gives all zeros with every ISA (AVX512_CORE_VNNI and up) and Model.evaluate's values capped at
AVX512_CORE, AVX2 or SSE4.1; the transformer-scheme IR is right either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CAP = "AVX512_CORE"


def _model(work: Path):
    """(ONNX path, 16 calibration feeds by input name, one feed, jax.jit's logits)."""
    import jax

    sys.path.insert(0, str(ROOT))
    from multiexport.exporting import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature
    from tests.precision_models import two_inputs

    target = two_inputs()
    artifact = get_backend("openvino").export(target.fn, build_signature(target), work / "fp32", ExportOptions())
    rng = np.random.default_rng(5)
    extra = (rng.normal(size=(16, 4, 64)) * 50).astype(np.float32)
    image = rng.uniform(0, 1, size=(16, 4, 64)).astype(np.float32)
    samples = [{"image": image[i], "extra": extra[i]} for i in range(16)]
    feed = {"image": rng.uniform(0, 1, size=(4, 64)).astype(np.float32),
            "extra": (rng.normal(size=(4, 64)) * 50).astype(np.float32)}
    ref = np.asarray(jax.jit(target.fn)(feed["image"], feed["extra"])["logits"])
    return artifact.directory / "model.onnx", samples, feed, ref


def _cpu(path: Path, feed_path: Path, capped: bool) -> np.ndarray:
    """The CPU plugin's logits for the model at `path` (in a child with oneDNN capped at CAP when `capped`)."""
    code = ("import sys, numpy as np, openvino as ov; f = dict(np.load(sys.argv[2])); "
            "cm = ov.Core().compile_model(sys.argv[1], 'CPU', {'INFERENCE_PRECISION_HINT': 'f32'}); "
            "np.save(sys.argv[3], cm(f)[0])")
    out = feed_path.with_name(f"out_{path.stem}_{capped}.npy")
    env = {**os.environ, **({"ONEDNN_MAX_CPU_ISA": CAP} if capped else {})}
    subprocess.run([sys.executable, "-c", code, str(path), str(feed_path), str(out)], env=env, check=True)
    return np.load(out)


def main() -> int:
    import nncf
    import onnxruntime as ort
    import openvino as ov
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    with tempfile.TemporaryDirectory(prefix="openvino-int8-repro-") as tmp:
        work = Path(tmp)
        onnx_path, samples, feed, ref = _model(work)
        feed_path = work / "feed.npz"
        np.savez(feed_path, **feed)
        rows = [("jax.jit float32", ref)]

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.items = iter(samples)

            def get_next(self):
                return next(self.items, None)

        qdq = work / "qdq.onnx"
        quantize_static(str(onnx_path), str(qdq), Reader())
        rows.append(("ONNX Runtime QDQ int8 on ONNX Runtime",
                     ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"]).run(None, feed)[0]))
        core = ov.Core()
        for scheme, kwargs in (("default", {}), ("transformer", {"model_type": nncf.ModelType.TRANSFORMER})):
            quantized = nncf.quantize(core.read_model(str(onnx_path)), nncf.Dataset(samples), subset_size=16,
                                      **kwargs)
            xml = work / f"nncf_{scheme}.xml"
            ov.save_model(quantized, str(xml), compress_to_fp16=False)
            if scheme == "default":
                outs = [ov.Tensor(np.zeros_like(ref))]
                quantized.evaluate(outs, [ov.Tensor(feed[p.get_any_name()]) for p in quantized.inputs])
                rows.append(("NNCF default IR, Model.evaluate (reference)", outs[0].data.copy()))
            rows.append((f"NNCF {scheme} IR, CPU plugin", _cpu(xml, feed_path, False)))
            rows.append((f"NNCF {scheme} IR, CPU plugin capped at {CAP}", _cpu(xml, feed_path, True)))
        rows.append(("ONNX Runtime QDQ int8, CPU plugin", _cpu(qdq, feed_path, False)))
        rows.append((f"ONNX Runtime QDQ int8, CPU plugin capped at {CAP}", _cpu(qdq, feed_path, True)))
    print(f"openvino {ov.get_version()}, nncf {nncf.__version__}, onnxruntime {ort.__version__}")
    print(f"{'':56s} first six logits{'':38s} max|x - jax| / max|jax|")
    scale = float(np.abs(ref).max())
    for name, values in rows:
        shown = " ".join(f"{v:+.3f}" for v in np.asarray(values).ravel()[:6])
        print(f"{name:56s} {shown:54s} {float(np.abs(np.asarray(values) - ref).max()) / scale:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
