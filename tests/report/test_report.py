"""Reports from results.json alone, and compare's guarantees around them."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import numpy as np
import pytest

import multiexport
from multiexport import examples
from multiexport.comparison import compare
from multiexport.files.owned import unstamped
from multiexport.report.recommend import recommend
from multiexport.report.render import render_html, render_markdown
from multiexport.results import BackendResult, BenchResult, LatencyStats, SizeResult, Status, load_results

from ..conftest import run_cli
from ..fault_backends import ALL


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from multiexport.measure.bench import BenchConfig

    out = tmp_path_factory.mktemp("rep")
    compare(examples.mlp_dynamic(), out_dir=out, trials=1, batch_sizes=(1, 4, 16),
            bench=BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=10, bench_time=0.0))
    return out, load_results(out / "results.json")


def test_compare_writes_both_reports_with_the_figures(results):
    out, data = results
    md = (out / "report.md").read_text()
    assert md.startswith("# multiexport report: mlp_dynamic")
    assert "Ship xla" in md and "| batch.x | (b, 16) | float32 | 6 |" in md.replace("batch.x", "batch.x")
    assert "## Cold start and memory" in md and "## Parity per output leaf" in md
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 4  # latency CDF, p50 vs batch, throughput vs batch, parity error
    assert "Content-Security-Policy" in page and "<script" not in page
    # no external resource: the only URL is the SVG namespace, which is never fetched
    assert {u for u in __import__("re").findall(r"https?://[^\"' )]+", page)} == {"http://www.w3.org/2000/svg"}


def test_report_command_rerenders_from_json_alone(results, tmp_path):
    out, data = results
    proc = run_cli("report", out / "results.json", "--out-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    # what the report says is the rendering; the file also ends with multiexport's ownership stamp
    assert unstamped((tmp_path / "report.md").read_text()) == render_markdown(data)
    assert unstamped((tmp_path / "report.html").read_text()) == render_html(data)


def test_report_of_a_bad_file_is_a_clear_error(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"schema": "other"}))
    proc = run_cli("report", tmp_path / "r.json")
    assert proc.returncode == 2 and "expected 'multiexport.results/2'" in proc.stderr
    proc = run_cli("report", tmp_path / "missing.json")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def _row(name, status, p50, lo, hi, batch=8, reason=""):
    latency = LatencyStats(n=100, min_ms=lo, p50_ms=p50, p90_ms=hi, p99_ms=hi, max_ms=hi, mean_ms=p50, std_ms=0.1,
                           ci95_low_ms=lo, ci95_high_ms=hi)
    bench = BenchResult(load_s=0.1, sizes=[SizeResult(batch=batch, latency=latency)], memory={}, artifact_bytes=1,
                        runner={}, config={})
    return BackendResult(name, Status(status), reason, bench=bench)


def _results(*rows):
    from multiexport.results import Reference, Results, SignatureData

    return Results(target="t", signature=SignatureData("t", [], []), trials=[], backends={r.backend: r for r in rows},
                   reference=Reference(), environment={}, out_dir=".")


def test_recommendation_picks_the_fastest_faithful_and_tests_significance():
    rows = [_row("a", "ok", 2.0, 1.9, 2.1), _row("b", "ok", 1.0, 0.9, 1.1),
            _row("c", "parity-failed", 0.1, 0.09, 0.11, reason="Output 'out' | ...")]
    rec = recommend(_results(*rows))
    assert rec.picks[0].backend == "b" and rec.picks[0].runner_up == "a"  # c is faster but unfaithful
    assert rec.picks[0].ratio_to_runner_up == pytest.approx(2.0) and rec.picks[0].significant
    assert any(c.startswith("c: parity-failed") for c in rec.caveats)
    rows[0] = _row("a", "ok", 1.05, 0.95, 1.2)
    rec = recommend(_results(*rows))
    assert rec.picks[0].significant is False and "tie within noise" in rec.verdict


def test_a_size_an_artifact_does_not_support_is_its_own_category_in_the_recommendation():
    fixed = _row("iree", "ok", 0.5, 0.4, 0.6, batch=3)
    fixed = dataclasses.replace(fixed, supports={"dims": {"b": [3]}})
    fixed.bench.sizes = [SizeResult(batch=1, status=Status.SIZE_UNSUPPORTED, reason="built for b=3 only"),
                         fixed.bench.sizes[0]]
    full = _row("xla", "ok", 1.0, 0.9, 1.1, batch=1)
    full.bench.sizes.append(SizeResult(batch=3, latency=full.bench.sizes[0].latency))
    rec = recommend(_results(full, fixed))
    by_batch = {p.batch: p for p in rec.picks}
    assert by_batch[1].backend == "xla" and by_batch[1].unsupported == ["iree"]
    assert by_batch[3].backend == "iree"
    assert any("iree: size-unsupported: its artifact supports b=3 only" in c for c in rec.caveats)
    # iree is fastest at b=3 but takes only b=3: the verdict says so before anything else, and names the
    # fastest format that takes every size (here xla, 2.00x slower at b=3)
    assert rec.verdict.startswith("Ship xla if you serve more than the fixed sizes"), rec.verdict
    assert "iree 2.00x faster at batch 3, but iree takes b=3 only" in rec.verdict


def test_a_format_that_takes_only_the_examples_size_is_never_shipped_silently():
    """The zoo's false verdict: a symbolic target timed at its example size alone, where the fixed-size
    artifact was fastest, read "Ship iree: ... at every batch size measured"."""
    fixed = _row("iree", "ok", 0.5, 0.4, 0.6, batch=2)
    fixed = dataclasses.replace(fixed, supports={"dims": {"b": [2]}})
    full = _row("xla", "ok", 1.0, 0.9, 1.1, batch=2)
    full = dataclasses.replace(full, supports={"dims": {"b": "any"}})
    rec = recommend(_results(full, fixed))
    assert rec.picks[0].backend == "iree"  # the figures are as measured
    assert not rec.verdict.startswith("Ship iree") and "iree takes b=2 only" in rec.verdict, rec.verdict
    rec = recommend(_results(fixed))  # nothing takes every size: say so, never "Ship iree" plainly
    assert rec.verdict.startswith("Only at fixed sizes: iree takes b=2 only"), rec.verdict


def test_python_api_compare_takes_a_function_and_arguments(tmp_path):
    res = multiexport.compare(lambda x, y: {"s": x + y}, np.ones(3, np.float32), np.ones(3, np.float32),
                              out_dir=tmp_path, trials=1, bench=None)
    assert res.exit_code == 0 and res.backends["xla"].status is Status.OK
    assert (tmp_path / "report.html").is_file()


def test_cli_exports_in_a_worker_and_refuses_an_unseeded_target(tmp_path):
    path = tmp_path / "unseeded.py"
    path.write_text(textwrap.dedent("""
        import numpy as np
        from multiexport import Target
        w = np.random.default_rng().normal(size=(4, 4)).astype(np.float32)  # differs in every process
        target = Target(lambda x: x @ w, args=(np.ones((2, 4), np.float32),), name="unseeded")
    """))
    proc = run_cli("compare", path, "--backends", "xla", "--out-dir", tmp_path / "o", "--no-bench")
    assert proc.returncode == 2  # the target is at fault, not a backend
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert data["backends"]["xla"]["status"] == "nondeterministic-target"
    assert "random values without a fixed seed" in data["backends"]["xla"]["reason"]


def test_allow_fail_keeps_a_failed_backend_out_of_the_exit_code(tmp_path, monkeypatch):
    path = tmp_path / "with_failing.py"
    path.write_text(textwrap.dedent(f"""
        from multiexport.exporting.registry import register
        from multiexport.examples import seed
        register("xla_export_fails", {ALL['xla_export_fails']!r})
        target = seed
    """))
    proc = run_cli("compare", f"{path}:target", "--backends", "xla,xla_export_fails", "--out-dir", tmp_path / "o", "--no-bench")
    assert proc.returncode == 3
    proc = run_cli("compare", f"{path}:target", "--backends", "xla,xla_export_fails", "--out-dir", tmp_path / "o",
                   "--no-bench", "--allow-fail", "xla_export_fails")
    assert proc.returncode == 0 and "xla_export_fails" in proc.stdout
