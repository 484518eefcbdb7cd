"""comparison/ahead.py: the export worker that builds the target, started as soon as the signature is known."""

from __future__ import annotations

import dataclasses
import os
import types
import uuid

import numpy as np
import pytest

from multiexport import compare
from multiexport.comparison.ahead import start_ahead
from multiexport.comparison.config import CompareConfig
from multiexport.comparison.exports import plan_for
from multiexport.comparison.memory_plan import AVAILABLE_ENV
from multiexport.leaves import build_signature
from multiexport.leaves.target import Target
from multiexport.results import Status

STARTED = "the worker that needs the built target started at the signature"

MODEL = '''
import os
import numpy as np
import jax
import {helper}  # a module of its own: the build imports something new (Context.target_modules)
from multiexport import Target

with open(os.environ["AHEAD_TEST_IMPORTS"], "a") as log:  # every process that imports this module says so
    log.write(f"{{os.getpid()}}\\n")

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
X = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)


def target():
    return Target(lambda x: {{"y": x @ W}}, args=(X,), name="ahead_model", symbolic_batch="b")


def _draw():
    # not before a second process (the export worker started ahead) has imported this module: the compare's
    # reference waits for it, so the worker surely exists and has built when the compare stops
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with open(os.environ["AHEAD_TEST_IMPORTS"]) as log:
            if len(log.read().split()) >= 2:
                break
        time.sleep(0.05)
    return np.float32(np.random.rand())


def by_environment():  # weights that depend on the process's thread settings, as a threaded reduction's bits can
    scale = 2.0 if os.environ.get("PJRT_NPROC") else 1.0
    return Target(lambda x: {{"y": x @ (W * scale)}}, args=(X,), name="by_environment", symbolic_batch="b")


def drawing():  # draws a number at run time: not deterministic, stopped before any export
    def fn(x):
        noise = jax.pure_callback(_draw, jax.ShapeDtypeStruct((), np.float32))
        return {{"y": x @ W + noise}}
    return Target(fn, args=(X,), name="drawing")
'''


def _model(tmp_path, monkeypatch) -> tuple[str, object]:
    helper = f"ahead_helper_{uuid.uuid4().hex}"  # new to this process, whatever ran in it before
    (tmp_path / f"{helper}.py").write_text("VALUE = 1\n")
    (tmp_path / "model.py").write_text(MODEL.format(helper=helper))
    log = tmp_path / "imports.log"
    monkeypatch.setenv("AHEAD_TEST_IMPORTS", str(log))
    return str(tmp_path / "model.py"), log


