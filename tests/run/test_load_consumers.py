"""The load loops (common/mx_load.h) in the native consumers beyond ONNX Runtime's and TF's: LiteRT's lite_run (a
compiled model per lane), OpenVINO's ov_run (THROUGHPUT hint, an infer request per lane) and PJRT's pjrt_run (one
loaded executable, each lane its own input buffers) run the Offline, Server and MultiStream scenarios themselves
(`--load-*` flags), and `multiexport load --driver native` hands the scenarios to them. One symbolic-batch MLP per
format, exported once for the module."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from multiexport import api
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import load_npz
from multiexport.leaves import load_target
from multiexport.measure.load import LoadConfig, poisson_schedule
from multiexport.native.build import NativeBuildError, build
from multiexport.native.run import command
from multiexport.run.load import measure_load
from multiexport.run.load_native import has_load_loop, native_loop, native_multistream, native_offline, native_server

TARGET = "multiexport.examples:mlp_dynamic"
PROGRAMS = {"litert": ("lite_run", "litert_c_api"), "openvino": ("ov_run", "openvino_c_api"),
            "xla": ("pjrt_run", "pjrt_c_api")}


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def artifact(request, tmp_path_factory):
    backend = request.param
    available = get_backend(backend).available()
    if not available.ok:
        pytest.skip(f"{backend} unavailable: {available.reason}")
    try:
        program = build(PROGRAMS[backend][0])
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp(f"load-{backend}")
    api.export(load_target(TARGET), out_dir=root / backend, backend=backend)
    return backend, root / backend, program


def _figures(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_program_runs_the_three_scenarios(artifact, tmp_path):
    backend, directory, program = artifact
    assert has_load_loop(backend)
    # the program as the native driver starts it (pjrt_run: its plugin, its threads from $PJRT_NPROC)
    argv, env = command(directory, inputs_dir=str(directory / "inputs"), outputs_dir=str(tmp_path / "out"), threads=2)
    assert Path(argv[0]).name == program.name
    run = functools.partial(subprocess.run, env=env, cwd=directory, capture_output=True, text=True, timeout=120)
    cmd = [*argv, "--no-outputs", "--load-lanes", "2"]
    offline = _figures(run([*cmd, "--load-seconds", "0.2"]))
    assert offline["consumer"] == PROGRAMS[backend][1] and offline["scenario"] == "offline"
    assert offline["lanes"] == 2 and offline["calls"] > 0
    assert offline["calls_per_s"] == pytest.approx(offline["calls"] / offline["seconds"], 1e-3)
    arrivals = poisson_schedule(500.0, 0.2, seed=1)
    arrivals[50:] += 0.05  # a gap: the requests after it cannot have been served before their arrival
    np.save(tmp_path / "schedule.npy", arrivals)
    server = _figures(run([*cmd, "--load-schedule", str(tmp_path / "schedule.npy"), "--load-latencies",
                           str(tmp_path / "lat.npy")]))
    latencies = np.load(tmp_path / "lat.npy")
    assert server["scenario"] == "server" and server["requests"] == server["completed"] == arrivals.size
    assert latencies.size == arrivals.size and np.isfinite(latencies).all() and (latencies > 0).all()
    assert server["seconds"] >= arrivals[-1]  # the span runs to the last completion, after the last arrival
    multi = _figures(run([*cmd, "--load-samples-per-query", "4", "--load-min-queries", "30", "--load-seconds", "0.01",
                          "--load-latencies", str(tmp_path / "q.npy")]))
    queries = np.load(tmp_path / "q.npy")
    assert multi["scenario"] == "multistream" and multi["queries"] == queries.size >= 30
    assert multi["samples_per_query"] == 4 and (queries > 0).all()
    bad = run([*cmd[:-2], "--load-lanes", "0"])
    assert bad.returncode != 0 and "--load-lanes" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_the_native_driver_hands_every_scenario_to_the_program(artifact, tmp_path):
    backend, directory, _ = artifact
    loop = native_loop(directory, load_npz(directory / "example_inputs.npz"), 2, tmp_path)
    calls, seconds, config = native_offline(loop, 2, 0.2, 120)
    assert calls > 0 and seconds > 0
    assert config["driver"] == "native" and config["consumer"] == PROGRAMS[backend][1] and config["lanes"] == 2
    run, _ = native_server(loop, 2, poisson_schedule(200.0, 0.2, seed=0), 120)
    assert run.latencies_ns.size == 100 and np.isfinite(run.latencies_ns).all() and (run.latencies_ns > 0).all()
    queries, _, _ = native_multistream(loop, 2, 3, 0.01, 20, 120)
    assert queries.size >= 20 and (queries > 0).all()
    # the example's batch (pjrt_run runs a symbolic XLA artifact at the sizes the export refined: the example's)
    config = LoadConfig(scenario="all", p99_ms=1000.0, rates=(100.0,), batch_sizes=(), seconds=0.2, rounds=1,
                        threads=2, driver="native", samples_per_query=4, min_requests=20)
    row = measure_load([(backend, directory)], config).rows[0]
    assert row.ok, row.reason
    assert row.throughput_config["driver"] == "native" and row.lanes == 2
    assert row.throughput_config["consumer"] == PROGRAMS[backend][1]
    assert len(row.offline) == 1 and row.offline[0].samples_per_s > 0
    assert row.server is not None and row.server.points[0].n >= 20 and row.multistream is not None


def test_litert_lanes_bind_their_inputs_once_where_they_can(artifact, tmp_path):
    # lite_run's lanes bind each input to its tensor once, at compile (no registration per call), after checking a
    # lane's first outputs against the program's own run; not where an output is an input's own tensor (the
    # converter folds x * 1 to x) nor where an input is resized (a symbolic batch): there the lanes register their
    # inputs in every call
    from ..cases import many_outputs

    backend, directory, _ = artifact
    if backend != "litert":
        pytest.skip("lite_run's input binding")
    api.export(load_target("multiexport.examples:seed"), out_dir=tmp_path / "seed", backend="litert")
    api.export(many_outputs(), out_dir=tmp_path / "many", backend="litert")
    for where, how in ((tmp_path / "seed", "bound once at compile (external tensor binding)"),
                       (tmp_path / "many", "registered in every call"), (directory, "registered in every call")):
        loop = native_loop(where, load_npz(where / "example_inputs.npz"), 2, tmp_path)
        calls, _, config = native_offline(loop, 2, 0.1, 120)
        assert calls > 0 and config["inputs"] == how, where


def test_pjrt_run_makes_its_cpu_client_with_the_devices_asked(artifact, tmp_path):
    # jaxlib's CPU client has one device; XLA's CPU plugin makes 4 unless told (--cpu-devices: its create option
    # cpu_device_count), and one call ran up to 2x slower on that client (docs/load.md). The load line records it
    backend, directory, _ = artifact
    if backend != "xla":
        pytest.skip("pjrt_run's CPU client")
    argv, env = command(directory, inputs_dir=str(directory / "inputs"), outputs_dir=str(tmp_path / "out"), threads=1)
    run = functools.partial(subprocess.run, env=env, cwd=directory, capture_output=True, text=True, timeout=120)
    at = argv.index("--cpu-devices")  # the consumer's command passes 1 (a CPU plugin): without it, the default
    cmd = [*argv[:at], *argv[at + 2:], "--no-outputs", "--load-lanes", "1", "--load-seconds", "0.1"]
    assert _figures(run(cmd))["cpu_devices"] == "the plugin's default"
    one = _figures(run([*cmd, "--cpu-devices", "1"]))
    assert one["cpu_devices"] == "1" and one["calls"] > 0
    bad = run([*cmd, "--cpu-devices", "0"])
    assert bad.returncode != 0 and "--cpu-devices" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_pjrt_run_lanes_divide_the_cpu_clients_threads(artifact, tmp_path):
    # on a CPU client pjrt_run's lanes divide PJRT_NPROC between them, as ONNX Runtime's and LiteRT's lanes divide
    # their threads: two lanes' concurrent calls on the plugin's 2-thread pool cost 2-3x the CPU per call of two
    # lanes on one thread each (benchmarks/load.md); the load line records the value given and the one used
    backend, directory, _ = artifact
    if backend != "xla":
        pytest.skip("pjrt_run's CPU client")
    argv, env = command(directory, inputs_dir=str(directory / "inputs"), outputs_dir=str(tmp_path / "out"), threads=2)
    assert env["PJRT_NPROC"] == "2" and "--cpu-devices" in argv
    run = functools.partial(subprocess.run, env=env, cwd=directory, capture_output=True, text=True, timeout=120)
    cmd = [*argv, "--no-outputs", "--load-seconds", "0.1", "--load-lanes"]
    two = _figures(run([*cmd, "2"]))
    assert (two["pjrt_nproc"], two["pjrt_nproc_given"], two["calls"] > 0) == ("1", "2", True)
    one = _figures(run([*cmd, "1"]))
    assert (one["pjrt_nproc"], one["pjrt_nproc_given"]) == ("2", "2")
    three = _figures(run([*cmd, "3"]))  # never below one thread
    assert three["pjrt_nproc"] == "1"
