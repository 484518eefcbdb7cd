"""LiteRT int8 of a model whose calibration meets float32's extremes (a BERT's attention mask adds
finfo(float32).min): the converter writes an int8 ADD/SUB with a scale of ~1.3e36, and LiteRT's kernel aborts the
process that prepares it (QuantizeMultiplierSmallerThanOneExp's CHECK, SIGABRT; the export died with exit 134).
The export now names the op and the range and makes no artifact; any other native crash preparing a reduced
model is seen in a child process, not as the end of the exporting one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import ExportError, Target
from multiexport.backends.litert import LiteRTBackend
from multiexport.exporting import ExportOptions, Manifest
from multiexport.exporting.precision import Calibration
from multiexport.files.npz import save_npz
from multiexport.leaves import build_signature

from ..conftest import run_cli

_status = LiteRTBackend().available()
pytestmark = [pytest.mark.skipif(not _status.ok, reason=f"litert backend unavailable: {_status.reason}"),
              pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning")]

RNG = np.random.default_rng(0)
W = (RNG.normal(size=(16, 16)) / 4).astype(np.float32)
W2 = (RNG.normal(size=(16, 8)) / 4).astype(np.float32)


def _masked(bias: float):
    def masked_attention(x, mask):
        scores = x @ W + (1.0 - mask)[:, None, :] * bias  # HF BERT's extended attention mask
        return {"y": jax.nn.softmax(scores, axis=-1) @ W2}

    mask = np.ones((2, 16), np.float32)
    mask[1, 12:] = 0
    return Target(masked_attention, args=(RNG.normal(size=(2, 16, 16)).astype(np.float32), mask),
                  name="masked_attention")


def target() -> Target:
    """For the CLI: the mask bias at finfo(float32).min."""
    return _masked(float(jnp.finfo(jnp.float32).min))


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    rng = np.random.default_rng(1)
    mask = np.ones((8, 2, 16), np.float32)
    mask[:, 1, 10:] = 0  # padded rows, as in real batches: the bias is in the calibrated range
    path = save_npz(tmp_path_factory.mktemp("cal") / "cal.npz",
                    {"x": rng.normal(size=(8, 2, 16, 16)).astype(np.float32), "mask": mask})
    return Calibration(str(path), False, "given")


def test_int8_of_a_float32_min_mask_bias_names_the_op_and_its_range_instead_of_aborting(tmp_path, calibration):
    t = target()
    with pytest.raises(ExportError, match=r"its int8 (ADD|SUB) '.*' has an output scale of 1\.33e\+36 \(a calibrated "
                                          r"range of \+-1\.69e\+38\), which TFLite's (ADD|SUB) kernel cannot") as info:
        LiteRTBackend().export(t.fn, build_signature(t), tmp_path / "a",
                               ExportOptions(precision="int8", calibration=calibration))
    assert info.value.category == "unsupported-precision" and "\n" not in str(info.value)
    assert not (tmp_path / "a").exists()
    finite = _masked(-1e9)  # the finite bias the message suggests quantizes, and runs
    artifact = LiteRTBackend().export(finite.fn, build_signature(finite), tmp_path / "b",
                                      ExportOptions(precision="int8", calibration=calibration))
    assert Manifest.read(artifact.directory).precision.quantized_ops


def test_the_export_command_survives_it_in_one_line(tmp_path, calibration):
    proc = run_cli("export", "tests.backends.test_litert_int8:target", "--backend", "litert", "--precision", "int8",
                   "--calibration", calibration.path, "--out-dir", tmp_path / "a")
    assert proc.returncode == 3, proc.stderr  # was -6 (SIGABRT): the process died preparing the model
    assert proc.stderr.strip().splitlines()[-1].startswith("multiexport: error: Backend 'litert' | no int8 artifact")


def test_a_model_whose_kernel_aborts_is_a_signal_name_from_a_child_not_this_processs_end(tmp_path, calibration):
    from backends.litert.convert import convert, requantization_gap
    from backends.litert.runner import prepare_in_child
    from multiexport.exporting.registry import get_backend

    t = target()
    sig = build_signature(t)
    stage = get_backend("savedmodel").export(t.fn, sig, tmp_path / "sm", ExportOptions())
    feeds = [{"x": np.asarray(x), "mask": np.asarray(m)} for x, m in
             zip(*(np.load(calibration.path)[k] for k in ("x", "mask")))]
    blob, _ = convert(stage.directory, False, "int8", feeds)
    (tmp_path / "m.tflite").write_bytes(blob)
    assert requantization_gap(blob) is not None
    assert prepare_in_child(str(tmp_path / "m.tflite")) == "SIGABRT"  # LiteRT's real abort, in a child
    fp32, _ = convert(stage.directory, False, "fp32")
    (tmp_path / "f.tflite").write_bytes(fp32)
    assert prepare_in_child(str(tmp_path / "f.tflite")) is None and requantization_gap(fp32) is None