def _children() -> list[int]:
    """This process's live children (zombies are reaped ones' leftovers: none should remain)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


def test_a_target_whose_build_imports_a_module_has_its_builder_started_after_the_signature(tmp_path, monkeypatch):
    """ONNX's jax2onnx route needs the built target, XLA the handed module: one worker builds, started after
    the signature (it imported the model before the exports were planned), and both rows pass. Only this process
    and that worker import the model."""
    model, log = _model(tmp_path, monkeypatch)
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))  # a loaded machine must not change the plan
    seen: list[str] = []
    results = compare(f"{model}:target", backends=["xla", "onnx"], out_dir=tmp_path / "out", trials=1, bench=None,
                      progress=seen.append)
    for name in ("xla", "onnx"):
        assert results.backends[name].status is Status.OK and results.backends[name].parity.passed, name
    export_line = next(line for line in seen if line.startswith("export with"))
    assert STARTED in export_line, seen
    from benchmarks.compare_time import kind_of

    assert kind_of(export_line) == "export"  # the phase is counted as the exports', not as the target's build
    pids = set(log.read_text().split())
    assert pids - {str(os.getpid())} and len(pids) == 2, pids


def test_with_paired_workers_the_reference_worker_makes_the_exports_that_need_the_built_target(tmp_path, monkeypatch):
    """Timed in paired mode, the reference's worker has built the target as it started: ONNX's export is made there
    (the export step says so, its cold start lists it), and only this process and that worker import the model:
    no export worker builds it again. Both rows pass, and no child is left."""
    from multiexport.measure.bench import BenchConfig

    model, log = _model(tmp_path, monkeypatch)
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    before = set(_children())
    seen: list[str] = []
    results = compare(f"{model}:target", backends=["xla", "onnx"], out_dir=tmp_path / "out", trials=1,
                      bench=BenchConfig(warmup_iters=1, min_iters=5, bench_time=0.02), progress=seen.append)
    for name in ("xla", "onnx"):
        assert results.backends[name].status is Status.OK and results.backends[name].parity.passed, name
    assert results.pairing is not None and results.pairing.mode == "paired", results.pairing
    export_line = next(line for line in seen if line.startswith("export with"))
    assert "made in the reference's paired worker" in export_line and STARTED not in export_line, export_line
    assert "onnx" in results.reference.bench.extra["exported_before_load"], results.reference.bench.extra
    from multiexport.report.tables import cold_rows

    assert cold_rows(results)[0][0] == "jax (reference, after exports in its process)"  # its memory says so
    assert len(set(log.read_text().split())) == 2  # this process and the reference's worker
    assert set(_children()) - before == set()


def test_an_export_that_changes_the_target_in_the_reference_worker_leaves_the_timing_to_a_fresh_one(
        tmp_path, monkeypatch):
    """ONNX's converter changes the target's weights in place after its export in the reference's worker: its
    artifact still passes (made before the change), the compare says the reference got a fresh worker and why, and
    the reference's cold start is that fresh worker's (nothing exported in it), so no figure times a changed model."""
    from multiexport.exporting.registry import register, unregister
    from multiexport.measure.bench import BenchConfig

    model, log = _model(tmp_path, monkeypatch)
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    register("onnx_mutates_target", "tests.fault_backends:TargetMutatingOnnx")
    try:
        seen: list[str] = []
        results = compare(f"{model}:target", backends=["xla", "onnx_mutates_target"], out_dir=tmp_path / "out",
                          trials=1, bench=BenchConfig(warmup_iters=1, min_iters=5, bench_time=0.02),
                          progress=seen.append)
    finally:
        unregister("onnx_mutates_target")
    assert "made in the reference's paired worker" in next(line for line in seen if line.startswith("export with"))
    assert any("a fresh paired worker for jax.jit, since an export there changed the target" in line
               for line in seen), seen
    for name in ("xla", "onnx_mutates_target"):
        assert results.backends[name].status is Status.OK and results.backends[name].parity.passed, name
    assert results.pairing is not None and results.pairing.mode == "paired"
    assert "exported_before_load" not in results.reference.bench.extra, results.reference.bench.extra
    assert "changed the target it would time" in results.reference.bench.extra["fresh_worker_since"]
    assert len(set(log.read_text().split())) == 3  # this process, the changed worker, the fresh one


def test_a_target_that_builds_otherwise_under_the_timed_workers_settings_is_exported_again_not_judged(
        tmp_path, monkeypatch):
    """The reference's worker runs with the timed runtimes' thread settings: a target whose weights depend on them
    builds there with other weights than in the compare. Its exports made there do not match the compare's
    fingerprint, and are made again in a worker of their own (the compare's settings) instead of being judged a
    nondeterministic target: both rows pass."""
    from multiexport.measure.bench import BenchConfig

    model, _ = _model(tmp_path, monkeypatch)
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    monkeypatch.delenv("PJRT_NPROC", raising=False)
    seen: list[str] = []
    results = compare(f"{model}:by_environment", backends=["xla", "onnx"], out_dir=tmp_path / "out", trials=1,
                      bench=BenchConfig(warmup_iters=1, min_iters=5, bench_time=0.02), progress=seen.append)
    assert "made in the reference's paired worker" in next(line for line in seen if line.startswith("export with"))
    again = [step.what for step in results.timeline if step.what.endswith("export in a worker process")]
    assert "onnx: export in a worker process" in again, again  # marked: an export made again alone after the phase
    for name in ("xla", "onnx"):
        assert results.backends[name].status is Status.OK and results.backends[name].parity.passed, name


def test_a_compare_stopped_before_its_exports_leaves_no_worker_started_ahead(tmp_path, monkeypatch):
    """A target that draws random numbers at run time stops after its determinism check: the export worker started
    before the reference (its reference waits until that worker has imported the model) is ended with it, as every
    row says why."""
    model, log = _model(tmp_path, monkeypatch)
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    before = set(_children())
    results = compare(f"{model}:drawing", backends=["xla", "onnx"], out_dir=tmp_path / "out", trials=1, bench=None)
    assert all(row.status is Status.NONDETERMINISTIC_TARGET for row in results.backends.values())
    workers = set(log.read_text().split()) - {str(os.getpid())}
    assert len(workers) == 1, workers  # the worker started ahead built the model
    assert set(_children()) - before == set()
    with pytest.raises(ProcessLookupError):
        os.kill(int(workers.pop()), 0)


def _ctx(spec="multiexport.examples:seed", imported=frozenset({"keras_hub", "tensorflow"}), threads=2,
         backends=("xla", "onnx", "iree")):
    return types.SimpleNamespace(spec=spec, target_modules=imported, threads=threads,
                                 config=dataclasses.replace(CompareConfig(), backends=backends))


def _planned():
    """What `prepare` hands the session before the reference: the export plan's inputs, no outputs."""
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    sig = build_signature(Target(lambda x: {"y": x @ w}, args=(np.ones((2, 4), np.float32),), name="m",
                                 symbolic_batch="b"))
    return types.SimpleNamespace(sig=sig, trials=[types.SimpleNamespace(feed=sig.example_feed(), dims={"b": 2})],
                                 bench_feeds=[], calibration=None,
                                 device=types.SimpleNamespace(chosen="cpu", excluded={}, tpu=False))


def test_a_worker_is_started_ahead_only_where_an_export_needs_the_built_target_and_memory_holds_the_plan(monkeypatch):
    """Never without a TARGET string, an import by the build, a second core, or an export that needs the built
    target (XLA and IREE export from the handed modules; an ONNX whose converter is missing exports nothing);
    one export group (SavedModel then LiteRT, TensorFlow
    imported by the target) needs one export at a time, three groups two; below that, none."""
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    planned = _planned()
    assert start_ahead(_ctx(spec=None), planned, {}) is None  # exports in this process
    assert start_ahead(_ctx(imported=frozenset()), planned, {}) is None  # its build imported nothing
    assert start_ahead(_ctx(threads=1), planned, {}) is None  # no idle core to build on
    assert start_ahead(_ctx(backends=("xla", "iree")), planned, {}) is None  # nothing needs the built target
    from multiexport.exporting.registry import register, unregister

    register("onnx_missing", "tests.fault_backends:MissingOnnx")
    try:  # ONNX's jax2onnx route needs it, but its converter is not installed here: no export will
        assert start_ahead(_ctx(backends=("xla", "onnx_missing")), planned, {}) is None
    finally:
        unregister("onnx_missing")
    one_group = start_ahead(_ctx(backends=("savedmodel", "litert")), planned, {})
    assert one_group is not None and one_group.pid is not None
    one_group.close()
    need = max(plan_for(_ctx(), planned, {}).export_need.values())
    monkeypatch.setenv(AVAILABLE_ENV, str(int(1.5 * need)))  # one export at a time, as the memory plan counts
    assert start_ahead(_ctx(), planned, {}) is None
    monkeypatch.setenv(AVAILABLE_ENV, str(int(2.5 * need)))
    ahead = start_ahead(_ctx(), planned, {})
    assert ahead is not None
    ahead.close()


def test_the_memory_the_ahead_worker_holds_counts_as_available_to_the_plan_that_budgets_it(monkeypatch):
    """The plan after the reference counts that worker as one of its export workers: measured memory, which the
    worker's build has already taken, gets its resident size back (a tight plan refused a row the worker was
    exporting); a figure the user gives is taken as given."""
    from multiexport.comparison import exports
    from multiexport.comparison.memory_plan import MEASURED, rss_of
    from multiexport.run.export_pool import AheadWorker

    ahead = AheadWorker("multiexport.examples:seed")
    try:
        assert ahead.pid is not None and rss_of(ahead.pid) > 0
        monkeypatch.setattr(exports, "available_now", lambda: (4 * 2**30, MEASURED))
        measured = plan_for(_ctx(), _planned(), {}, ahead).available
        assert measured is not None and measured > 4 * 2**30
        monkeypatch.setattr(exports, "available_now", lambda: (4 * 2**30, f"${AVAILABLE_ENV}"))
        assert plan_for(_ctx(), _planned(), {}, ahead).available == 4 * 2**30
    finally:
        ahead.close()


def test_the_reference_worker_is_chosen_over_a_new_one_only_when_it_builds_this_target_and_the_weights_are_small(
        monkeypatch):
    """A live reference worker of the same TARGET makes the exports (`ReferenceExports`: no process of its own);
    one of another TARGET, or weights over the limit (what the converters leave in it stays through the timed
    phase), leave them to a worker started ahead, as without paired workers."""
    from multiexport.comparison import ahead as ahead_module
    from multiexport.run.export_pool import AheadWorker
    from multiexport.run.servers import ReferenceExports, Servers

    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    servers = Servers("cpu", 1, 600)
    try:
        servers.spawn(ReferenceExports.NAME, ["reference", "multiexport.examples:seed"], None)
        chosen = start_ahead(_ctx(), _planned(), {}, servers)
        assert isinstance(chosen, ReferenceExports) and chosen.pid is None
        for other in (_ctx(spec="multiexport.examples:seed_bar"), None):
            started = start_ahead(other or _ctx(), _planned(), {}, servers if other else None)
            assert isinstance(started, AheadWorker)
            started.close()
        monkeypatch.setattr(ahead_module, "REFERENCE_EXPORTS_LIMIT_BYTES", 0)
        started = start_ahead(_ctx(), _planned(), {}, servers)
        assert isinstance(started, AheadWorker)
        started.close()
    finally:
        servers.close()
