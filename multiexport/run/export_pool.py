"""The export workers' scheduler: process machinery only (what to export, and with which options, is the caller's).

Each worker exports its own jobs in order, then takes from a pool every worker shares, one job at a time,
each by the first worker to reach it (`plan_workers`): nothing waits for a slot, no worker starts (imports,
builds the target) only to queue, and the worker that finishes first takes the most. A worker that dies
takes only the export it was on: the jobs after it that no other worker took come back as `retry`, for the
caller to run again, each alone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from ..errors import InputError, InternalError, present
from ..exporting.outdir import remove_stale
from ..system.piped import Pending
from ..system.process import Outcome, run_command
from .messages import ExportReply, decode
from .workers import (
    AHEAD,
    classify,
    classify_outcome,
    private_tmp,
    start_work_dir,
    worker_command,
    worker_environment,
)


@dataclass(frozen=True)
class WorkerPlan:
    """What one export worker exports.

    own: its group (a stage first, then what builds on it), in order.
    pooled: the exports every worker shares, taken one at a time after `own`, each by the first worker to
        reach it (the others skip it); the same tuple in every plan.
    """

    own: tuple[str, ...]
    pooled: tuple[str, ...] = ()


def plan_workers(groups: Sequence[Sequence[str]], jobs: int) -> list[WorkerPlan]:
    """One worker per slot: the first `jobs` groups are one worker's each, the rest a pool every worker
    takes from once its own group is done (groups come longest first: a chain starts early)."""
    slots = max(jobs, 1)
    pooled = tuple(name for group in groups[slots:] for name in group)
    return [WorkerPlan(tuple(group), pooled) for group in groups[:slots]]


@dataclass(frozen=True)
class ExportJob:
    """One export as a worker is told it: its name, the artifact directory it writes, its options' JSON."""

    name: str
    out: Path
    options: str


@dataclass(frozen=True)
class JobOutcome:
    """What a worker left for one job: its export.json, or its failure (category, reason); neither means the
    job must run again alone (its worker died before it, after another export in the same process).
    by_ahead: made by the worker started before the plan (`BuildingWorker`), not by a worker of its own."""

    reply: ExportReply | None = None
    failure: tuple[str, str] | None = None
    by_ahead: bool = False


class BuildingWorker(Protocol):
    """A process that has built the target (or is building it) before the exports were planned, run as the
    first export worker: `AheadWorker`, or the reference's paired worker (`servers.ReferenceExports`).

    spec: the TARGET it builds. pid: its process id where its memory is its own (None: counted elsewhere).
    role: what it is, for the export step's progress line.
    own_environment: its process runs under settings an export worker's does not have (the reference's: the
        timed runtimes' thread count), so a target built there may differ where a build depends on them.
    """

    spec: str
    pid: int | None
    role: str
    own_environment: bool

    def run(self, args: Sequence[str], timeout: float) -> Outcome | None:
        """Export with `args`, once: how it ended, or None when it cannot (a fresh worker runs them instead)."""

    def close(self) -> None:
        """End it if it was not run (nothing happens if it was)."""


