"""run.servers.ReferenceExports: the reference's paired worker makes the exports that need the built target."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import pytest

from multiexport.exporting.options import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.measure.bench import BenchConfig
from multiexport.run.export_pool import ExportJob, export_in_workers
from multiexport.run.messages import ColdStart, Prepare, encode
from multiexport.run.runs import write_bench_feeds
from multiexport.run.servers import ReferenceExports, Servers

from .test_worker_pool import AHEAD_MODEL, _imported


def _reference_worker(tmp_path, monkeypatch, factory: str = "target") -> tuple[Servers, str, object]:
    (tmp_path / "model.py").write_text(AHEAD_MODEL)
    imports = tmp_path / "imports.log"
    monkeypatch.setenv("HANDOFF_TEST_IMPORTS", str(imports))
    spec = f"{tmp_path / 'model.py'}:{factory}"
    servers = Servers("cpu", 1, 600)
    servers.spawn(ReferenceExports.NAME, ["reference", spec], None)
    return servers, spec, imports


def _cold_start(servers: Servers, tmp_path) -> ColdStart:
    import numpy as np

    feed = {"x": np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)}
    write_bench_feeds(tmp_path / "bench", [(2, feed)], {})
    servers.load(ReferenceExports.NAME)
    answer = servers.ask(ReferenceExports.NAME, Prepare(str(tmp_path / "bench"), BenchConfig(warmup_iters=1)),
                         ColdStart, 600)
    assert answer is not None, servers.failures
    return answer


@contextlib.contextmanager
def _exporting_with(tmp_path, monkeypatch, name: str, cls: str) -> Iterator[tuple[str, Servers, object]]:
    """The reference's worker of the test model, with the fault backend `cls` of tests/fault_backends.py registered
    as `name` (before it starts) and an empty tmp_path/out: (spec, servers, the model's import log); all undone
    after."""
    from multiexport.exporting.registry import register, unregister

    register(name, f"tests.fault_backends:{cls}")
    try:
        servers, spec, imports = _reference_worker(tmp_path, monkeypatch)
        try:
            (tmp_path / "out").mkdir()
            yield spec, servers, imports
        finally:
            servers.close()
    finally:
        unregister(name)


def _restored_fresh(servers: Servers, exporter: ReferenceExports, tmp_path, imports) -> str:
    """After the reference's worker was given up while it exported (not a failure of the reference's own):
    `restore` starts a fresh one, which builds the target anew (two builds logged in all) and cold-starts with
    nothing exported in it. Returns why `restore` said it started one."""
    assert exporter.lost and ReferenceExports.NAME not in servers.alive
    assert ReferenceExports.NAME not in servers.failures
    why = exporter.restore()
    assert why is not None and not exporter.lost and ReferenceExports.NAME in servers.alive
    cold = _cold_start(servers, tmp_path)
    assert cold.bench.sizes[0].status.value == "ok" and cold.bench.sizes[0].first_call_s is not None
    assert "exported_before_load" not in cold.bench.extra  # a fresh process: nothing exported in it
    assert len(set(_imported(imports))) == 2  # the given-up worker's build and the fresh one's
    return why


def test_the_reference_worker_exports_with_the_target_it_built_then_loads_and_cold_starts(tmp_path, monkeypatch):
    """The exports of the first plan run in the reference's worker, from the target it built as it started: no
    other process imports the model (the second plan's worker exports from the handoff), every export has the
    compare's fingerprint, and the worker then loads the reference and cold-starts it, saying which exports ran
    in it before."""
    from multiexport.exporting.handoff import write_handoff
    from multiexport.leaves import build_signature, load_target

    if not (get_backend("onnx").available().ok and get_backend("iree").available().ok):
        pytest.skip("onnx or iree unavailable")
    servers, spec, imports = _reference_worker(tmp_path, monkeypatch)
    try:
        target = load_target(spec)  # the compare's own build
        sig = build_signature(target)
        fingerprint = sig.fingerprint(target.fn)
        assert write_handoff(target.fn, sig, fingerprint, (tmp_path / "handoff").resolve())
        out = tmp_path / "out"
        out.mkdir()
        owns = [[ExportJob("onnx", out / "onnx", encode(ExportOptions())),
                 ExportJob("xla", out / "xla", encode(ExportOptions()))],
                [ExportJob("iree", out / "iree", encode(ExportOptions()))]]
        exporter = ReferenceExports(servers, spec)
        left = export_in_workers(spec, out, owns, [], slots=2, timeout=600, handoff=tmp_path / "handoff",
                                 ahead=exporter)
        assert all(o.reply is not None and o.reply.fingerprint == fingerprint for o in left.values()), left
        pids = {int(p) for p in _imported(imports)} - {os.getpid()}
        assert pids == {servers.alive[ReferenceExports.NAME].proc.pid}  # only the reference's worker built it
        assert left["onnx"].reply.target_load is not None and left["iree"].reply.target_load is None
        assert not exporter.lost
        cold = _cold_start(servers, tmp_path)
        assert cold.bench.extra["exported_before_load"] == ["onnx", "xla"]
        assert 0 < cold.bench.extra["exports_resident_bytes"] <= cold.bench.memory["peak_rss_bytes"]
    finally:
        servers.close()


def test_a_reference_worker_that_dies_exporting_ends_that_export_and_the_reference_gets_a_fresh_worker(
        tmp_path, monkeypatch):
    """A converter that aborts the process, run in the reference's worker: that export is a crash (as in a worker of
    its own), the export after it comes back to be run again alone, and `restore` starts the reference's worker
    again, which builds, loads and cold-starts as if nothing had happened."""
    with _exporting_with(tmp_path, monkeypatch, "xla_export_crashes", "ExportCrashingXla") as (spec, servers, imports):
        out = tmp_path / "out"
        owns = [[ExportJob("xla_export_crashes", out / "xla_export_crashes", encode(ExportOptions())),
                 ExportJob("xla", out / "xla", encode(ExportOptions()))]]
        exporter = ReferenceExports(servers, spec)
        left = export_in_workers(spec, out, owns, [], slots=1, timeout=600, ahead=exporter)
        assert left["xla_export_crashes"].failure is not None, left
        assert left["xla_export_crashes"].failure[0] == "crashed", left
        assert left["xla"].reply is None and left["xla"].failure is None  # to run again, alone
        assert "lost while it exported" in _restored_fresh(servers, exporter, tmp_path, imports)


def test_an_export_that_changes_the_target_in_place_leaves_the_reference_to_a_fresh_worker(tmp_path, monkeypatch):
    """A converter that doubles the weights the target closes over, run in the reference's worker: its export
    stands, but that worker would time a changed model, so it is given up and `restore` starts a fresh one (saying
    why), which builds the target anew and cold-starts with nothing exported in it. A plain export leaves the
    worker as the reference's (the first test)."""
    with _exporting_with(tmp_path, monkeypatch, "xla_mutates_target", "TargetMutatingXla") as (spec, servers, imports):
        out = tmp_path / "out"
        exporter = ReferenceExports(servers, spec)
        left = export_in_workers(spec, out, [[ExportJob("xla_mutates_target", out / "xla_mutates_target",
                                                        encode(ExportOptions()))]], [], slots=1, timeout=600,
                                 ahead=exporter)
        assert left["xla_mutates_target"].reply is not None, left  # the export itself is made
        assert exporter.changed
        assert "changed the target it would time" in _restored_fresh(servers, exporter, tmp_path, imports)


