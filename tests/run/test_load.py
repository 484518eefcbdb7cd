"""run.load: real artifacts measured under load in their own serve workers (the protocol's load-run request), the
sizes an artifact cannot take refused with a reason, and one broken artifact failing alone."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from multiexport import api
from multiexport.errors import RunError
from multiexport.files.npz import load_npz
from multiexport.leaves import load_target
from multiexport.measure.load import LoadConfig, poisson_schedule
from multiexport.results.load import read_load_results
from multiexport.run.load import measure_load
from multiexport.run.load_native import has_load_loop, native_loop, native_multistream, native_offline, native_server

DYNAMIC = "multiexport.examples:mlp_dynamic"  # a symbolic batch
STATIC = "multiexport.examples:mlp"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("load")
    api.export(load_target(DYNAMIC), out_dir=root / "dynamic", backend="xla")
    api.export(load_target(STATIC), out_dir=root / "static", backend="xla")
    return root


def test_both_scenarios_on_a_symbolic_and_a_static_artifact(artifacts, tmp_path):
    config = LoadConfig(scenario="both", p99_ms=1000.0, batch_sizes=(1, 4), seconds=0.2, rounds=2, threads=1,
                        driver="python")  # the serve worker's lanes (the C loops: test_load_consumers.py)
    results = measure_load([("dynamic", artifacts / "dynamic"), ("static", artifacts / "static")], config)
    dynamic, static = results.rows
    assert dynamic.ok and static.ok, (dynamic.reason, static.reason)
    # offline: the example, then each size; the static artifact refuses the sizes with a reason, times its example
    assert [p.batch for p in dynamic.offline][1:] == [1, 4]
    assert all(p.status == "ok" and p.samples_per_s and p.low <= p.samples_per_s <= p.high and len(p.per_round) == 2
               for p in dynamic.offline)
    assert static.offline[0].status == "ok" and static.offline[0].batch is None
    assert [p.status for p in static.offline[1:]] == ["size-unsupported"] * 2
    assert "symbolic" in static.offline[1].reason
    # server: the ladder from each format's own peak, a bound no CPU call misses, every rate measured twice
    for row in (dynamic, static):
        assert row.server is not None and row.server.points and row.single_stream_p50_ms > 0
        assert all(p.rounds == 2 and p.n >= 200 and p.p50_ms <= p.p90_ms <= p.p99_ms for p in row.server.points)
        assert row.server.max_rate_per_s == max(p.rate_per_s for p in row.server.points if p.meets_bound)
        assert row.lanes == 1 and "how" in row.throughput_config
    assert "req/s" in results.server_verdict and results.rankings_differ in (True, False)
    results.write(tmp_path / "load.json")
    assert read_load_results(tmp_path / "load.json") == results


def test_offline_only_with_a_broken_artifact_failing_alone(artifacts, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(artifacts / "static", broken)
    model = broken / "model.jax_exported"
    model.write_bytes(b"\0" * model.stat().st_size)  # the recorded size, so the manifest passes and the load fails
    config = LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=1)
    results = measure_load([("broken", broken), ("static", artifacts / "static")], config)
    bad, good = results.rows
    assert not bad.ok and bad.reason and bad.offline == []
    assert good.ok and good.server is None and good.offline[0].samples_per_s > 0
    assert results.server_verdict == ""


def test_an_unreadable_manifest_is_its_row_only(artifacts, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(artifacts / "static", broken)
    (broken / "manifest.json").write_text("{")
    results = measure_load([("broken", broken), ("static", artifacts / "static")],
                           LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=1))
    assert [r.ok for r in results.rows] == [False, True]
    assert "manifest" in results.rows[0].reason


def test_a_runner_not_for_concurrent_threads_gets_a_runner_per_lane(artifacts, tmp_path):
    from multiexport.exporting.contract import RunOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.run.load_serve import LoadRun, answer_load_run
    from multiexport.run.messages import BenchFeed, write_bench_index

    backend = get_backend("xla")
    runner = backend.load(artifacts / "static", RunOptions(threads=2))
    runner.shared_across_threads = False  # as LiteRT's and IREE's runners declare
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    shutil.copy(artifacts / "static" / "example_inputs.npz", feeds / "0000.npz")
    write_bench_index(feeds, [BenchFeed("0000.npz", None)])
    state = {"runner": runner, "backend": backend, "out": tmp_path}
    answer = answer_load_run(state, LoadRun("offline", str(feeds), 0, 0, 0.2))
    assert answer.lanes == 2 and answer.calls > 0
    assert len(state["lane_runners"]) == 2 and all(r is not runner for r in state["lane_runners"])
    assert answer.config["threads_per_runner"] == 1
    served = answer_load_run(state, LoadRun("server", str(feeds), 0, 0, 0.2, rate=200.0))
    assert served.calls >= 100 and (tmp_path / served.file.split("/")[-1]).is_file()


@pytest.fixture(scope="module")
def onnx_artifact(tmp_path_factory):
    root = tmp_path_factory.mktemp("load-onnx")
    api.export(load_target(DYNAMIC), out_dir=root / "onnx", backend="onnx")
    return root / "onnx"


def test_the_bare_c_load_loop_of_ort_run(onnx_artifact):
    import json
    import subprocess

    from multiexport.native.build import build

    program = build("ort_run")
    cmd = [str(program), "--artifact", str(onnx_artifact), "--inputs", str(onnx_artifact / "inputs"), "--threads", "2",
           "--no-outputs"]
    proc = subprocess.run([*cmd, "--load-lanes", "2", "--load-seconds", "0.3"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["lanes"] == 2 and figures["intra_op_threads"] == 1 and figures["spinning"] == "0"
    assert figures["calls"] > 0 and figures["calls_per_s"] == pytest.approx(figures["calls"] / figures["seconds"], 1e-3)
    bad = subprocess.run([*cmd, "--load-lanes", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--load-lanes" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_the_c_loop_serves_a_schedule_and_multistream_queries(onnx_artifact, tmp_path):
    import json
    import subprocess

    from multiexport.native.build import build

    cmd = [str(build("ort_run")), "--artifact", str(onnx_artifact), "--inputs", str(onnx_artifact / "inputs"),
           "--threads", "2", "--no-outputs", "--load-lanes", "2"]
    arrivals = poisson_schedule(500.0, 0.2, seed=1)
    arrivals[50:] += 0.05  # a gap: the requests after it cannot have been served before their arrival
    np.save(tmp_path / "schedule.npy", arrivals)
    proc = subprocess.run([*cmd, "--load-schedule", str(tmp_path / "schedule.npy"), "--load-latencies",
                           str(tmp_path / "lat.npy")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    latencies = np.load(tmp_path / "lat.npy")
    assert figures["scenario"] == "server" and figures["requests"] == arrivals.size == latencies.size
    assert np.isfinite(latencies).all() and (latencies > 0).all()
    assert figures["seconds"] >= arrivals[-1]  # the span runs to the last completion, after the last arrival
    proc = subprocess.run([*cmd, "--load-samples-per-query", "4", "--load-min-queries", "30", "--load-seconds", "0.01",
                           "--load-latencies", str(tmp_path / "queries.npy")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    queries = np.load(tmp_path / "queries.npy")
    assert figures["scenario"] == "multistream" and figures["queries"] == queries.size >= 30
    assert figures["samples_per_query"] == 4 and (queries > 0).all()
    np.save(tmp_path / "bad.npy", arrivals[::-1])  # descending: not a schedule
    bad = subprocess.run([*cmd, "--load-schedule", str(tmp_path / "bad.npy"), "--load-latencies",
                          str(tmp_path / "lat.npy")], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "ascending" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_the_native_driver_runs_every_scenario_in_the_c_loop(onnx_artifact, artifacts):
    # ONNX Runtime runs in ort_run's loop; pjrt_run has one too, but the symbolic XLA artifact has no refined module
    # for b=4 (PJRT compiles static modules only): the whole XLA row stays on the Python driver and says why
    config = LoadConfig(scenario="all", p99_ms=1000.0, rates=(100.0, 200.0), batch_sizes=(4,), seconds=0.2, rounds=2,
                        threads=2, driver="native", samples_per_query=4, min_requests=20)
    results = measure_load([("onnx", onnx_artifact), ("xla", artifacts / "dynamic")], config)
    onnx, xla = results.rows
    assert onnx.ok and xla.ok, (onnx.reason, xla.reason)
    assert onnx.throughput_config["driver"] == "native" and onnx.throughput_config["consumer"] == "onnxruntime_c_api"
    assert onnx.throughput_config["intra_op_threads"] == 1 and onnx.lanes == 2
    assert xla.throughput_config["driver"] == "python" and "b=4" in xla.throughput_config["native_refused"]
    for row in (onnx, xla):
        assert [p.batch for p in row.offline][1:] == [4] and all(p.samples_per_s for p in row.offline)
        assert row.server is not None and [p.rate_per_s for p in row.server.points] == [100.0, 200.0]
        assert all(p.rounds == 2 and p.n >= 40 for p in row.server.points)
        assert row.multistream is not None and row.multistream.rounds == 2 and row.multistream.queries >= 40
        assert row.multistream.samples_per_query == 4 and row.multistream.p99_ms > 0


def test_onnx_runtime_lanes_share_one_session(onnx_artifact, tmp_path):
    results = measure_load([("onnx", onnx_artifact)], LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=2,
                                                                 driver="python"))
    row = results.rows[0]
    assert row.ok, row.reason
    assert row.lanes == 2 and row.throughput_config["intra_op_threads"] == 1  # the threads divided between lanes
    assert "run_with_iobinding" in row.throughput_config["how"]


def test_tf_run_has_the_load_loops_too(artifacts, tmp_path):
    # the SavedModel's native consumer (tf_run) runs the same scenarios: its lanes share one TF session
    api.export(load_target(DYNAMIC), out_dir=tmp_path / "savedmodel", backend="savedmodel")
    assert has_load_loop("savedmodel") and has_load_loop("onnx") and not has_load_loop("iree")
    directory = tmp_path / "savedmodel"
    loop = native_loop(directory, load_npz(directory / "example_inputs.npz"), 2, tmp_path)
    calls, seconds, config = native_offline(loop, 2, 0.2, 120)
    assert calls > 0 and seconds > 0 and config["driver"] == "native" and config["consumer"] == "tf_c_api"
    run, _ = native_server(loop, 2, poisson_schedule(200.0, 0.2, seed=0), 120)
    assert run.latencies_ns.size == 100 and np.isfinite(run.latencies_ns).all()
    queries, _, _ = native_multistream(loop, 2, 3, 0.01, 20, 120)
    assert queries.size >= 20 and (queries > 0).all()
    api.export(load_target(STATIC), out_dir=tmp_path / "iree", backend="iree")  # IREE's consumer has no loop
    with pytest.raises(RunError, match="no native load loop"):
        native_loop(tmp_path / "iree", load_npz(tmp_path / "iree" / "example_inputs.npz"), 2, tmp_path)


def test_a_planted_slowdown_fails_the_paired_throughput_gate(artifacts, monkeypatch):
    # the new runner's lanes really do 5x the work (each request runs the runtime's call 5 times); its baseline,
    # measured in the same rounds from the same artifact, does not get it. Rounds of 0.5 s: at 0.2 s a machine with a
    # load average of 20 made single rounds differ 3x (measured: one planted 3x run read 0.92x, 0.88x, 9.44x)
    from multiexport.measure.pairing import PLANTED_ENV
    from multiexport.report.load import paired_throughput_checks
    from multiexport.results.bench import BASELINE_PREFIX

    monkeypatch.setenv(PLANTED_ENV, "5")
    config = LoadConfig(scenario="offline", seconds=0.5, rounds=3, threads=1, driver="python")  # planted in its lanes
    results = measure_load([("xla", artifacts / "static"), (BASELINE_PREFIX + "xla", artifacts / "static")], config)
    (check,) = paired_throughput_checks(results, None)
    assert check.backend == "xla" and check.verdict == "regression" and check.low > 1, check.detail


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """The seed as ONNX (ort_run has the C loops) and IREE (its consumer, the wheel's iree-run-module, has none)."""
    root = tmp_path_factory.mktemp("load-seed")
    for backend in ("onnx", "iree"):
        api.export(load_target("multiexport.examples:seed"), out_dir=root / backend, backend=backend)
    return root


def test_the_default_driver_picks_the_c_loop_where_the_consumer_has_one(seed):
    config = LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=2)
    assert config.driver == "auto"
    onnx, iree = measure_load([("onnx", seed / "onnx"), ("iree", seed / "iree")], config).rows
    assert onnx.ok and iree.ok, (onnx.reason, iree.reason)
    # auto probed ONNX in both drivers before its rounds (both rates kept) and ran them in the faster (on the seed
    # the C loop, unless this machine's noise says otherwise: test_the_probe_runs_the_rounds_in_the_faster_driver
    # plants a slowdown to decide it); IREE, with no C loop, was not probed
    from multiexport.run.load import faster_driver

    probe = onnx.throughput_config["driver_probe"]
    assert set(probe) == {"native", "python"} and probe["native"] > 0 and probe["python"] > 0
    assert onnx.throughput_config["driver"] == faster_driver(probe)
    if faster_driver(probe) == "native":
        assert onnx.throughput_config["consumer"] == "onnxruntime_c_api"
    assert "native_refused" not in onnx.throughput_config
    assert iree.throughput_config["driver"] == "python" and "driver_probe" not in iree.throughput_config
    assert iree.throughput_config["native_refused"] == "the format has a native consumer (iree) without a load loop"
    assert onnx.offline[0].samples_per_s > 0 and iree.offline[0].samples_per_s > 0
    # on a device other than the CPU the C loops do not run: the Python lanes, saying why (no run needed to see it)
    from multiexport.run.load_native import native_loops

    assert native_loops(seed / "onnx", "onnx", [(0, {})], "auto", "tpu", 2, seed, 60) == (
        {}, "the native load loops run on the CPU, not on --device tpu")
    assert native_loops(seed / "onnx", "onnx", [(0, {})], "python", "cpu", 2, seed, 60) == ({}, "")