class AheadWorker:
    """An export worker started before its jobs are planned: it builds the target at once (`worker export
    --ahead TARGET`), then waits for its command line on stdin (`export_in_workers` gives it the first
    worker's). Started before the compare's first reference (comparison/ahead.py), it builds while the
    compare computes that reference and writes the handoff: the worker that builds the target starts its
    exports that much sooner. `close` ends it if no plan used it.

    spec: the TARGET it builds. pid: its process id (None when it could not start). role: as said.
    """

    role = "the worker that needs the built target started at the signature"
    own_environment = False

    def __init__(self, spec: str):
        self.spec = spec
        self._tmp = contextlib.ExitStack()
        try:
            tmp = self._tmp.enter_context(private_tmp())
            self._pending: Pending | None = Pending(worker_command("export", AHEAD, spec),
                                                    env=worker_environment(tmp))
        except BaseException:  # a signal meanwhile: its $TMPDIR goes too
            self._tmp.close()
            raise
        proc = self._pending.proc
        self.pid = proc.pid if proc is not None else None

    def run(self, args: Sequence[str], timeout: float) -> Outcome:
        """Run the worker with `args` (as `worker_command` would be given them), once."""
        pending = present(self._pending, "an ahead worker runs once")
        self._pending = None
        try:
            return pending.finish(json.dumps(list(args)), timeout)
        finally:
            self._tmp.close()

    def close(self) -> None:
        """End it unused (nothing happens if it ran)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        self._tmp.close()


def export_in_workers(spec: str, out: Path, owns: Sequence[Sequence[ExportJob]], pooled: Sequence[ExportJob],
                      slots: int, timeout: float, expected: Path | None = None,
                      handoff: Path | None = None, ahead: BuildingWorker | None = None) -> dict[str, JobOutcome]:
    """Run one worker per non-empty `owns` entry (or per entry, when there is a pool to take from), `slots`
    at a time, each building `spec`; {name: what its worker left}. `timeout` is per export: a worker gets it
    once per export it may run. A dead worker's staging directories in `out` are removed. expected: an .npz
    of jax.jit's outputs at the target's example, given to every worker (`worker --expected`). handoff: the
    compare's handed target (exporting/handoff.py), which every worker exports from where it can. ahead: a
    worker of `spec` started earlier (`BuildingWorker`), run as the first worker (whose group builds the
    target), closed if there is none."""
    if ahead is not None and ahead.spec != spec:
        raise InternalError(f"the ahead export worker builds {ahead.spec!r}, expected {spec!r}")
    work = {job.name: start_work_dir("export") for jobs in [*owns, pooled] for job in jobs}
    launch = [(k, list(jobs)) for k, jobs in enumerate(owns) if jobs or pooled]
    if not launch or launch[0][0] != 0:
        if ahead is not None:
            ahead.close()
            ahead = None
    if not launch:
        return {}
    limit = timeout * (max(len(jobs) for _, jobs in launch) + len(pooled))
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(slots, len(launch)))) as pool:
            ended = list(pool.map(lambda item: _run_worker(spec, out, work, item[0], item[1], list(pooled), limit,
                                                           expected, handoff, ahead if item[0] == 0 else None),
                                  launch))
        if any(outcome.returncode != 0 for outcome, _ in ended):
            remove_stale(out)  # a dead worker's staging directories and locks in the output directory
        claims = {job.name: _claimed_by(work[job.name]) for job in pooled}  # read once, every worker ended
        left: dict[str, JobOutcome] = {}
        for (k, jobs), (outcome, by_ahead) in zip(launch, ended):
            taken = [*jobs, *(j for j in pooled if claims[j.name] == k)]
            left.update(_collect(taken, work, outcome, limit, by_ahead))
        left.update({j.name: JobOutcome() for j in pooled if claims[j.name] is None})  # no worker got that far
        return left
    except BaseException:  # a signal stopped the wait: the workers are gone, and so are their directories
        remove_stale(out)
        raise
    finally:
        if ahead is not None:
            ahead.close()  # ran (nothing to do), or never reached (the wait stopped first)
        for path in work.values():
            shutil.rmtree(path, ignore_errors=True)


def _run_worker(spec: str, out: Path, work: dict[str, Path], k: int, jobs: list[ExportJob], pooled: list[ExportJob],
                timeout: float, expected: Path | None = None, handoff: Path | None = None,
                ahead: BuildingWorker | None = None) -> tuple[Outcome, bool]:
    """Worker `k`: its own jobs in order, then each pooled job it claims first (in `ahead` when given and able);
    how it ended, and whether `ahead` ran them."""
    first, *rest = [*jobs, *pooled]
    args = ["export", spec, first.name, str(first.out), str(work[first.name]), "--options", first.options]
    for job in rest:
        args += ["--then", job.name, str(job.out), str(work[job.name]), job.options]
    if pooled:
        args += ["--pool", str(len(pooled)), "--claim-as", str(k)]
    if expected is not None:
        args += ["--expected", str(expected)]
    if handoff is not None:
        args += ["--handoff", str(handoff)]
    if ahead is not None and (outcome := ahead.run(args, timeout)) is not None:
        return outcome, True
    with private_tmp() as tmp:
        return run_command(worker_command(*args), timeout=timeout, env=worker_environment(tmp)), False


def _claimed_by(work: Path) -> int | None:
    """Which worker took a pooled job (its `claim` file, written by that worker), or None."""
    try:
        return int((work / "claim").read_text().strip())
    except (OSError, ValueError):
        return None


def _collect(taken: list[ExportJob], work: dict[str, Path], outcome: Outcome, timeout: float,
             by_ahead: bool = False) -> dict[str, JobOutcome]:
    """What one worker left for the jobs it took, in the order it took them: a job after the one it died on,
    or the one it died on after another export, comes back empty (to run again alone)."""
    reached, left = True, {}
    for i, job in enumerate(taken):
        reply, unreadable = _read(work[job.name] / "export.json")
        failure = None
        if unreadable is not None:  # written, so the export ended: what it says cannot be used (a bug)
            failure = ("internal-error", f"the export worker's result for {job.name} does not decode: {unreadable}")
        elif reply is None and (work[job.name] / "error.json").is_file():
            failure = classify(outcome, work[job.name], timeout)  # its own clean error report
        elif reply is None and reached:
            reached = False  # the worker ended on this export: the ones after it never ran there
            failure = classify_outcome(outcome, timeout) or (
                "export-failed", f"the worker exited with code 0 before reporting a result for {job.name} "
                                 "(something in the process ended it early: the target's code calling exit from "
                                 "native code?)")
            if i > 0 and failure[0] != "internal-error":
                failure = None  # it died after another export in the same process: judge it alone
        left[job.name] = JobOutcome(reply, failure, by_ahead)
    return left


def _read(path: Path) -> tuple[ExportReply | None, str | None]:
    """An export worker's export.json: (the reply, None); (None, None) when it wrote none; (None, why) when it
    wrote one that cannot be read or decoded (an export that ended, whose result must not pass for a crash)."""
    if not path.is_file():
        return None, None
    try:
        return decode(ExportReply, path.read_text(), str(path)), None
    except (OSError, InputError) as exc:
        return None, " ".join(str(exc).split())[:500]
