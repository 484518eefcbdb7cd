"""`compare --precision`: each format at each precision is a row, run and timed like every other; a variant
beyond its accuracy budget is `accuracy-failed` with the figures, a format without the variant is
`unsupported-precision` naming what is missing (never a float artifact in its place), and the float verdict
("faithful", the format to ship) is never given to a reduced-precision row."""

from __future__ import annotations

import json

import pytest

from multiexport.exporting.registry import get_backend
from multiexport.results import Status, load_results

from ..conftest import run_cli


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    out = tmp_path_factory.mktemp("wide")
    proc = run_cli("compare", "tests/precision_models.py:wide_range", "--backends", "onnx,xla",
                   "--precisions", "fp32,fp16,int8-dynamic", "--out-dir", out, "--trials", "1", "--bench-time", "0.05",
                   "--rounds", "2")
    return proc, out


def test_every_format_at_every_precision_is_a_row_with_its_own_verdict(wide):
    proc, out = wide
    results = load_results(out / "results.json")
    statuses = {name: row.status for name, row in results.backends.items()}
    assert statuses == {"onnx": Status.OK, "onnx@fp16": Status.OK, "onnx@int8-dynamic": Status.ACCURACY_FAILED,
                        "xla": Status.OK, "xla@fp16": Status.UNSUPPORTED_PRECISION,
                        "xla@int8-dynamic": Status.UNSUPPORTED_PRECISION}, proc.stdout + proc.stderr
    assert proc.returncode == 1  # accuracy-failed counts like parity-failed
    fp16 = results.backends["onnx@fp16"]
    assert fp16.precision == "fp16" and fp16.precision_facts["method"].startswith("onnxruntime.transformers.float16")
    assert fp16.bench is not None and fp16.artifact_bytes < results.backends["onnx"].artifact_bytes
    assert fp16.accuracy.passed and fp16.accuracy.worst("cosine") > 0.9999
    manifest = json.loads((out / "onnx@fp16" / "manifest.json").read_text())
    assert manifest["precision"]["precision"] == "fp16" and "precision" not in json.loads(
        (out / "onnx" / "manifest.json").read_text())


def test_a_variant_beyond_its_budget_is_accuracy_failed_with_the_figures_of_the_leaf_that_moved(wide):
    _, out = wide
    row = load_results(out / "results.json").backends["onnx@int8-dynamic"]
    assert row.reason.startswith("Output 'out.small' | cos") and "budget >= 0.99" in row.reason
    small = next(leaf for leaf in row.accuracy.leaves if leaf.leaf == "out.small")
    large = next(leaf for leaf in row.accuracy.leaves if leaf.leaf == "out.large")
    assert small.failed and small.sqnr_db < 20 and not large.failed and large.cosine > 0.99
    assert row.precision_facts["quantized_ops"] and row.bench is not None  # timed: what it would have bought


def test_a_format_without_the_variant_says_what_is_missing_and_makes_nothing(wide):
    _, out = wide
    row = load_results(out / "results.json").backends["xla@fp16"]
    assert "has no fp16 artifact: XLA's CPU compiler" in row.reason and row.artifact is None
    assert not (out / "xla@fp16").exists()


def test_the_float_verdict_names_an_fp32_row_and_the_precision_verdict_stands_apart(wide):
    proc, out = wide
    report = (out / "report.md").read_text()
    verdict = report.splitlines()[2]
    assert verdict.startswith("**Ship onnx:") or verdict.startswith("**Ship xla:"), verdict
    assert "@" not in verdict
    assert "## Format x precision" in report and "| onnx | int8-dynamic | accuracy-failed |" in report
    assert "**Precision: no reduced-precision artifact was measurably faster" in report
    assert "a check of the toolchain, not of task accuracy" in report
    assert "precision:" in proc.stdout


def test_precision_usage_errors_are_one_line_before_any_work(tmp_path):
    proc = run_cli("compare", "tests/precision_models.py:wide_range", "--backends", "onnx", "--precisions", "fp32,int4",
                   "--out-dir", tmp_path / "o")
    assert proc.returncode == 2 and "Option 'precision' | got 'int4'" in proc.stderr
    proc = run_cli("compare", "tests/precision_models.py:wide_range", "--backends", "onnx", "--precisions", "fp16",
                   "--calibration", tmp_path / "c.npz", "--out-dir", tmp_path / "o")
    assert proc.returncode == 2 and "without an int8 row" in proc.stderr
    proc = run_cli("compare", "tests/precision_models.py:wide_range", "--backends", "onnx", "--precisions", "int8",
                   "--accuracy", "out.small=top7:1", "--out-dir", tmp_path / "o")
    assert proc.returncode == 2 and "METRIC one of cos, err, sqnr, top1, top5" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_an_accuracy_budget_naming_no_leaf_is_refused_in_one_line_as_a_tolerance_is(tmp_path):
    for flag, spec, what in (("--tol", "out.smal=rtol:1", "Tolerance"), ("--accuracy", "out.smal=cos:0.9", "Accuracy budget")):
        proc = run_cli("compare", "tests/precision_models.py:wide_range", "--backends", "xla", "--precisions", "fp16",
                       flag, spec, "--out-dir", tmp_path / "o")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == (f"multiexport: error: {what} 'out.smal' | matched no leaf, "
                                                         "expected one of: out.large, out.small")
        assert not (tmp_path / "o").exists()