def test_the_probe_runs_the_rounds_in_the_faster_driver(seed, monkeypatch):
    # a real slowdown planted in the Python lanes (each request runs the runtime's call 20 times): the probe must
    # find the C loop faster and run the rounds there; both rates are recorded; --driver native/python do not probe
    from multiexport.measure.pairing import PLANTED_ENV
    from multiexport.run.load import faster_driver

    monkeypatch.setenv(PLANTED_ENV, "20")
    config = LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=2)
    (row,) = measure_load([("onnx", seed / "onnx")], config).rows
    assert row.ok, row.reason
    probe = row.throughput_config["driver_probe"]
    assert row.throughput_config["driver"] == "native" and probe["native"] > probe["python"] > 0, probe
    assert faster_driver({"native": 10.0, "python": 12.9}) == "python"  # the lanes chosen when clearly faster
    assert faster_driver({"native": 10.0, "python": 10.5}) == "native"  # within the margin: the C loop kept
    (row,) = measure_load([("onnx", seed / "onnx")], dataclasses.replace(config, driver="python")).rows
    assert row.throughput_config["driver"] == "python" and "driver_probe" not in row.throughput_config


def test_a_probe_won_by_the_python_lanes_runs_the_rounds_there_ranked_with_the_c_loops(seed, monkeypatch):
    # no lever here slows ort_run's C loop, so the probe's verdict is the one thing replaced (the probe still runs
    # both drivers for real): the rounds then run in the Python lanes, the C loop closed, and the row ranks with the
    # C loops where IREE's (no C loop, no probe) stays apart
    import multiexport.run.load as run_load
    from multiexport.report.load_verdicts import by_driver

    config = LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=2)
    monkeypatch.setattr(run_load, "faster_driver", lambda probe: "python")
    onnx, iree = measure_load([("onnx", seed / "onnx"), ("iree", seed / "iree")], config).rows
    assert onnx.ok and iree.ok, (onnx.reason, iree.reason)
    got = onnx.throughput_config
    assert got["driver"] == "python" and "consumer" not in got and "native_refused" not in got, got
    assert got["driver_probe"]["native"] > 0 and got["driver_probe"]["python"] > 0 and onnx.offline[0].calls > 0
    if got["driver_probe"]["python"] > got["driver_probe"]["native"]:  # the rates themselves say the lanes won
        assert [[r.name for r in rows] for _, rows in by_driver([onnx, iree])] == [["onnx"], ["iree"]]
    else:  # they did not (this run's true verdict was the C loop): the row is not credited with beating it
        assert [g for g, _ in by_driver([onnx, iree])] == ["python"]


