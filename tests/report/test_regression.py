"""Regression gate: a real slowdown and a real parity break are flagged, a rerun is not."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from multiexport import examples
from multiexport.comparison import compare
from multiexport.measure.bench import BenchConfig
from multiexport.report.regression import (
    CROSS_RUN,
    CROSS_RUN_TINY,
    PAIRED,
    PAIRED_TINY,
    aggregate_latency,
    diff_results,
    junit,
    markdown,
    paired_decided,
    publish,
    terminal,
)
from multiexport.results import Pairing, Ratio, load_results

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
    assert diff_results(results_like(), results_like(p50=1.5, lo=1.0, hi=2.0), max_slowdown=1.1).exit_code == 0
    assert diff_results(results_like(), results_like(p50=1.5, lo=1.2, hi=2.0), max_slowdown=1.1).exit_code == 1


def test_cross_run_latency_needs_the_wider_calibrated_threshold():
    """Two separate runs differ by more than their intervals say: separated intervals and 1.4x are no regression
    across runs by default (CROSS_RUN), 1.6x is; a tiny call needs CROSS_RUN_TINY."""
    d = diff_results(results_like(), results_like(p50=1.4, lo=1.3, hi=1.5))
    [check] = [c for c in d.checks if c.check.startswith("latency")]
    assert d.exit_code == 0 and check.kind == "cross-run" and f"threshold {CROSS_RUN:g}x across runs" in check.detail
    assert diff_results(results_like(), results_like(p50=1.6, lo=1.55, hi=1.7)).exit_code == 1
    tiny = results_like(p50=0.010, lo=0.009, hi=0.011)
    assert diff_results(tiny, results_like(p50=0.020, lo=0.019, hi=0.021)).exit_code == (2.0 > CROSS_RUN_TINY)
    assert diff_results(tiny, results_like(p50=0.035, lo=0.034, hi=0.036)).exit_code == 1


def paired(lo, ratio, hi, p50=1.0):
    """Results whose onnx was timed against its baseline in the same rounds: new / baseline = ratio (lo-hi)."""
    now = results_like(p50=p50, lo=0.99 * p50, hi=1.01 * p50)
    now.pairing = Pairing(mode="paired", rounds=5, baseline="base", baseline_ratios=[
        Ratio(8, "baseline:onnx", "onnx", ratio, lo, hi, lo > 1) if ratio >= 1 else
        Ratio(8, "onnx", "baseline:onnx", 1 / ratio, 1 / hi, 1 / lo, hi < 1)])
    return now


def test_a_paired_verdict_rests_on_the_interval_of_new_over_baseline():
    # recorded baseline p50 1.0 vs 1.0 now: cross-run says nothing; the paired interval says slower
    d = diff_results(results_like(), paired(1.12, 1.2, 1.3))
    [check] = [c for c in d.checks if c.check.startswith("latency")]
    assert check.verdict == "regression" and check.kind == "paired A/B" and check.ratio == 1.2
    assert "95% interval 1.120-1.300" in check.detail and f"threshold {PAIRED:g}x" in check.detail
    # a large ratio whose interval reaches below the threshold is not established
    assert diff_results(results_like(), paired(PAIRED - 0.01, 1.3, 1.6)).exit_code == 0
    faster = diff_results(results_like(), paired(0.7, 0.8, 0.9))
    assert [c.verdict for c in faster.checks if c.check.startswith("latency")] == ["improvement"]
    # a tiny call (under TINY_MS) needs the wider PAIRED_TINY; no recorded baseline: latency alone is judged
    assert diff_results(None, paired(PAIRED_TINY - 0.01, 1.2, 1.3, p50=0.01)).exit_code == 0
    alone = diff_results(None, paired(PAIRED_TINY + 0.01, 1.2, 1.3, p50=0.01))
    assert alone.exit_code == 1 and [c.check for c in alone.checks] == ["latency@8"]


def test_markdown_and_terminal_lines_carry_no_html_escapes():
    d = diff_results(results_like(), results_like(p50=2.0, lo=1.9, hi=2.1))
    text, plain = markdown(d), terminal(d)
    assert "p50 1 -> 2 ms" in text and "&gt;" not in text and "| cross-run |" in text
    assert "p50 1 -> 2 ms" in plain and "&" not in plain and "**" not in plain and "|" not in plain
    assert "REGRESSION  onnx  latency@8  [cross-run]" in plain
    hostile = markdown(diff_results(results_like(), results(row("onnx", "crashed", reason="<b>x</b> > y &gt;"))))
    # no tag can open (every '<' stays escaped) and an entity given stays literal text
    assert "<b>" not in hostile and "now crashed: &lt;b>x&lt;/b> > y &amp;gt;" in hostile


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
    text = publish(d, tmp_path / "j.xml")  # the terminal's lines; the step summary gets the Markdown
    assert "  REGRESSION  onnx  status  [cross-run]" in text and summary.read_text() == markdown(d)
    assert "**REGRESSION**" in summary.read_text()
    root = ET.parse(tmp_path / "j.xml").getroot()
    assert root.tag == "testsuite"
    kinds = {c.attrib["name"]: c.find("properties/property").attrib["value"] for c in root}
    assert kinds == {"status": "cross-run", "parity out": "cross-run", "latency@8": "cross-run"}
    assert root.find("testcase/failure").attrib["message"].startswith("[cross-run] was ok, now crashed")


def test_cli_diff_and_compare_baseline(tmp_path):
    out = tmp_path / "a"
    assert run_cli("compare", "--backends", "xla", "--out-dir", out, "--bench-time", "0.05").returncode == 0
    broken = json.loads((out / "results.json").read_text())
    broken = copy.deepcopy(broken)
    broken["backends"]["xla"]["status"] = "crashed"
    (tmp_path / "b.json").write_text(json.dumps(broken))
    proc = run_cli("diff", out / "results.json", tmp_path / "b.json", "--junit", tmp_path / "j.xml")
    assert proc.returncode == 1 and "  REGRESSION  xla  status" in proc.stdout
    assert (tmp_path / "j.xml").is_file()
    proc = run_cli("diff", out / "results.json", out / "results.json")
    assert proc.returncode == 0
    proc = run_cli("compare", "--backends", "xla", "--out-dir", tmp_path / "c", "--no-bench", "--baseline", tmp_path / "b.json")
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
    flagged = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("  REGRESSION")}
    assert flagged == drifted and all(line.split()[2] == "parity" for line in proc.stdout.splitlines()
                                      if line.startswith("  REGRESSION"))
    for leaf in now["backends"]["onnx"]["parity"]["leaves"]:
        leaf["stats"]["max_rel"] = 0.5
    (tmp_path / "worse.json").write_text(json.dumps(now))
    base = load_results(LEGACY, legacy=True)
    d = diff_results(base, load_results(tmp_path / "worse.json"), max_slowdown=1000)
    assert sorted((c.backend, c.check) for c in d.regressions) == sorted(
        (b, "parity out.logits") for b in drifted | {"onnx"})
    refused = run_cli("report", LEGACY)
    assert refused.returncode == 2 and "multiexport.results/1" in refused.stderr and "Traceback" not in refused.stderr


def test_a_paired_verdict_says_how_many_rounds_and_when_more_are_needed():
    import re

    d = diff_results(results_like(), paired(1.12, 1.2, 1.3))
    [check] = [c for c in d.checks if c.check.startswith("latency")]
    # the pairing's 5 rounds (a results file without a per-ratio count says "at least" them)
    assert re.search(r"paired A/B over (at least )?5 rounds", check.detail) and (check.low, check.high) == (1.12, 1.3)
    case = next(c for c in ET.fromstring(junit(d)) if c.attrib["name"] == "latency@8")
    props = {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
    assert props["comparison"] == "paired A/B" and ("rounds" not in props or props["rounds"] == "5")
    # decided: wholly above the threshold (a regression) or wholly below it; else the rounds go on
    assert paired_decided(PAIRED + 0.01, 1.3, 1.0) and paired_decided(0.9, PAIRED - 0.01, 1.0)
    assert not paired_decided(0.98, PAIRED + 0.01, 1.0) and not paired_decided(PAIRED - 0.01, 1.3, 1.0)
    assert paired_decided(0.9, PAIRED_TINY - 0.01, 0.01) and not paired_decided(0.9, PAIRED_TINY - 0.01, 1.0)


def test_a_suite_gates_paired_entries_per_backend_apart_from_cross_run_ones():
    from multiexport.report.regression import Check, Diff

    def entry(model, ratio, low, kind="paired A/B"):
        return Check(f"{model}/onnx", "latency@8", "ok", "intervals overlap", 0.1, 0.1 * ratio, ratio, kind,
                     15 if kind == "paired A/B" else None, low if kind == "paired A/B" else None, None)

    noise = [entry(m, r, lo) for m, r, lo in (("a", 1.04, 0.99), ("b", 0.97, 0.93), ("c", 1.08, 0.98))]
    slow = [entry(m, 1.2, 1.1) for m in "abc"]
    cross = [entry("a", 1.3, None, "cross-run")]
    group = {"group": lambda backend: backend.split("/", 1)[-1]}
    ok = aggregate_latency(Diff(noise + cross), 2.5, **group)
    gates = {c.check: c for c in ok.checks if c.check.startswith("latency (")}
    assert set(gates) == {"latency (paired A/B, geometric mean of 3)", "latency (geometric mean of 1)"}
    assert ok.exit_code == 0 and gates["latency (paired A/B, geometric mean of 3)"].kind == "paired A/B"
    assert "15-15 rounds each" in gates["latency (paired A/B, geometric mean of 3)"].detail
    caught = aggregate_latency(Diff(slow + cross), 2.5, **group)
    assert [(c.check, c.kind) for c in caught.regressions] == [("latency (paired A/B, geometric mean of 3)", "paired A/B")]
    # one entry slower beyond its interval of three is not the backend: half of them must be
    assert aggregate_latency(Diff(slow[:1] + noise[1:]), 2.5, paired_slowdown=1.01, **group).exit_code == 0
    # the zoo gate's A/A false alarm under load (one XLA entry, 1.65x with a 99% interval of 1.001-2.681, at
    # 1.3x): an entry counts as slower only when its interval lies above the gate's threshold, not above 1
    wide = [entry("a", 1.65, 1.001)]
    assert aggregate_latency(Diff(wide), 2.5, paired_slowdown=1.3, **group).exit_code == 0
    assert aggregate_latency(Diff([entry("a", 1.65, 1.31)]), 2.5, paired_slowdown=1.3, **group).exit_code == 1


def test_a_paired_regression_needs_the_fresh_process_pair_to_agree():
    """One process slow for the whole run reads as a regression in its pair's every round; the fresh pair
    started to confirm it decides: both pairs above the threshold is a regression (the union of their
    intervals in the verdict), the fresh pair at 1.0 is none, and without a fresh pair the line says so."""
    alone = diff_results(results_like(), paired(1.15, 1.2, 1.3))
    [check] = [c for c in alone.checks if c.check.startswith("latency")]
    assert check.verdict == "regression" and check.pairs == 1 and "one process pair" in check.detail

    def confirmed_by(lo, ratio, hi, level=0.99, rounds=30):
        now = paired(1.15, 1.2, 1.3)
        assert now.pairing is not None
        now.pairing.confirmations = [Ratio(8, "baseline:onnx", "onnx", ratio, lo, hi, lo > 1, rounds, level)]
        return diff_results(results_like(), now)

    offset = confirmed_by(0.97, 1.01, 1.04)
    [check] = [c for c in offset.checks if c.check.startswith("latency")]
    assert offset.exit_code == 0 and check.verdict == "ok" and check.pairs == 2
    assert "a fresh process pair over 30 rounds: new/baseline 1.010x, 99% interval 0.970-1.040: not confirmed (its " \
        "interval reaches the threshold" in check.detail and (check.low, check.high, check.ratio) == (0.97, 1.3, 1.01)
    both = confirmed_by(1.1, 1.25, 1.4)
    [check] = [c for c in both.checks if c.check.startswith("latency")]
    assert both.exit_code == 1 and (check.low, check.high) == (1.1, 1.4) and "not confirmed" not in check.detail
    case = next(c for c in ET.fromstring(junit(both)) if c.attrib["name"] == "latency@8")
    props = {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
    assert props["process_pairs"] == "2" and props["comparison"] == "paired A/B"
    # the fresh pair's interval just below the threshold: not confirmed (an intersection-union test)
    assert confirmed_by(PAIRED - 0.001, 1.2, 1.3).exit_code == 0


def test_a_paired_threshold_is_chosen_by_the_baseline_call_the_rounds_measured():
    """The call size that picks the threshold (1.05x, or 1.10x under 30 us) is the baseline's p50 in the rounds,
    as recorded with the ratio: a noisy ratio (5.2x whose interval reaches 1.07) must not shrink the baseline's
    call under 30 us by dividing the new p50 by it."""
    now = paired(1.07, 5.2, 12.0, p50=0.116)
    assert now.pairing is not None
    [first] = now.pairing.baseline_ratios
    implied = diff_results(None, now)  # no recorded size: 0.116 / 5.2 = 0.022 ms, a tiny call's 1.10x
    assert implied.exit_code == 0 and f"threshold {PAIRED_TINY:g}x" in implied.checks[0].detail
    now.pairing.baseline_ratios = [Ratio(8, first.faster, first.slower, 5.2, 1.07, 12.0, True, 15, 0.95, 0.099)]
    measured = diff_results(None, now)
    assert measured.exit_code == 1 and f"threshold {PAIRED:g}x" in measured.checks[0].detail
    assert "p50 0.099 -> 0.116 ms in this run" in measured.checks[0].detail