def test_int8_calibrates_from_synthetic_samples_by_default_and_from_a_named_file_when_given(tmp_path):
    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    import numpy as np

    from multiexport.files.npz import save_npz

    proc = run_cli("compare", "tests/precision_models.py:two_inputs", "--backends", "onnx", "--precisions", "int8",
                   "--out-dir", tmp_path / "synthetic", "--trials", "1", "--no-bench")
    row = load_results(tmp_path / "synthetic" / "results.json").backends["onnx@int8"]
    assert row.status is Status.OK, proc.stdout + proc.stderr
    calibration = row.precision_facts["calibration"]
    assert calibration["synthetic"] and calibration["samples"] == 16 and "synthetic" in calibration["how"]
    rng = np.random.default_rng(3)
    given = save_npz(tmp_path / "cal.npz", {"extra": (rng.normal(size=(5, 4, 64)) * 50).astype(np.float32),
                                            "image": rng.uniform(0, 1, size=(5, 4, 64)).astype(np.float32)})
    proc = run_cli("compare", "tests/precision_models.py:two_inputs", "--backends", "onnx", "--precisions", "int8",
                   "--calibration", given, "--out-dir", tmp_path / "given", "--trials", "1", "--no-bench")
    row = load_results(tmp_path / "given" / "results.json").backends["onnx@int8"]
    assert row.status is Status.OK, proc.stdout + proc.stderr
    assert row.precision_facts["calibration"]["samples"] == 5 and not row.precision_facts["calibration"]["synthetic"]


def test_a_native_consumer_of_a_reduced_precision_artifact_is_held_to_its_accuracy_budget_not_float_parity(tmp_path):
    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    proc = run_cli("compare", "tests/precision_models.py:two_inputs", "--backends", "onnx", "--precisions", "fp32,fp16",
                   "--native", "--out-dir", tmp_path / "o", "--trials", "1", "--no-bench")
    results = load_results(tmp_path / "o" / "results.json")
    native = results.backends["onnx@fp16"].native
    if native is None or native.status is Status.UNAVAILABLE:
        pytest.skip(f"ort_run cannot be built here: {native and native.reason}")
    assert native.status is Status.OK, proc.stdout + proc.stderr  # float parity would fail it: 40 of 40 elements
    assert native.parity is not None and not native.parity.passed
    assert results.backends["onnx"].native.status is Status.OK and proc.returncode == 0


def test_the_parity_table_gives_a_reduced_row_its_budgets_verdict_not_the_float_tolerances(wide):
    """The float tolerances fail every fp16 leaf here; the row is ok by its budget, and so is its table line."""
    _, out = wide
    results = load_results(out / "results.json")
    assert not results.backends["onnx@fp16"].parity.passed and results.backends["onnx@fp16"].accuracy.passed
    lines = {tuple(cell.strip() for cell in line.split("|")[1:4]): line
             for line in (out / "report.md").read_text().splitlines() if line.startswith("| onnx")}
    assert ("onnx@fp16", "out.large", "pass (budget)") in lines and ("onnx@fp16", "out.small", "pass (budget)") in lines
    assert ("onnx@int8-dynamic", "out.small", "FAIL (budget)") in lines
    assert ("onnx@int8-dynamic", "out.large", "pass (budget)") in lines
    assert "| budget cos&gt;=0.9999" in lines[("onnx@fp16", "out.large", "pass (budget)")]  # md escapes >
    assert ("onnx", "out.large", "pass") in lines  # the fp32 row keeps float parity's verdict
    assert "pass (budget)" in (out / "report.html").read_text()


def test_a_calibration_file_of_nan_or_too_many_samples_is_exit_2_before_any_export(tmp_path):
    import numpy as np

    from multiexport.files.npz import save_npz

    rng = np.random.default_rng(0)
    extra = (rng.normal(size=(4, 4, 64)) * 50).astype(np.float32)
    extra[2, 1, 0] = -np.inf
    bad = save_npz(tmp_path / "inf.npz", {"image": rng.uniform(0, 1, size=(4, 4, 64)).astype(np.float32), "extra": extra})
    many = save_npz(tmp_path / "many.npz", {"image": np.zeros((1025, 4, 64), np.float32),
                                            "extra": np.zeros((1025, 4, 64), np.float32)})
    for path, said in ((bad, "leaf 'extra' holds -inf at sample 2"), (many, "holds 1025 samples, expected at most 1024")):
        proc = run_cli("compare", "tests/precision_models.py:two_inputs", "--backends", "onnx", "--precisions", "int8",
                       "--calibration", path, "--out-dir", tmp_path / "o")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == f"multiexport: error: Calibration file '{path}' | {said}" + (
            ", expected finite values (a quantizer's ranges come from them)" if path == bad else
            ": give a subset (e.g. the first 1024)")
        assert not (tmp_path / "o" / "onnx@int8").exists()
