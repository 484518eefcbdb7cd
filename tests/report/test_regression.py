"""Regression gate: a real slowdown and a real parity break are flagged, a rerun is not."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from multiexport import examples
from multiexport.comparison import compare
from multiexport.measure.bench import BenchConfig
from multiexport.report.regression import diff_results, junit, markdown, publish
from multiexport.results import load_results

from ..conftest import run_cli
from .builders import results, row

CONFIG = BenchConfig(warmup_iters=3, warmup_time=0.0, min_iters=40, bench_time=0.3)


def run_sleepy(tmp_path, name, sleep_ms, monkeypatch):
    monkeypatch.setenv("MULTIEXPORT_TEST_SLEEP_MS", str(sleep_ms))
    compare(examples.seed(), backends=["xla_sleepy"], out_dir=tmp_path / name, trials=1, bench=CONFIG)
    return load_results(tmp_path / name / "results.json")


def test_doubled_latency_is_flagged_and_a_rerun_is_not(tmp_path, fault_backends, monkeypatch):
    base = run_sleepy(tmp_path, "base", 3, monkeypatch)
    rerun = run_sleepy(tmp_path, "rerun", 3, monkeypatch)
    slow = run_sleepy(tmp_path, "slow", 6, monkeypatch)
    same = diff_results(base, rerun, max_slowdown=1.5)
    assert same.exit_code == 0, markdown(same)
    doubled = diff_results(base, slow, max_slowdown=1.5)
    assert doubled.exit_code == 1
    [check] = [c for c in doubled.regressions]
    assert check.backend == "xla_sleepy" and check.check == "latency@as exported" and 1.7 < check.ratio < 2.5
    # the slow run against itself as a baseline improves back
    assert any(c.verdict == "improvement" for c in diff_results(slow, base, max_slowdown=1.5).checks)


def results_like(status="ok", max_rel=1e-7, p50=1.0, lo=0.9, hi=1.1, rtol=1e-5):
    return results(row("onnx", status, max_rel, p50, lo, hi, rtol=rtol))


def test_parity_drift_and_newly_failing_backends_are_flagged():
    base = results_like()
    assert diff_results(base, results_like(max_rel=5e-7)).exit_code == 0  # 5x < 10x drift
    drift = diff_results(base, results_like(max_rel=5e-6))
    assert [c.check for c in drift.regressions] == ["parity out"]
    exact = results_like(max_rel=0.0)
    assert diff_results(exact, results_like(max_rel=1e-9)).exit_code == 0  # below the floor: meaningless
    broken = diff_results(base, results_like(status="parity-failed"))
    assert [c.check for c in broken.regressions] == ["status"]
    gone = diff_results(base, results())
    assert gone.regressions[0].verdict == "missing"


def test_drift_far_inside_the_tolerance_is_not_flagged():
    assert diff_results(results_like(max_rel=0.0), results_like(max_rel=4e-7)).exit_code == 0  # a 25th of rtol
    assert diff_results(results_like(max_rel=0.0), results_like(max_rel=5e-6)).exit_code == 1  # half of it: drift


def test_large_but_noisy_differences_are_not_flagged():
    # 1.5x slower p50, but the intervals overlap: not established, not flagged
    assert diff_results(results_like(), results_like(p50=1.5, lo=1.0, hi=2.0)).exit_code == 0
    assert diff_results(results_like(), results_like(p50=1.5, lo=1.2, hi=2.0)).exit_code == 1


def test_a_changed_producer_or_consumer_version_is_flagged_but_not_failed():
    base = results(row("savedmodel", versions={"jax": "0.10.2", "tensorflow": "2.21.0"}))
    now = results(row("savedmodel", versions={"jax": "0.12.0.1", "tensorflow": "2.21.0"}))
    d = diff_results(base, now)
    [changed] = [c for c in d.checks if c.verdict == "changed"]
    assert changed.check == "version jax" and "0.10.2 -> 0.12.0.1" in changed.detail and d.exit_code == 0
    assert "changed" in markdown(d)


def test_diff_markdown_escapes_html_and_newlines_from_reasons():
    bad = row("onnx", "crashed", reason="<img src=x onerror=alert(1)>\n# heading | pipe")
    text = markdown(diff_results(results_like(), results(bad)))
    assert "<img" not in text and "&lt;img" in text and "\n# heading" not in text and "\\| pipe" in text


def test_junit_markdown_and_step_summary(tmp_path, monkeypatch):
    d = diff_results(results_like(), results_like(status="crashed"))
    root = ET.fromstring(junit(d))
    assert root.attrib["failures"] == "1" and len(root.findall("testcase")) == 3
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    text = publish(d, tmp_path / "j.xml")
    assert "**REGRESSION**" in text and summary.read_text() == text
    assert ET.parse(tmp_path / "j.xml").getroot().tag == "testsuite"


def test_cli_diff_and_compare_baseline(tmp_path):
    out = tmp_path / "a"
    assert run_cli("compare", "--backends", "xla", "--out", out, "--bench-time", "0.05").returncode == 0
    broken = json.loads((out / "results.json").read_text())
    broken = copy.deepcopy(broken)
    broken["backends"]["xla"]["status"] = "crashed"
    (tmp_path / "b.json").write_text(json.dumps(broken))
    proc = run_cli("diff", out / "results.json", tmp_path / "b.json", "--junit", tmp_path / "j.xml")
    assert proc.returncode == 1 and "**REGRESSION**" in proc.stdout
    assert (tmp_path / "j.xml").is_file()
    proc = run_cli("diff", out / "results.json", out / "results.json")
    assert proc.returncode == 0
    proc = run_cli("compare", "--backends", "xla", "--out", tmp_path / "c", "--no-bench", "--baseline", tmp_path / "b.json")
    assert proc.returncode == 0, proc.stdout  # the baseline failed, this run passes: an improvement
    assert "improved" in proc.stdout


LEGACY = Path(__file__).parent / "data" / "results-0.1-mlp.json"  # written by multiexport 0.1's quick zoo


def test_diff_reads_a_results_json_of_multiexport_0_1_across_the_schema_change(tmp_path):
    """`multiexport diff` compares a 0.1 (schema 1) baseline with this version's results: statuses, latency,
    and parity element-wise (0.1 recorded no error over scale); other commands still refuse schema 1."""
    assert json.loads(LEGACY.read_text())["schema"] == "multiexport.results/1"
    out = tmp_path / "now"
    compare(examples.mlp(), backends=["xla", "savedmodel", "onnx", "iree"], out_dir=out, trials=1, bench=CONFIG)
    now = json.loads((out / "results.json").read_text())
    # 0.1 recorded 0 element-wise error on its machine; on a CPU whose jax.jit rounds differently (AVX-512
    # XLA against ONNX Runtime and IREE: 5e-6 on this mlp) growth past a tenth of the rtol is drift, as the
    # gate defines it. Which backends drifted here is read from this run, not assumed.
    drifted = {b for b, r in now["backends"].items() for v in r["parity"]["leaves"]
               if v["stats"]["max_rel"] > 0.1 * v["tolerance"]["rtol"]}
    proc = run_cli("diff", LEGACY, out / "results.json", "--max-slowdown", "1000")
    assert proc.returncode == (1 if drifted else 0), proc.stdout + proc.stderr  # 0.1's verdicts, drift only as measured
    assert "max element-wise rel error (the baseline, schema 1" in proc.stdout
    flagged = {line.split("|")[1].strip() for line in proc.stdout.splitlines() if "REGRESSION" in line}
    assert flagged == drifted and all("| parity " in line for line in proc.stdout.splitlines() if "REGRESSION" in line)
    for leaf in now["backends"]["onnx"]["parity"]["leaves"]:
        leaf["stats"]["max_rel"] = 0.5
    (tmp_path / "worse.json").write_text(json.dumps(now))
    base = load_results(LEGACY, legacy=True)
    d = diff_results(base, load_results(tmp_path / "worse.json"), max_slowdown=1000)
    assert sorted((c.backend, c.check) for c in d.regressions) == sorted(
        (b, "parity out.logits") for b in drifted | {"onnx"})
    refused = run_cli("report", LEGACY)
    assert refused.returncode == 2 and "multiexport.results/1" in refused.stderr and "Traceback" not in refused.stderr