def test_a_consumer_that_cannot_build_falls_back_to_the_python_lanes(seed, monkeypatch, tmp_path):
    # a real build fault: an empty build cache and a compiler that fails every compile
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setenv("CXX", "/bin/false")
    config = LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=2)
    (row,) = measure_load([("onnx", seed / "onnx")], config).rows
    assert row.ok, row.reason
    assert row.throughput_config["driver"] == "python" and row.offline[0].samples_per_s > 0
    assert "ort_run" in row.throughput_config["native_refused"]
    assert "compiling" in row.throughput_config["native_refused"]
    # --driver native asked for the C loop: the same fault fails the row, saying why, instead of falling back
    (row,) = measure_load([("onnx", seed / "onnx")], LoadConfig(scenario="offline", seconds=0.2, rounds=1,
                                                                 threads=2, driver="native")).rows
    assert not row.ok and "ort_run" in row.reason and "compiling" in row.reason


def test_a_format_and_its_baseline_split_by_their_probes_both_keep_the_c_loop(seed, monkeypatch):
    # the paired throughput check divides the baseline's rates by the new's: from two drivers that ratio would be the
    # drivers', not the artifacts'. The probe's verdicts are replaced (lanes for the first probed, the C loop for the
    # second: no lever here slows one C loop and not the other); both probes run for real and both rows keep ort_run
    import multiexport.run.load as run_load
    from multiexport.results.bench import BASELINE_PREFIX

    verdicts = iter(["python", "native"])
    monkeypatch.setattr(run_load, "faster_driver", lambda probe: next(verdicts))
    config = LoadConfig(scenario="offline", seconds=0.2, rounds=1, threads=2)
    rows = measure_load([("onnx", seed / "onnx"), (BASELINE_PREFIX + "onnx", seed / "onnx")], config).rows
    for row in rows:
        assert row.ok and row.throughput_config["driver"] == "native", row.throughput_config
        assert row.throughput_config["driver_probe"]["python"] > 0
        assert "paired row" in row.throughput_config["driver_probe_overruled"]
