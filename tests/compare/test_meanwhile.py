"""The rest of the reference (other trials, rounding floor) runs beside the export workers where memory allows."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.comparison.meanwhile import MEANWHILE_NICE, MEANWHILE_WEIGHTS, reference_meanwhile, yield_to_exports
from multiexport.comparison.memory_plan import GIB, Footprints, plan_memory
from multiexport.results import Status


def _plan(weights: int, available: int | None, groups=(("xla",), ("iree",)), early=None):
    return plan_memory(weights, available, 0, [list(g) for g in groups], dict(early or {}),
                       {g[0]: Footprints() for g in groups})


def test_the_reference_runs_beside_the_exports_only_with_workers_and_room_for_its_copies():
    workers, here = SimpleNamespace(spec="pkg.mod:target"), SimpleNamespace(spec=None)
    weights = 1 << 30
    roomy = _plan(weights, 32 * GIB)  # two exports of 3x + 1 GiB, and plenty left
    assert roomy.exports_at_once == 2 and reference_meanwhile(workers, roomy)
    assert not reference_meanwhile(here, roomy)  # the exports run in this process: the reference first
    assert reference_meanwhile(workers, _plan(weights, None))  # memory unknown: nothing limited, as the plan
    # room for the two exports, but not for the reference's copies beside them
    exports = 2 * (3 * weights + GIB)
    tight = _plan(weights, exports + int(MEANWHILE_WEIGHTS * weights) - 1)
    assert tight.exports_at_once == 2 and not tight.close_early and not reference_meanwhile(workers, tight)
    assert reference_meanwhile(workers, _plan(weights, exports + int(MEANWHILE_WEIGHTS * weights)))
    # the plan closed the early workers, or refused a backend: memory is tight, nothing more beside the exports
    closed = _plan(weights, 5 * GIB, early={"jax": 1})  # the reference worker still to grow
    assert closed.close_early and not reference_meanwhile(workers, closed)
    refused = _plan(weights, 3 * GIB)
    assert refused.refused and not reference_meanwhile(workers, refused)


def _steps(results) -> list[str]:
    return [step.what for step in results.timeline]


@pytest.mark.subprocess
def test_with_export_workers_the_other_trials_and_rounding_run_inside_the_export_step(tmp_path):
    """A TARGET string (export workers): the first trial's reference is its own step before the exports; the
    other trials and the rounding floor are computed while the workers export, inside the export step (which
    says so), and nothing of theirs is lost: every trial is evidence and the rounding floor is recorded."""
    seen: list[str] = []
    results = compare(examples.mlp(), backends=["xla"], out_dir=tmp_path, trials=3, bench=None,
                      target_spec="multiexport.examples:mlp", progress=seen.append)
    row = results.backends["xla"]
    assert row.status is Status.OK, row.reason
    steps = _steps(results)
    first = steps.index("reference outputs (jax.jit) for the first trial, and its determinism check")
    export = next(i for i, what in enumerate(steps) if what.startswith("export with xla"))
    others = len(results.trials) - 1  # the example, then the seeded trials
    assert others >= 2 and first < export, steps
    assert f"meanwhile this process runs jax.jit on the other {others} trial(s)" in steps[export], steps
    assert not any(what.startswith(("rounding sensitivity", "reference outputs (jax.jit) for the other"))
                   for what in steps), steps
    assert any(line.startswith("rounding sensitivity of jax.jit") for line in seen), seen  # said, not a step
    assert results.reference.rounding_sensitivity  # measured meanwhile, and kept
    assert row.parity.passed
    assert set(row.parity.trials) == {t.name for t in results.trials}  # every trial checked


@pytest.mark.subprocess
def test_without_export_workers_the_reference_is_finished_before_the_exports(tmp_path):
    """No TARGET string: the exports run in this process, so the reference's steps come first, each its own."""
    results = compare(examples.mlp(), backends=["xla"], out_dir=tmp_path, trials=3, bench=None)
    assert results.backends["xla"].status is Status.OK
    steps = _steps(results)
    rest = steps.index(f"reference outputs (jax.jit) for the other {len(results.trials) - 1} trial(s)")
    rounding = next(i for i, what in enumerate(steps) if what.startswith("rounding sensitivity of jax.jit"))
    export = next(i for i, what in enumerate(steps) if what.startswith("xla: export"))
    assert rest < rounding < export and "meanwhile" not in steps[export]
    assert results.reference.rounding_sensitivity


@pytest.mark.subprocess
def test_a_reference_failure_beside_the_exports_is_raised_not_lost(tmp_path):
    """jax.jit failing on a later trial (a size the function refuses) while the workers export: the compare
    stops with that error after the exports, as it would have before them; no row claims a verdict."""
    source = tmp_path / "late.py"
    source.write_text(textwrap.dedent('''
        import jax.numpy as jnp
        from multiexport.leaves import Target

        def double(x):
            if x.shape[0] == 3:
                raise ValueError("refuses a batch of 3")
            return x * 2.0

        def target():
            return Target(double, args=(jnp.ones((2, 4), jnp.float32),), name="late", symbolic_batch="b")
    '''))
    from multiexport.leaves import load_target

    spec = f"{source}:target"
    with pytest.raises(ValueError, match="refuses a batch of 3"):
        compare(load_target(spec), backends=["xla"], out_dir=tmp_path / "out", trials=1, bench=None,
                target_spec=spec, dim_sizes={"b": [3]})
    assert not (tmp_path / "out" / "results.json").exists() or '"state": "finished"' not in (
        tmp_path / "out" / "results.json").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_the_reference_thread_yields_the_cores_to_the_exports_and_only_that_thread():
    """yield_to_exports lowers the priority of the thread that runs the reference's rest (read back from the
    kernel's record of that thread), not the compare's own thread, which must not run slower after it."""

    def nice_of(tid: int) -> int:
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[16])  # field 19 of stat: nice

    main = threading.get_native_id()
    before = nice_of(main)
    seen = {}

    def work():
        tid = threading.get_native_id()
        seen["before"] = nice_of(tid)
        yield_to_exports()
        seen["after"] = nice_of(tid)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if seen["before"] >= 19:
        pytest.skip("this process already runs at the lowest priority: nothing lower to go to")
    assert seen["after"] == min(19, seen["before"] + MEANWHILE_NICE) > seen["before"]
    assert nice_of(main) == before
