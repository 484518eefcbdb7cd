"""run/export_worker.py's shared exports (a pooled export is done by the one worker that claims it first) and what the compare
hands its export workers."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

from multiexport.run.export_worker import _claim


def _race(out, token, barrier, results):
    barrier.wait()
    results.put((token, _claim(out, token)))


def test_of_workers_reaching_a_shared_export_at_once_exactly_one_claims_it(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(tmp_path, str(k), barrier, results)) for k in range(4)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    winners = [token for token, won in got.items() if won]
    assert len(winners) == 1 and (tmp_path / "claim").read_text() == winners[0]
    assert _claim(tmp_path, "late") is False and (tmp_path / "claim").read_text() == winners[0]


def test_an_exports_cpu_seconds_count_the_processes_it_waited_for():
    """iree-compile runs in a child of the export worker: its CPU is the export's too (the row read 0.13-0.28 CPU s
    where iree-compile alone used 0.70-0.84)."""
    import subprocess
    import sys
    import time

    from multiexport.run.export_worker import _cpu_with_children

    before, own = _cpu_with_children(), time.process_time()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"],
                   check=True, timeout=120)
    assert _cpu_with_children() - before >= 0.45
    assert time.process_time() - own < 0.3  # the child's CPU, not this process's own


def test_a_pooled_export_is_claimed_with_what_builds_on_it_so_its_stage_is_reused(tmp_path):
    """Two real export workers, the ONNX -> OpenVINO chain in the pool: the worker that claims ONNX claims OpenVINO
    with it, so OpenVINO starts from the ONNX file that worker wrote. Claimed one by one, the other worker (free
    first, its own IREE export done while ONNX still converts) took OpenVINO and converted the stage again."""
    import json

    import pytest

    from multiexport.exporting.manifest import Manifest
    from multiexport.exporting.options import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.run.export_pool import ExportJob, export_in_workers
    from multiexport.run.messages import encode

    if not all(get_backend(n).available().ok for n in ("onnx", "openvino", "iree")):
        pytest.skip("onnx, openvino or iree unavailable")
    out = tmp_path / "out"
    out.mkdir()

    def job(name, **options):
        return ExportJob(name, out / name, encode(ExportOptions(check_load=False, **options)))

    owns = [[job("xla")], [job("iree")]]  # the xla worker reaches the pool first, the iree one while ONNX converts
    pooled = [job("onnx"), job("openvino", stage_artifact=str(out / "onnx"))]
    left = export_in_workers("multiexport.examples:seed", out, owns, pooled, slots=2, timeout=600)
    assert all(outcome.reply is not None for outcome in left.values()), left
    stage = Manifest.read(out / "openvino").format["stage"]
    assert stage["made"].startswith("reused"), stage
    assert json.loads((out / "openvino" / "manifest.json").read_text())["backend"] == "openvino"


def test_export_workers_check_a_symbolic_artifact_against_the_outputs_the_compare_hands_them(tmp_path):
    """`--expected`: the export worker's symbolic check takes jax.jit's outputs at the example from the compare
    (its reference on the first trial) instead of compiling the target again. Handed outputs that are off by a
    sign fail ONNX's symbolic model, so it falls back to fixed sizes: the worker judged by the file, not by a
    compile of its own; handed the true outputs, the symbolic model stands."""
    import pytest

    from multiexport.exporting.manifest import Manifest
    from multiexport.exporting.options import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.files.npz import save_npz
    from multiexport.leaves import build_signature, load_target
    from multiexport.run.export_pool import ExportJob, export_in_workers
    from multiexport.run.messages import encode

    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    spec = "multiexport.examples:mlp_dynamic"
    target = load_target(spec)
    sig = build_signature(target)
    true = dict(zip([leaf.name for leaf in sig.outputs], sig.flat_function(target.fn)(*sig.examples)))
    made = {}
    for kind, outputs in (("true", true), ("negated", {n: -np.asarray(v) for n, v in true.items()})):
        out = tmp_path / kind
        out.mkdir()
        expected = save_npz(tmp_path / f"{kind}.npz", outputs)
        job = ExportJob("onnx", out / "onnx", encode(ExportOptions(fallback_sizes={"b": [1, 2]})))
        left = export_in_workers(spec, out, [[job]], [], slots=1, timeout=600, expected=expected)
        assert left["onnx"].reply is not None, left
        made[kind] = Manifest.read(out / "onnx")
    assert made["true"].symbolic_dims == ["b"] and "static_fallback" not in made["true"].format
    fallback = made["negated"].format["static_fallback"]
    assert "computes a wrong result" in fallback["why"] and "max err" in fallback["why"], fallback


MODEL = '''
import os
import numpy as np
import pytest
from multiexport import Target

with open(os.environ["HANDOFF_TEST_IMPORTS"], "a") as log:  # every process that imports this module says so
    log.write(f"{os.getpid()}\\n")

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)


def target():
    return Target(lambda x: {"y": x @ W}, args=(np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),),
                  name="handoff_model", symbolic_batch="b")


def flattening():  # reshape(b, -1) of a symbolic batch: a dynamic_reshape, which IREE compiles at fixed sizes only
    return Target(lambda x: {"y": x.reshape(x.shape[0], -1) @ np.ones((8, 3), np.float32)},
                  args=(np.linspace(0, 1, 16, dtype=np.float32).reshape(2, 2, 4),), name="flattening",
                  symbolic_batch="b")
'''


def test_an_export_worker_given_the_handed_target_builds_it_only_for_an_export_that_needs_the_function(
        tmp_path, monkeypatch):
    """XLA exports from the compare's module: the worker never imports the target's module. ONNX's jax2onnx route
    traces the function: the worker builds the target then, once, and both artifacts are made. A handoff that
    does not read is as if none were given."""
    import pytest

    from multiexport.exporting.handoff import write_handoff
    from multiexport.exporting.manifest import Manifest
    from multiexport.exporting.options import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature, load_target
    from multiexport.run.export_pool import ExportJob, export_in_workers
    from multiexport.run.messages import encode

    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    (tmp_path / "model.py").write_text(MODEL)
    imports = tmp_path / "imports.log"
    monkeypatch.setenv("HANDOFF_TEST_IMPORTS", str(imports))
    spec = f"{tmp_path / 'model.py'}:target"
    target = load_target(spec)  # the compare's own build
    sig = build_signature(target)
    fingerprint = sig.fingerprint(target.fn)
    assert write_handoff(target.fn, sig, fingerprint, (tmp_path / "handoff").resolve())

    def export(names, out, handoff):
        out.mkdir()
        imports.write_text("")
        jobs = [ExportJob(name, out / name, encode(ExportOptions())) for name in names]
        left = export_in_workers(spec, out, [jobs], [], slots=1, timeout=600, handoff=handoff)
        assert all(left[name].reply is not None for name in names), left
        return left, [line for line in imports.read_text().split() if line]

    left, imported = export(["xla"], tmp_path / "a", tmp_path / "handoff")
    assert imported == [] and left["xla"].reply.fingerprint == fingerprint
    assert left["xla"].reply.target_load is None
    left, imported = export(["xla", "onnx"], tmp_path / "b", tmp_path / "handoff")
    assert len(imported) == 1 and left["onnx"].reply.fingerprint == fingerprint  # its own build, the same target
    assert left["onnx"].reply.target_load is not None and Manifest.read(tmp_path / "b" / "onnx").backend == "onnx"
    # once built, the worker exports from the built target: an export that needs it would be tried twice
    left, imported = export(["onnx", "xla"], tmp_path / "b2", tmp_path / "handoff")
    assert len(imported) == 1 and left["xla"].reply.target_load is not None
    if get_backend("iree").available().ok:  # the static-size fallback needs the function at each size: built
        fixed = f"{tmp_path / 'model.py'}:flattening"
        flat_target = load_target(fixed)
        flat_sig = build_signature(flat_target)
        assert write_handoff(flat_target.fn, flat_sig, flat_sig.fingerprint(flat_target.fn), tmp_path / "flat")
        (tmp_path / "d").mkdir()
        imports.write_text("")
        job = ExportJob("iree", tmp_path / "d" / "iree", encode(ExportOptions(fallback_sizes={"b": [1, 2]})))
        left = export_in_workers(fixed, tmp_path / "d", [[job]], [], slots=1, timeout=600, handoff=tmp_path / "flat")
        assert left["iree"].reply is not None, left
        assert Manifest.read(tmp_path / "d" / "iree").format["static_fallback"]["models"], left
        assert len([line for line in imports.read_text().split() if line]) == 1
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "modules.json").write_text("{")
    left, imported = export(["xla"], tmp_path / "c", tmp_path / "broken")
    assert len(imported) == 1 and left["xla"].reply.fingerprint == fingerprint


AHEAD_MODEL = MODEL + '''

def failing_in_workers():  # builds in the compare's process, fails in a worker's
    if os.environ.get("AHEAD_TEST_FAIL"):
        raise RuntimeError("the factory fails in this process")
    return target()
'''


def _imported(log) -> list[str]:
    return [line for line in log.read_text().split() if line] if log.exists() else []


def test_an_export_worker_started_ahead_builds_the_target_before_its_jobs_and_exports_them_from_it(
        tmp_path, monkeypatch):
    """`AheadWorker`: the worker imports the target's module and builds it before it is told what to export
    (the module's import is logged while no job exists yet); then it runs the first worker's jobs from that
    build (no second import, both exports from the built target: the same fingerprint as the compare's), while
    the second worker exports from the handoff without building. Unused, it is ended and reaped."""
    import time

    import pytest

    from multiexport.exporting.handoff import write_handoff
    from multiexport.exporting.options import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature, load_target
    from multiexport.run.export_pool import AheadWorker, ExportJob, export_in_workers
    from multiexport.run.messages import encode

    if not (get_backend("onnx").available().ok and get_backend("iree").available().ok):
        pytest.skip("onnx or iree unavailable")
    (tmp_path / "model.py").write_text(AHEAD_MODEL)
    imports = tmp_path / "imports.log"
    monkeypatch.setenv("HANDOFF_TEST_IMPORTS", str(imports))
    spec = f"{tmp_path / 'model.py'}:target"
    target = load_target(spec)
    sig = build_signature(target)
    fingerprint = sig.fingerprint(target.fn)
    assert write_handoff(target.fn, sig, fingerprint, (tmp_path / "handoff").resolve())
    imports.write_text("")
    ahead = AheadWorker(spec)
    deadline = time.monotonic() + 300
    while not _imported(imports) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_imported(imports)) == 1  # built, with no job given yet
    out = tmp_path / "out"
    out.mkdir()
    owns = [[ExportJob("onnx", out / "onnx", encode(ExportOptions())), ExportJob("xla", out / "xla", encode(ExportOptions()))],
            [ExportJob("iree", out / "iree", encode(ExportOptions()))]]
    left = export_in_workers(spec, out, owns, [], slots=2, timeout=600, handoff=tmp_path / "handoff", ahead=ahead)
    assert all(outcome.reply is not None and outcome.reply.fingerprint == fingerprint for outcome in left.values()), left
    assert len(_imported(imports)) == 1  # the ahead worker's build served its jobs; the other worker never built
    assert left["onnx"].reply.target_load is not None and left["xla"].reply.target_load is not None
    assert left["iree"].reply.target_load is None  # exported from the handed module
    imports.write_text("")
    unused = AheadWorker(spec)
    deadline = time.monotonic() + 300
    while not _imported(imports) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(_imported(imports)[0])
    unused.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_an_ahead_worker_whose_build_fails_exports_what_the_handoff_serves_and_fails_the_rest_with_why(
        tmp_path, monkeypatch):
    """The target builds in the compare but not in the worker: as in a worker that never built ahead, the export
    that needs the function fails with the factory's own error, and the one the handed module serves is made."""
    import pytest

    from multiexport.exporting.handoff import write_handoff
    from multiexport.exporting.options import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature, load_target
    from multiexport.run.export_pool import AheadWorker, ExportJob, export_in_workers
    from multiexport.run.messages import encode

    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    (tmp_path / "model.py").write_text(AHEAD_MODEL)
    monkeypatch.setenv("HANDOFF_TEST_IMPORTS", str(tmp_path / "imports.log"))
    spec = f"{tmp_path / 'model.py'}:failing_in_workers"
    target = load_target(spec)
    sig = build_signature(target)
    assert write_handoff(target.fn, sig, sig.fingerprint(target.fn), (tmp_path / "handoff").resolve())
    monkeypatch.setenv("AHEAD_TEST_FAIL", "1")  # for the worker started now
    ahead = AheadWorker(spec)
    out = tmp_path / "out"
    out.mkdir()
    jobs = [ExportJob("xla", out / "xla", encode(ExportOptions())), ExportJob("onnx", out / "onnx", encode(ExportOptions()))]
    left = export_in_workers(spec, out, [jobs], [], slots=1, timeout=600, handoff=tmp_path / "handoff", ahead=ahead)
    assert left["xla"].reply is not None and left["xla"].reply.target_load is None, left
    assert left["onnx"].reply is None and "the factory fails in this process" in left["onnx"].failure[1], left


def test_an_ahead_worker_no_launched_worker_takes_is_ended_and_the_others_export_as_planned(tmp_path, monkeypatch):
    """The first plan has nothing to export (every export of it was refused or unavailable): the worker started
    ahead for it is ended, not left waiting on its stdin, and the other plan's worker exports."""
    import time

    from multiexport.exporting.options import ExportOptions
    from multiexport.run.export_pool import AheadWorker, ExportJob, export_in_workers
    from multiexport.run.messages import encode

    (tmp_path / "model.py").write_text(AHEAD_MODEL)
    imports = tmp_path / "imports.log"
    monkeypatch.setenv("HANDOFF_TEST_IMPORTS", str(imports))
    spec = f"{tmp_path / 'model.py'}:target"
    ahead = AheadWorker(spec)
    deadline = time.monotonic() + 300
    while not _imported(imports) and time.monotonic() < deadline:
        time.sleep(0.05)
    out = tmp_path / "out"
    out.mkdir()
    left = export_in_workers(spec, out, [[], [ExportJob("xla", out / "xla", encode(ExportOptions()))]], [], slots=2,
                             timeout=600, ahead=ahead)
    assert left["xla"].reply is not None, left
    assert len(_imported(imports)) == 2  # the ahead worker's build, then the second plan's own worker's
    with pytest.raises(ProcessLookupError):
        os.kill(ahead.pid, 0)
