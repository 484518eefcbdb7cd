"""Reports from results.json alone, and compare's guarantees around them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import multiexport
from multiexport import examples
from multiexport.comparison import compare
from multiexport.recommend import recommend
from multiexport.report import render_html, render_markdown

from .conftest import REPO, run_cli
from .fault_backends import ALL



@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from multiexport.bench import BenchConfig

    out = tmp_path_factory.mktemp("rep")
    compare(examples.mlp_dynamic(), out_dir=out, trials=1, batch_sizes=[1, 4, 16],
                  bench=BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=10, bench_time=0.0))
    return out, json.loads((out / "results.json").read_text())


def test_compare_writes_both_reports_with_the_figures(results):
    out, data = results
    md = (out / "report.md").read_text()
    assert md.startswith("# multiexport report: mlp_dynamic")
    assert "Ship xla" in md and "| batch.x | (b, 16) | float32 | 6 |" in md
    assert "## Cold start and memory" in md and "## Parity per output leaf" in md
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 4  # latency CDF, p50 vs batch, throughput vs batch, parity error
    assert "Content-Security-Policy" in page and "<script" not in page
    # no external resource: the only URL is the SVG namespace, which is never fetched
    assert {u for u in __import__("re").findall(r"https?://[^\"' )]+", page)} == {"http://www.w3.org/2000/svg"}


def test_report_command_rerenders_from_json_alone(results, tmp_path):
    out, data = results
    proc = run_cli("report", out / "results.json", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.md").read_text() == render_markdown(data)
    assert (tmp_path / "report.html").read_text() == render_html(data)


def test_report_of_a_bad_file_is_a_clear_error(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"schema": "other"}))
    proc = run_cli("report", tmp_path / "r.json")
    assert proc.returncode == 2 and "expected multiexport.results/1" in proc.stderr
    proc = run_cli("report", tmp_path / "missing.json")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_recommendation_picks_the_fastest_faithful_and_tests_significance():
    def lat(p50, lo, hi):
        return {"p50_ms": p50, "ci95_low_ms": lo, "ci95_high_ms": hi}

    data = {"backends": {
        "a": {"status": "ok", "bench": {"sizes": [{"batch": 8, "latency": lat(2.0, 1.9, 2.1)}]}, "binding": []},
        "b": {"status": "ok", "bench": {"sizes": [{"batch": 8, "latency": lat(1.0, 0.9, 1.1)}]}, "binding": []},
        "c": {"status": "parity-failed", "reason": "Output 'out' | ...",
              "bench": {"sizes": [{"batch": 8, "latency": lat(0.1, 0.09, 0.11)}]}, "binding": []},
    }}
    rec = recommend(data)
    assert rec.picks[0].backend == "b" and rec.picks[0].runner_up == "a"  # c is faster but unfaithful
    assert rec.picks[0].ratio_to_runner_up == pytest.approx(2.0) and rec.picks[0].significant
    assert any(c.startswith("c: parity-failed") for c in rec.caveats)
    data["backends"]["a"]["bench"]["sizes"][0]["latency"] = lat(1.05, 0.95, 1.2)
    rec = recommend(data)
    assert rec.picks[0].significant is False and "tie within noise" in rec.verdict


def test_python_api_compare_takes_a_function_and_arguments(tmp_path):
    res = multiexport.compare(lambda x, y: {"s": x + y}, np.ones(3, np.float32), np.ones(3, np.float32),
                              out_dir=tmp_path, trials=1, bench=None)
    assert res.exit_code == 0 and res.backends["xla"].status == "ok"
    assert (tmp_path / "report.html").is_file()


def test_cli_exports_in_a_worker_and_refuses_an_unseeded_target(tmp_path):
    path = tmp_path / "unseeded.py"
    path.write_text(textwrap.dedent("""
        import numpy as np
        from multiexport import Target
        w = np.random.default_rng().normal(size=(4, 4)).astype(np.float32)  # differs in every process
        target = Target(lambda x: x @ w, args=(np.ones((2, 4), np.float32),), name="unseeded")
    """))
    proc = run_cli("compare", path, "--backends", "xla", "--out", tmp_path / "o", "--no-bench")
    assert proc.returncode == 3
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert data["backends"]["xla"]["status"] == "nondeterministic-target"
    assert "random values without a fixed seed" in data["backends"]["xla"]["reason"]


def test_allow_fail_keeps_a_failed_backend_out_of_the_exit_code(tmp_path):
    proc = run_cli("compare", "--backends", "xla,nope", "--out", tmp_path, "--no-bench")
    assert proc.returncode == 3
    proc = run_cli("compare", "--backends", "xla,nope", "--out", tmp_path, "--no-bench", "--allow-fail", "nope")
    assert proc.returncode == 0 and "nope" in proc.stdout


def test_ctrl_c_keeps_finished_results_and_says_so(tmp_path):
    path = tmp_path / "with_hang.py"
    path.write_text(textwrap.dedent(f"""
        from multiexport.registry import register
        from multiexport.examples import seed
        register("xla_hang", {ALL['xla_hang']!r})
        target = seed
    """))
    # As from a terminal: a test runner started in the background (`cmd &` in a script) has SIGINT ignored,
    # which children inherit, and Python then never raises KeyboardInterrupt. (preexec_fn would fork JAX.)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "multiexport", "compare", f"{path}:target", "--backends",
                                 "xla,xla_hang", "--out", str(tmp_path / "o"), "--no-bench"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in proc.stderr:
        if "xla_hang: run" in line:
            break
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # stop it here, so a failure here does not leak into later tests
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 130 and "interrupted" in err
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert data["interrupted"] is True
    assert data["backends"]["xla"]["status"] == "ok"
    assert data["backends"]["xla_hang"]["status"] == "interrupted"
    assert (tmp_path / "o" / "report.md").is_file()
    assert not list((tmp_path / "o").glob(".*tmp"))  # nothing half-written
