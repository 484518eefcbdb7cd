"""Every reduced-precision variant a backend declares, made by the format's own toolchain, read back from disk:
its manifest states the precision, the method and what was quantized, its outputs keep the default accuracy
budget against jax.jit, and int8 calibrated from a named .npz (leaves in another order than the function's
arguments) is exactly what calibrating through the toolchain's own API by hand gives."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from multiexport.exporting import ExportOptions, Manifest
from multiexport.exporting.precision import Calibration
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import save_npz
from multiexport.leaves import build_signature
from multiexport.measure.accuracy import DEFAULT_BUDGETS, leaf_accuracy

from ..precision_models import two_inputs

VARIANTS = [("onnx", "fp16"), ("onnx", "int8-dynamic"), ("onnx", "int8"), ("litert", "fp16"),
            ("litert", "int8-dynamic"), ("litert", "int8"), ("openvino", "fp16"), ("iree", "fp16")]


def _available(name):
    status = get_backend(name).available()
    if not status.ok:
        pytest.skip(f"{name} unavailable: {status.reason}")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The target, its signature, a feed, jax.jit's outputs and a calibration .npz keyed by leaf name, the second
    argument first."""
    target = two_inputs()
    sig = build_signature(target)
    rng = np.random.default_rng(5)
    samples = {"extra": (rng.normal(size=(16, 4, 64)) * 50).astype(np.float32),
               "image": rng.uniform(0, 1, size=(16, 4, 64)).astype(np.float32)}
    path = save_npz(tmp_path_factory.mktemp("calibration") / "calibration.npz", samples)
    feed = {"image": rng.uniform(0, 1, size=(4, 64)).astype(np.float32),
            "extra": (rng.normal(size=(4, 64)) * 50).astype(np.float32)}
    ref = np.asarray(jax.jit(target.fn)(feed["image"], feed["extra"])["logits"])
    return target, sig, samples, Calibration(str(path), False, "given in calibration.npz"), feed, ref


def _export(model, backend, precision, out):
    target, sig, _, calibration, _, _ = model
    options = ExportOptions(platforms=("cpu",), precision=precision,
                            calibration=calibration if precision == "int8" else None)
    return get_backend(backend).export(target.fn, sig, out, options)


@pytest.mark.parametrize("backend, precision", VARIANTS, ids=[f"{b}@{p}" for b, p in VARIANTS])
def test_each_variant_states_what_it_is_and_keeps_its_accuracy_budget(model, tmp_path, backend, precision):
    _available(backend)
    artifact = _export(model, backend, precision, tmp_path / "a")
    manifest = Manifest.read(artifact.directory)  # from disk, as any consumer reads it
    facts = manifest.precision
    assert facts is not None and facts.precision == precision and facts.method and facts.toolchain
    assert facts.quantized_ops, f"nothing was reduced: {facts}"
    assert (facts.calibration is not None) == (precision == "int8")
    if facts.calibration is not None:
        assert facts.calibration.samples == 16 and not facts.calibration.synthetic
    assert [leaf.dtype for leaf in manifest.inputs] == ["float32", "float32"]  # float at the boundary
    _, _, _, _, feed, ref = model
    with get_backend(backend).load(artifact.directory) as runner:
        (got,) = runner(feed).values()
    assert got.dtype == np.float32
    accuracy = leaf_accuracy("logits", [got], [ref], DEFAULT_BUDGETS[precision])
    assert not accuracy.failed, accuracy
    assert not np.array_equal(got, ref)  # it really is another precision, not the float artifact


def test_onnx_int8_calibrated_from_named_leaves_is_ort_quantize_static_by_hand(model, tmp_path):
    _available("onnx")
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    _, _, samples, _, feed, _ = model
    made = _export(model, "onnx", "int8", tmp_path / "int8")
    fp32 = _export(model, "onnx", "fp32", tmp_path / "fp32")

    class Reader(CalibrationDataReader):
        def __init__(self, pairs):
            self.items = iter([{"image": samples[pairs[0]][i], "extra": samples[pairs[1]][i]} for i in range(16)])

        def get_next(self):
            return next(self.items, None)

    def run(path):
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]

    quantize_static(str(fp32.directory / "model.onnx"), str(tmp_path / "by_hand.onnx"), Reader(("image", "extra")))
    np.testing.assert_array_equal(run(made.directory / "model.onnx"), run(tmp_path / "by_hand.onnx"))
    # what a positional mix-up would have made: the file's first array is 'extra'
    quantize_static(str(fp32.directory / "model.onnx"), str(tmp_path / "swapped.onnx"), Reader(("extra", "image")))
    assert not np.array_equal(run(made.directory / "model.onnx"), run(tmp_path / "swapped.onnx"))


@pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning")
def test_litert_int8_calibrated_from_named_leaves_is_the_tflite_converter_by_hand(model, tmp_path):
    _available("litert")
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    _, _, samples, _, feed, _ = model
    made = _export(model, "litert", "int8", tmp_path / "int8")
    saved = _export(model, "savedmodel", "fp32", tmp_path / "savedmodel")

    def by_hand(order):
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved.directory), signature_keys=["serving_default"])
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: iter(
            [{"image": samples[order[0]][i], "extra": samples[order[1]][i]} for i in range(16)])
        return converter.convert()

    def run(blob):
        interpreter = Interpreter(model_content=blob)
        (out,) = interpreter.get_signature_runner("serving_default")(**feed).values()
        return out

    ours = (made.directory / "model.tflite").read_bytes()
    np.testing.assert_array_equal(run(ours), run(by_hand(("image", "extra"))))
    assert not np.array_equal(run(ours), run(by_hand(("extra", "image"))))


def _weights_in():
    """An MLP whose weights are all input leaves, with the function's own constants (GELU's, a 0.5) inside."""
    from multiexport import Target

    def weights_in_fn(params, x):
        hidden = jax.nn.gelu(x @ params["w1"] + params["b1"])
        return {"logits": hidden @ params["w2"] * 0.5}

    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(16, 32)).astype(np.float32), "b1": np.zeros(32, np.float32),
              "w2": rng.normal(size=(32, 4)).astype(np.float32)}
    return Target(weights_in_fn, args=(params, rng.normal(size=(2, 16)).astype(np.float32)), name="weights_in")


WEIGHTS_ONLY = [("litert", "fp16"), ("openvino", "fp16")]


@pytest.mark.parametrize("backend, precision", WEIGHTS_ONLY, ids=[f"{b}@{p}" for b, p in WEIGHTS_ONLY])
def test_a_weights_only_reduction_of_a_target_storing_no_weights_is_unsupported_precision(tmp_path, backend, precision):
    """Its toolchain reduced only the function's own constants: the artifact's outputs were bit-identical to the
    float artifact's and it was `ok` (OpenVINO's even 1.7x larger); now no artifact, naming why."""
    from multiexport import ExportError

    _available(backend)
    target = _weights_in()
    sig = build_signature(target)
    with pytest.raises(ExportError, match="reduces only the weights stored in the model, and this target stores none") \
            as info:
        get_backend(backend).export(target.fn, sig, tmp_path / "a", ExportOptions(precision=precision))
    assert info.value.category == "unsupported-precision" and "\n" not in str(info.value)
    assert not (tmp_path / "a").exists()
    float_artifact = get_backend(backend).export(target.fn, sig, tmp_path / "f", ExportOptions())  # fp32 still is
    assert Manifest.read(float_artifact.directory).precision is None
