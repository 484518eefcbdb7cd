"""`multiexport export --precision`: a reduced-precision artifact from the command line, its synthetic
calibration made in a temporary directory that is gone afterwards, and what it is printed in one line."""

from __future__ import annotations

import json

import pytest

from multiexport.exporting.registry import get_backend

from ..conftest import run_cli


@pytest.fixture(autouse=True)
def _onnx():
    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")


def test_export_int8_without_a_calibration_file_calibrates_on_synthetic_samples_and_leaves_nothing(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = run_cli("export", "tests/precision_models.py:two_inputs", "--backend", "onnx", "--precision", "int8",
                   "--out-dir", tmp_path / "a", env={"TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    assert "precision: int8 by onnxruntime.quantization.quantize_static" in proc.stdout
    assert "calibrated on 16 synthetic samples" in proc.stdout
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["precision"]["calibration"]["synthetic"] is True
    assert not any(p.name.startswith("multiexport-calibration") for p in tmp.iterdir())
    assert not any(p.name.startswith(".quantize") or p.suffix == ".npz" and "calibration" in p.name
                   for p in (tmp_path / "a").iterdir())


def test_export_names_the_variant_as_a_backend_too_and_refuses_one_it_does_not_have(tmp_path):
    proc = run_cli("export", "tests/precision_models.py:two_inputs", "--backend", "onnx@fp16", "--out-dir", tmp_path / "a")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["precision"]["precision"] == "fp16"
    proc = run_cli("export", "tests/precision_models.py:two_inputs", "--backend", "xla", "--precision", "fp16",
                   "--out-dir", tmp_path / "b")
    assert proc.returncode == 3 and "has no fp16 artifact" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_export_int8_with_a_calibration_file_of_nan_is_exit_2_naming_the_file_and_the_leaf(tmp_path):
    import numpy as np

    from multiexport.files.npz import save_npz

    rng = np.random.default_rng(0)
    image = rng.uniform(0, 1, size=(8, 4, 64)).astype(np.float32)
    image[5, 0, 3] = np.nan
    path = save_npz(tmp_path / "nan.npz", {"image": image, "extra": rng.normal(size=(8, 4, 64)).astype(np.float32)})
    proc = run_cli("export", "tests/precision_models.py:two_inputs", "--backend", "onnx", "--precision", "int8",
                   "--calibration", path, "--out-dir", tmp_path / "a")
    assert proc.returncode == 2, proc.stderr
    assert f"Calibration file '{path}' | leaf 'image' holds NaN at sample 5" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "a").exists()
