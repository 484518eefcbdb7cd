"""openvino@int8: NNCF's post-training quantization (the extra openvino-int8), calibrated by leaf name, read back
from disk and held to the int8 accuracy budget; the CPU plugin's result checked against OpenVINO's reference
evaluation of the same IR (on this machine's AVX-512 VNNI CPU NNCF's default IR of the two-input MLP computes
all zeros: the export uses the transformer scheme, benchmarks/openvino_int8_repro.py); without nncf the row is
unsupported-precision naming the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from multiexport.backends.openvino import OpenVINOBackend
from multiexport.exporting import ExportOptions, Manifest
from multiexport.exporting.precision import Calibration
from multiexport.files.npz import save_npz
from multiexport.leaves import build_signature
from multiexport.measure.accuracy import DEFAULT_BUDGETS, leaf_accuracy

from ..conftest import REPO
from ..precision_models import two_inputs

_status = OpenVINOBackend().available()
pytestmark = pytest.mark.skipif(not _status.ok, reason=f"openvino backend unavailable: {_status.reason}")
nncf = pytest.importorskip("nncf", reason="the extra openvino-int8 (nncf) is not installed")


def _vnni() -> bool:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "avx512_vnni" in flags


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The two-input target, 16 calibration samples in a .npz whose first array is the second argument, a feed,
    jax.jit's logits, and the openvino@int8 artifact made from that file."""
    target = two_inputs()
    rng = np.random.default_rng(5)
    samples = {"extra": (rng.normal(size=(16, 4, 64)) * 50).astype(np.float32),
               "image": rng.uniform(0, 1, size=(16, 4, 64)).astype(np.float32)}
    tmp = tmp_path_factory.mktemp("ov_int8")
    path = save_npz(tmp / "calibration.npz", samples)
    feed = {"image": rng.uniform(0, 1, size=(4, 64)).astype(np.float32),
            "extra": (rng.normal(size=(4, 64)) * 50).astype(np.float32)}
    ref = np.asarray(jax.jit(target.fn)(feed["image"], feed["extra"])["logits"])
    options = ExportOptions(precision="int8", calibration=Calibration(str(path), False, "given in calibration.npz"))
    artifact = OpenVINOBackend().export(target.fn, build_signature(target), tmp / "int8", options)
    return target, samples, feed, ref, artifact.directory


def test_openvino_int8_states_what_it_is_and_keeps_the_int8_budget(model):
    _, _, feed, ref, directory = model
    manifest = Manifest.read(directory)  # from disk, as any consumer reads it
    facts = manifest.precision
    assert facts.precision == "int8" and facts.method.startswith("nncf.quantize(") and "nncf 3." in facts.toolchain
    assert facts.quantized_ops == {"MatMul": 3} and facts.float_ops == {}
    assert facts.calibration.samples == 16 and not facts.calibration.synthetic
    assert facts.calibration.leaves == ["image", "extra"]
    assert manifest.files["model"] == "model.xml" and (directory / "model.bin").is_file()
    assert not (directory / "model.onnx").exists()  # the IR replaces the float file
    assert any(n.startswith("self-check:") for n in facts.notes), facts.notes
    with OpenVINOBackend().load(directory) as runner:
        (got,) = runner(feed).values()
    assert got.dtype == np.float32
    accuracy = leaf_accuracy("logits", [got], [ref], DEFAULT_BUDGETS["int8"])
    assert not accuracy.failed, accuracy  # NNCF's default IR on this CPU: all zeros, cosine undefined, failed
    assert not np.array_equal(got, ref)


def test_calibrated_by_leaf_name_is_nncf_quantize_by_hand(model):
    """The artifact is what nncf.quantize gives with the samples fed by input name; fed in the file's order
    (extra as image), it would differ."""
    import openvino as ov

    _, samples, feed, _, directory = model
    manifest = Manifest.read(directory)
    kwargs = {"model_type": nncf.ModelType.TRANSFORMER} if "TRANSFORMER" in manifest.precision.method else {}
    onnx_path = directory.parent / "fp32"
    fp32 = OpenVINOBackend().export(two_inputs().fn, build_signature(two_inputs()), onnx_path, ExportOptions())
    core = ov.Core()

    def by_hand(order):
        items = [{"image": samples[order[0]][i], "extra": samples[order[1]][i]} for i in range(16)]
        quantized = nncf.quantize(core.read_model(str(fp32.directory / "model.onnx")), nncf.Dataset(items),
                                  subset_size=16, **kwargs)
        return core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(feed)[0]

    ours = core.compile_model(str(directory / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(feed)[0]
    np.testing.assert_array_equal(ours, by_hand(("image", "extra")))
    assert not np.array_equal(ours, by_hand(("extra", "image")))


def test_the_cpu_plugin_is_checked_against_openvinos_reference(model):
    """NNCF's default IR of this MLP, on a CPU with AVX-512 VNNI int8 kernels: the CPU plugin gives zeros where
    Model.evaluate gives jax.jit's values, so the export took the transformer scheme and said why; on another
    CPU the default scheme agrees with the reference and is kept."""
    import openvino as ov

    from backends.openvino.int8 import AGREE, cpu_vs_reference

    _, samples, _, _, directory = model
    fp32 = directory.parent / "fp32_check"
    OpenVINOBackend().export(two_inputs().fn, build_signature(two_inputs()), fp32, ExportOptions())
    items = [{"image": samples["image"][i], "extra": samples["extra"][i]} for i in range(16)]
    default = nncf.quantize(ov.Core().read_model(str(fp32 / "model.onnx")), nncf.Dataset(items), subset_size=16)
    off = cpu_vs_reference(ov, default, items[:2])
    notes = " ".join(Manifest.read(directory).precision.notes)
    if off > AGREE:
        assert _vnni() and off > 0.9, off  # all zeros: off by the reference's whole magnitude
        assert "TRANSFORMER" in Manifest.read(directory).precision.method
        assert "default scheme was computed wrong" in notes and f"{off:.3g}" in notes
    else:
        assert "TRANSFORMER" not in Manifest.read(directory).precision.method
    assert cpu_vs_reference(ov, ov.Core().read_model(str(directory / "model.xml")), items[:2]) <= AGREE


def test_without_nncf_openvino_int8_is_unsupported_precision_naming_the_extra(tmp_path, model):
    """A process where nncf cannot be imported (sys.modules['nncf'] = None, as in an environment without the
    extra): the export command says so in one line, exit 3, and writes nothing."""
    _, samples, _, _, _ = model
    calibration = save_npz(tmp_path / "calibration.npz", samples)
    code = ("import sys; sys.modules['nncf'] = None; from multiexport.cli import entry; sys.argv = sys.argv[:1] + "
            "sys.argv[1:]; entry()")
    proc = subprocess.run([sys.executable, "-c", code, "export", "tests/precision_models.py:two_inputs", "--backend",
                           "openvino", "--precision", "int8", "--calibration", str(calibration), "--out-dir",
                           str(tmp_path / "a")], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "has no int8 artifact" in last and "pip install 'multiexport[openvino-int8]'" in last, last
    assert not (tmp_path / "a").exists()
