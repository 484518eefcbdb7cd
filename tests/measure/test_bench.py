"""Benchmark harness: structure and sanity of the figures, never their speed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.measure.bench import BenchConfig, median_ci95, summarize, time_calls

TINY = BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=15, bench_time=0.0)


def test_summary_statistics_are_ordered_and_complete():
    times = np.random.default_rng(0).lognormal(mean=10, sigma=0.5, size=500).astype(np.int64)
    s = summarize(times)
    assert s.n == 500
    assert s.min_ms <= s.p50_ms <= s.p90_ms <= s.p99_ms <= s.max_ms
    assert s.ci95_low_ms <= s.p50_ms <= s.ci95_high_ms
    assert s.mean_ms == pytest.approx(times.mean() / 1e6) and s.std_ms > 0


def test_median_ci_uses_order_statistics():
    values = np.arange(100, dtype=float)
    lo, hi = median_ci95(values)
    # Binomial(100, 1/2): ranks 39 and 60 bracket the median with ~95% coverage
    assert (lo, hi) == (39.0, 60.0)
    assert median_ci95(np.array([5.0])) == (5.0, 5.0)


def test_time_calls_meets_min_iters_and_excludes_warmup():
    calls = []
    times, stopped = time_calls(lambda: calls.append(1), BenchConfig(warmup_iters=3, warmup_time=0.0, min_iters=10,
                                                                     bench_time=0.0))
    assert len(times) == 10 and len(calls) == 13 and stopped == "time"
    capped, stopped = time_calls(lambda: None, BenchConfig(warmup_iters=0, warmup_time=0.0, min_iters=10,
                                                           bench_time=60.0, max_iters=50))
    assert len(capped) == 50 and stopped == "max_iters"  # the cap is reported, never silent
    assert summarize(capped, stopped).stopped_by == "max_iters"


@pytest.mark.parametrize("field, value", [("bench_time", float("nan")), ("bench_time", -1), ("min_iters", 0),
                                          ("max_iters", 5), ("warmup_iters", -1), ("warmup_time", float("inf")),
                                          ("min_iters", True)])
def test_bench_config_is_validated_in_the_python_api(field, value):
    from multiexport import UsageError

    with pytest.raises(UsageError, match=f"Option '{field}'|Option 'max_iters'"):
        BenchConfig(**{field: value})


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    results = compare(examples.mlp_dynamic(), out_dir=out, trials=1, bench=TINY, batch_sizes=(1, 8, 64),
                      target_spec="multiexport.examples:mlp_dynamic")
    return results, json.loads((out / "results.json").read_text())


def test_batch_sweep_from_one_artifact_reports_every_size(sweep):
    results, data = sweep
    bench = data["backends"]["xla"]["bench"]
    assert [s["batch"] for s in bench["sizes"]] == [1, 8, 64]
    for s in bench["sizes"]:
        lat = s["latency"]
        assert lat["n"] >= TINY.min_iters
        assert lat["min_ms"] <= lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"]
        assert s["throughput_per_s"] == pytest.approx(s["batch"] / (lat["p50_ms"] / 1e3))
        assert s["items"] == "items"
        assert s["recompiled"] is True  # XLA compiles one executable per concrete batch size
        assert s["compile_s"] > 0 and s["first_call_s"] > 0


def test_cold_start_and_memory_are_separate_figures(sweep):
    _, data = sweep
    bench = data["backends"]["xla"]["bench"]
    assert bench["load_s"] > 0
    assert bench["extra"]["process_start_to_first_output_s"] > bench["load_s"]
    mem = bench["memory"]
    assert 0 < mem["start_rss_bytes"] <= mem["peak_rss_bytes"] and mem["after_load_rss_bytes"] <= mem["peak_rss_bytes"]
    artifact_files = sum(p.stat().st_size for p in __import__("pathlib").Path(data["backends"]["xla"]["artifact"]).rglob("*")
                         if p.is_file())
    assert bench["artifact_bytes"] == artifact_files
    assert bench["runner"]["calling_path"].startswith("jax.jit(Exported.call)")


def test_reference_is_benchmarked_in_a_worker_with_flops(sweep):
    _, data = sweep
    ref = data["reference"]["bench"]
    assert ref["process"].startswith("worker")  # "worker (paired)" when every runner is loaded at once
    flops = [s["flops"] for s in ref["sizes"]]
    assert all(f and f > 0 for f in flops) and flops[0] < flops[1] < flops[2]  # work grows with the batch
    assert all(s["gflops_per_s"] > 0 for s in ref["sizes"])


def test_without_a_target_spec_the_reference_is_timed_in_the_parent(tmp_path):
    results = compare(examples.seed(), out_dir=tmp_path, trials=1, bench=TINY)
    ref = results.reference.bench
    assert ref.process == "parent"
    assert [s.batch for s in ref.sizes] == [None]
    assert ref.sizes[0].items == "calls"


def test_batch_sizes_need_exactly_one_symbolic_dimension(tmp_path):
    from multiexport import UsageError

    with pytest.raises(UsageError, match="--batch-sizes"):
        compare(examples.seed(), out_dir=tmp_path, bench=TINY, batch_sizes=(1, 2))
