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


@pytest.mark.subprocess
def test_workers_start_during_exports_and_cold_start_is_the_sum_of_its_own_parts(tmp_path):
    """The paired workers import their runtimes while exports run; each cold-start figure is that worker's
    own import (CPU s), load and first call, never the time it waited for the others; OpenVINO starts from
    the ONNX artifact of the same compare instead of converting the function again."""
    results = compare(examples.seed(), backends=["xla", "onnx", "openvino"], out_dir=tmp_path, trials=1, bench=BENCH,
                      target_spec="multiexport.examples:seed")
    assert results.pairing.mode == "paired"
    benches = {"jax": results.reference.bench, **{n: r.bench for n, r in results.backends.items()}}
    for name, bench in benches.items():
        first = bench.sizes[0]
        parts = bench.extra["runtime_import_cpu_s"] + bench.load_s + first.prepare_s + (first.compile_s or 0) + \
            first.first_call_s
        assert bench.extra["runtime_import_cpu_s"] > 0 and bench.extra["process_start_to_first_output_s"] == \
            pytest.approx(parts), name
    stage = results.backends["openvino"]
    assert all(r.status is Status.OK for r in results.backends.values()), {n: r.reason for n, r in results.backends.items()}
    from multiexport.exporting import Manifest

    how = Manifest.read(tmp_path / "openvino").format["stage"]
    assert how["made"].startswith("reused") and how["reused_from"] == "onnx", how
    assert stage.export_seconds < results.backends["onnx"].export_seconds * 5  # bounded: no second conversion


def test_a_paired_worker_answers_nothing_before_its_timed_load(tmp_path):
    """The protocol: imported, then only `load` (timed) may come first; any other request is an error."""
    from multiexport.backends.xla import XlaBackend
    from multiexport.leaves import build_signature
    from multiexport.run.messages import Imported, TimeSlice, decode_answer, encode_request
    from multiexport.run.workers import worker_command
    from multiexport.system.piped import Served

    target = examples.seed()
    sig = build_signature(target)
    XlaBackend().export(target.fn, sig, tmp_path / "xla")
    (tmp_path / "out").mkdir()
    server = Served(worker_command("serve", "run", str(tmp_path / "xla"), str(tmp_path / "out"), "--runtime", "xla"))
    try:
        imported = decode_answer(server.read_answer(120), Imported, "the first answer")
        assert isinstance(imported, Imported) and imported.import_cpu_s > 0
        answer = server.request(encode_request(TimeSlice(0, 0.1, 1, 3)), 60)
        assert "before 'load'" in answer["error"]["message"]
    finally:
        server.close()


@pytest.mark.subprocess
def test_workers_started_before_the_target_is_built_are_adopted_by_its_compare_and_closed_by_another(tmp_path):
    """The CLI starts the paired workers before it builds the target (their runtimes import meanwhile): the
    compare for that TARGET adopts them, loads each artifact into its worker and closes them; a compare for
    another TARGET closes them unused and starts its own."""
    from multiexport.comparison import CompareConfig
    from multiexport.comparison.timing import start_early

    def config(out: str) -> CompareConfig:
        return CompareConfig(backends=("xla",), out_dir=tmp_path / out, trials=1, bench=BENCH)

    early = start_early(config("a"), "multiexport.examples:seed")
    assert early is not None and set(early.servers.alive) == {"xla", "jax"}
    results = compare(examples.seed(), config("a"), target_spec="multiexport.examples:seed", early_workers=early)
    assert results.pairing.mode == "paired" and results.backends["xla"].status is Status.OK
    assert results.backends["xla"].bench.load_s > 0 and results.backends["xla"].parity.passed
    assert not early.servers.alive and not early.servers.work.exists()  # the compare closed them
    other = start_early(config("b"), "multiexport.examples:seed")
    assert other is not None
    workers = [served.proc for served in other.servers.alive.values()]
    results = compare(examples.mlp(), config("b"), target_spec="multiexport.examples:mlp", early_workers=other)
    assert results.pairing.mode == "paired" and results.backends["xla"].status is Status.OK
    assert all(proc.poll() is not None for proc in workers) and not other.servers.work.exists()


@pytest.mark.subprocess
def test_early_workers_no_compare_adopts_are_killed_not_waited_for():
    """The target failed to load: the workers started for it are killed at once, not asked to quit (a worker still
    importing TensorFlow reads no request until that import is done: a typo in TARGET waited for it)."""
    import signal

    from multiexport.comparison import CompareConfig
    from multiexport.comparison.timing import start_early

    early = start_early(CompareConfig(backends=("savedmodel", "xla"), trials=1, bench=BENCH),
                        "multiexport.examples:seed")
    assert early is not None
    workers = [served.proc for served in early.servers.alive.values()]
    early.close()
    assert [proc.returncode for proc in workers] == [-signal.SIGKILL] * len(workers)
    assert not early.servers.alive and not early.servers.work.exists()


def test_the_signed_rank_interval_is_wilcoxons_and_covers_as_it_says():
    import numpy as np

    from multiexport.measure.pairing import _signed_rank_critical, signed_rank_interval

    # the exact null distribution's lower 2.5% critical values (Wilcoxon's table): none below n = 6
    assert [_signed_rank_critical(n, 0.025) for n in (5, 6, 10, 15, 20)] == [-1, 0, 8, 25, 52]
    rng = np.random.default_rng(7)
    covered = sum(lo <= 0 <= hi for _, lo, hi in (signed_rank_interval(rng.standard_t(3, 15)) for _ in range(2000)))
    assert 0.935 <= covered / 2000 <= 0.97  # 95% nominal (the discrete distribution: 95.2% exactly at n = 15)
    centre, lo, hi = signed_rank_interval([1.0, 2.0, 3.0])  # too few for 95%: the whole range of Walsh averages
    assert (centre, lo, hi) == (2.0, 1.0, 3.0)


def test_a_paired_ratio_is_judged_per_round_and_one_disturbed_round_barely_moves_it():
    import numpy as np

    from multiexport.measure.pairing import new_over_base, paired_ratio

    rng = np.random.default_rng(3)
    drift = np.exp(rng.normal(0, 0.3, 15))  # the machine's state per round, shared by both in a round: cancels
    base = [d * rng.lognormal(0, 0.02, 200) for d in drift]
    new = [1.2 * d * rng.lognormal(0, 0.02, 200) for d in drift]
    r = paired_ratio(new, base, 8, "onnx", "baseline:onnx")
    assert (r.faster, r.slower, r.batch) == ("baseline:onnx", "onnx", 8) and r.significant
    assert 1.18 < r.ratio < 1.22 and 1.1 < r.ci95_low <= r.ratio <= r.ci95_high < 1.3
    disturbed = [x * (10 if k == 4 else 1) for k, x in enumerate(new)]  # another process took one round's slice
    ratio, low, high = new_over_base(paired_ratio(disturbed, base, 8, "onnx", "baseline:onnx"), "onnx")
    assert 1.18 < ratio < 1.23 and low > 1.1
    # the other way round: recorded as the baseline being slower, read back as new / baseline
    ratio, low, high = new_over_base(paired_ratio(base, new, 8, "onnx", "baseline:onnx"), "onnx")
    assert 1 / 1.22 < ratio < 1 / 1.18 and low <= ratio <= high < 1