def test_a_backend_registered_after_the_reference_worker_started_is_exported_there(tmp_path, monkeypatch):
    """The reference's worker starts before the target's module loads, which may register backends in the compare:
    an `Export` carries the compare's registrations as they are then, so such a backend exports there too."""
    from multiexport.exporting.registry import register, unregister

    servers, spec, _ = _reference_worker(tmp_path, monkeypatch)
    try:
        assert servers.wait_imported(ReferenceExports.NAME) is not None
        register("xla_perturbed", "tests.fault_backends:PerturbedXla")  # after the worker started
        out = tmp_path / "out"
        out.mkdir()
        exporter = ReferenceExports(servers, spec)
        left = export_in_workers(spec, out, [[ExportJob("xla_perturbed", out / "xla_perturbed",
                                                        encode(ExportOptions()))]], [], slots=1, timeout=600,
                                 ahead=exporter)
        assert left["xla_perturbed"].reply is not None and left["xla_perturbed"].by_ahead, left
        assert (out / "xla_perturbed" / "manifest.json").is_file() and not exporter.lost
    finally:
        unregister("xla_perturbed")
        servers.close()


def test_a_reference_worker_whose_build_failed_leaves_the_exports_to_a_worker_of_their_own(tmp_path, monkeypatch):
    """The reference's worker could not build the target: `run` says so (None) and the plan's exports run in a
    fresh worker, which reports the factory's own error; the reference's failure stays the reference's."""
    monkeypatch.setenv("AHEAD_TEST_FAIL", "1")
    servers, spec, _ = _reference_worker(tmp_path, monkeypatch, "failing_in_workers")
    try:
        out = tmp_path / "out"
        out.mkdir()
        exporter = ReferenceExports(servers, spec)
        left = export_in_workers(spec, out, [[ExportJob("xla", out / "xla", encode(ExportOptions()))]], [],
                                 slots=1, timeout=600, ahead=exporter)
        assert left["xla"].reply is None and "the factory fails in this process" in left["xla"].failure[1], left
        assert "the factory fails in this process" in servers.failures[ReferenceExports.NAME][1]
        assert not exporter.lost
    finally:
        servers.close()


def test_an_export_request_to_a_runner_worker_is_refused_with_why():
    """Only the reference's worker has a target to export with: an artifact runner's worker answers an `Export` with
    its failure, naming the request, and ends."""
    from multiexport.run.messages import Export, ExportsDone

    servers = Servers("cpu", 1, 600)
    try:
        servers.spawn("xla", ["run", "-"], None)
        assert servers.wait_imported("xla") is not None
        assert servers.ask("xla", Export(("export", "multiexport.examples:seed", "xla")), ExportsDone, 600) is None
        assert "request 'export' to a worker that is not the reference's" in servers.failures["xla"][1]
    finally:
        servers.close()
