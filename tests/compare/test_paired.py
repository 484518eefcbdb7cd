"""Paired timing in a compare: every runner loaded once, timed in interleaved rounds, ratios with intervals."""

from __future__ import annotations

import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.measure.bench import BenchConfig
from multiexport.report.recommend import recommend
from multiexport.results import Status, load_results

BENCH = BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=10, bench_time=0.3, max_iters=20_000)


@pytest.mark.subprocess
def test_a_controlled_slowdown_is_measured_beyond_noise_in_paired_rounds(fault_backends, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIEXPORT_TEST_SLEEP_MS", "2")  # a real 2 ms sleep in every timed call of xla_sleepy
    results = compare(examples.mlp(), backends=["xla", "xla_sleepy"], out_dir=tmp_path, trials=1, bench=BENCH,
                      target_spec="multiexport.examples:mlp")
    pairing = results.pairing
    assert pairing.mode == "paired" and pairing.rounds == 5 and pairing.peak_gflops > 0
    for name in ("xla", "xla_sleepy"):
        size = results.backends[name].bench.sizes[0]
        assert size.measured == "paired" and size.latency.n >= 5 * 2, (name, size)
        assert results.backends[name].bench.load_s > 0  # cold start comes from the same worker's load
    batch = results.backends["xla"].bench.sizes[0].batch
    ratio = pairing.ratio(batch, "xla", "xla_sleepy")
    assert (ratio.faster, ratio.slower) == ("xla", "xla_sleepy") and ratio.significant and ratio.ci95_low > 2
    assert {frozenset((r.faster, r.slower)) for r in pairing.ratios} == {
        frozenset(p) for p in (("jax", "xla"), ("jax", "xla_sleepy"), ("xla", "xla_sleepy"))}
    pick = recommend(results).picks[0]
    assert pick.backend == "xla" and pick.significant and pick.ratio_ci95 == (ratio.ci95_low, ratio.ci95_high)
    assert "## Latency against the fastest" in (tmp_path / "report.md").read_text()
    assert load_results(tmp_path / "results.json").pairing.ratios == pairing.ratios


@pytest.mark.subprocess
def test_a_runner_that_dies_while_timed_fails_alone(fault_backends, tmp_path):
    results = compare(examples.seed(), backends=["xla_dies_timed", "xla"], out_dir=tmp_path, trials=1, bench=BENCH,
                      target_spec="multiexport.examples:seed")
    dead = results.backends["xla_dies_timed"]
    assert dead.status is Status.OK  # its parity stands: it ran and matched before it died
    assert dead.bench.sizes[0].status is Status.BENCH_FAILED and dead.bench.sizes[0].latency is None
    assert "crashed" in results.pairing.failures["xla_dies_timed"] and "SIGABRT" in results.pairing.failures["xla_dies_timed"]
    assert results.backends["xla"].bench.sizes[0].measured == "paired"
    assert results.pairing.ratio(None, "jax", "xla") is not None


def test_sequential_timing_says_why(tmp_path):
    results = compare(examples.seed(), backends=["xla"], out_dir=tmp_path, trials=1, bench=BENCH, paired=False)
    assert results.pairing.mode == "sequential" and "asked for" in results.pairing.reason
    assert results.backends["xla"].bench.sizes[0].measured == "sequential"
    assert results.backends["xla"].bench.sizes[0].latency.n >= 10


@pytest.mark.subprocess
def test_the_per_call_floor_is_timed_through_every_runtime_and_reported(tmp_path):
    """--floor: the floor target (one add on 8 floats) through the same runtimes, each row's share of it shown."""
    results = compare(examples.mlp(), backends=["xla", "onnx"], out_dir=tmp_path, trials=1, bench=BENCH,
                      target_spec="multiexport.examples:mlp", floor=True)
    floors = results.pairing.floors
    assert set(floors) == {"jax", "xla", "onnx"} and all(0 < ms < 50 for ms in floors.values()), floors
    assert (tmp_path / "floor" / "results.json").is_file()  # the floor's own compare, inside the output directory
    report = (tmp_path / "report.md").read_text()
    assert "floor ms" in report and "% of the call)" in report
    assert load_results(tmp_path / "results.json").pairing.floors == floors
