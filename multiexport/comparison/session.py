"""One compare run, stage by stage (`run_compare`), with results written however it ends.

Stages: claim the output directory; the device plan and `prepare` (signature, trials, the jax.jit
reference with its determinism check and the trials that are no evidence); the exports (overlapping
workers; in paired mode each runner's worker starts, and imports its runtime, as soon as the compare
starts, and reads its artifact only when asked to load); the timing plan; then, one at a time so no two
timed loops share the machine, each runner's timed load, the reference's benchmark and each backend's
run and verdict; the paired rounds; results and reports, always, also when a signal stops the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import USAGE_EXIT, Interrupted, MultiexportError
from ..exporting.precision import split_variant
from ..files.paths import safe_component
from ..results import BackendResult, Reference, Results, SignatureData, Status, TrialInfo
from ..results.schema import from_data
from ..system.process import stop_requested
from ..system.timing_lock import MachineLock, machine_share
from . import exports, timing
from .check import check_row
from .prepare import plan_devices, prepare
from .stages import Context, Prepared, Rows, Timing, Workers

if TYPE_CHECKING:
    from ..leaves import Target
    from ..measure.timeline import Timeline
    from ..results import BenchResult, Pairing
    from ..run.devices import DevicePlan
    from .config import CompareConfig
    from .timing import EarlyWorkers


def run_compare(target: Target, config: CompareConfig, spec: str | None, progress: Callable[[str], None],
                early: EarlyWorkers | None = None, report: Callable[[Results, Path], object] | None = None,
                timeline: Timeline | None = None) -> Results:
    """Every stage of one compare of `target` under `config`; the Results, also written to the output
    directory (with the reports `report` writes) however the run ends.

    spec: the TARGET string workers rebuild the target from (None: exports and the reference run here).
    progress: called with one line per step. early: paired workers the caller started for `spec` before the
    target was built, adopted when they fit. timeline: the caller's, when its clock started earlier.
    """
    from ..measure.timeline import Timeline

    ctx = Context(target=target, config=config, spec=spec,
                  out=Path(config.out_dir or Path("multiexport-out") / safe_component(target.name)),
                  threads=config.runtime_threads(), timeline=timeline if timeline is not None else Timeline(),
                  say=progress, report=report)
    return _Run(ctx, early).run()


class _Run:
    """The stages in order, and what each has made so far: whatever exists when the run ends goes into
    results.json (a stage's output is set once, by the stage that makes it)."""

    def __init__(self, ctx: Context, early: EarlyWorkers | None):
        self.ctx, self.early = ctx, early
        self.rows: Rows = {name: BackendResult(name, Status.NOT_RUN, "not reached", display=_display(name),
                                               precision=split_variant(name)[1])
                           for name in ctx.config.backends}
        self.device: DevicePlan | None = None
        self.prepared: Prepared | None = None
        self.pairing: Pairing | None = None
        self.reference_bench: BenchResult | None = None

    def run(self) -> Results:
        from ..run.rundir import claim_run_dir, mark

        ctx = self.ctx
        claim = claim_run_dir(ctx.out)
        finished, usage_error = False, False
        try:
            try:
                self._stages()
            except (Interrupted, KeyboardInterrupt):
                finished = True
                self._finish(interrupted=True)
                raise
            except Exception as exc:
                # A signal's exception raised inside a runtime's callback comes back wrapped in the runtime's own
                # error (JaxRuntimeError): the stop request is the truth, not the wrapper.
                signum = stop_requested()
                if signum is None:
                    usage_error = isinstance(exc, MultiexportError) and exc.exit_code == USAGE_EXIT
                    raise
                finished = True
                self._finish(interrupted=True)
                raise Interrupted(signum) from None
            finished = True
            return self._finish(interrupted=False)
        finally:
            if not finished:  # a user mistake or a bug stopped the run before any results: say so, not "running"
                mark(ctx.out, "failed")
            claim.release(wrote_nothing=usage_error)

    def _stages(self) -> None:
        early_start = self.ctx.config.device == "cpu"  # no GPU plan needed to know which workers to start
        workers = Workers(None, None)
        tm = Timing(None, None)
        # The machine's lock (a sweep's): shared for the whole compare, exclusive from the first timed call to
        # the last floor, so nothing of another compare runs while we time
        with machine_share(self.ctx.progress) as machine:
            timing_lock = contextlib.ExitStack()
            try:
                self._measure(early_start, workers, tm, timing_lock, machine)
            finally:
                timing_lock.close()

    def _measure(self, early_start: bool, workers: Workers, tm: Timing, timing_lock: contextlib.ExitStack,
                 machine: MachineLock) -> None:
        ctx, rows = self.ctx, self.rows
        try:
            if early_start:
                workers = timing.prespawn(ctx, self.early, None)
                self.early = None
            self.device = plan_devices(ctx)
            self.prepared = prep = prepare(ctx, self.device)
            if not early_start:
                workers = timing.prespawn(ctx, self.early, self.device)
                self.early = None
            if prep.nondeterministic:
                for row in rows.values():
                    row.status, row.reason = Status.NONDETERMINISTIC_TARGET, prep.nondeterministic
                return
            workers = timing.recheck_prespawn(workers, prep)
            artifacts = exports.export_all(ctx, prep, rows)
            tm = timing.plan_timing(ctx, prep, rows, artifacts, workers)
            workers = Workers(None, None)  # adopted by the timing plan, or closed by it
            self.pairing = tm.pairing
            timing_lock.enter_context(machine.exclusive(ctx.config.bench is not None))
            if tm.servers is not None:
                timing.start_servers(ctx, tm.servers, rows, artifacts)
            self.reference_bench = timing.bench_reference(ctx, prep, tm)
            for name in ctx.config.backends:
                if name in artifacts:
                    check_row(ctx, prep, tm, rows[name], artifacts[name])
            if tm.servers is not None:
                self.pairing = timing.paired_rounds(ctx, prep, tm, rows, self.reference_bench)
        finally:
            for servers in (workers.servers, tm.servers):
                if servers is not None:
                    servers.close()
            if self.early is not None:  # never adopted (the run stopped before): its workers must not outlive it
                self.early.close()
        timing.compute_figures(self.pairing, rows, self.reference_bench)
        if ctx.config.floor and self.pairing is not None:
            timing.floors(ctx, rows, self.pairing)
        if self.device is not None and self.device.tpu and self.prepared is not None:
            from .tpu_stage import tpu_stage  # after every CPU row: the TPU worker alone holds the chip

            self.device.tpu_rows = tpu_stage(ctx, self.prepared)

    def _finish(self, interrupted: bool) -> Results:
        ctx, prep = self.ctx, self.prepared
        for row in self.rows.values():
            if interrupted and row.status is Status.NOT_RUN:
                row.status, row.reason = Status.INTERRUPTED, "interrupted before this backend finished"
            clean_reasons(row)
        signature = (from_data(SignatureData, prep.sig.to_json(), "signature") if prep is not None
                     else SignatureData(name=ctx.target.name, inputs=[], outputs=[]))
        reference = (dataclasses.replace(prep.reference, bench=self.reference_bench) if prep is not None
                     else Reference())
        results = Results(
            target=ctx.target.name, signature=signature,
            trials=[TrialInfo(t.name, dict(t.dims), t.origin) for t in (prep.trials if prep is not None else [])],
            backends=self.rows, reference=reference, environment=dict(prep.environment) if prep is not None else {},
            out_dir=str(ctx.out), device=self.device.to_json() if self.device is not None else {},
            interrupted=interrupted, state="interrupted" if interrupted else "finished", config=ctx.config.to_json(),
            pairing=self.pairing, timeline=ctx.timeline.steps())
        return _write(ctx, results)


def _write(ctx: Context, results: Results) -> Results:
    """results.json and the caller's reports, then the directory marked with the run's state. A full disk
    is an environment problem, and the marker must not say the run still works."""
    from ..run.rundir import mark, mark_in_place

    try:
        results.write(ctx.out / "results.json")
        if ctx.report is not None:
            ctx.report(results, ctx.out)
    except OSError as exc:
        from ..errors import EnvironmentProblem
        from ..exporting.outdir import disk_error

        mark_in_place(ctx.out, "failed")
        mapped = disk_error(exc, ctx.out)
        if mapped is exc:
            raise
        raise EnvironmentProblem(f"{mapped}; the results of this run were not saved: free space (or choose "
                                 "another --out) and run the compare again") from exc
    mark(ctx.out, results.state)
    return results


def clean_reasons(row: BackendResult) -> None:
    """A row's reasons as results.json keeps them: a converter's colours (ANSI escapes) removed, any other
    control or bidirectional character escaped (`files.text.clean_message`)."""
    from ..files.text import clean_message

    row.reason = clean_message(row.reason)
    for size in row.bench.sizes if row.bench is not None else []:
        size.reason = clean_message(size.reason)


def _display(name: str) -> dict[str, str]:
    from ..exporting.registry import display

    return display(name)

