"""One compare run, stage by stage (`run_compare`), with results written however it ends.

Stages: claim the output directory; the device plan and `prepare` (signature, trials, the jax.jit
reference on the first trial with its determinism check); the exports (overlapping workers; in paired
mode each runner's worker starts, and imports its runtime, as soon as the compare starts, and reads its
artifact only when asked to load), with the rest of the reference (`finish_reference`: the other trials,
the rounding floor) computed here meanwhile where memory allows (`meanwhile`); the timing plan; then, one at
a time so no two timed loops share the machine, each runner's timed load, the reference's benchmark and each
backend's cold start (in paired mode without native consumers, the untimed parity trials then run in the
workers `threads` at a time, `check.check_rows_paired`) and verdict; the paired rounds; results and
reports, always, also when a signal stops the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import USAGE_EXIT, EnvironmentProblem, Interrupted, MultiexportError, present
from ..exporting.outdir import disk_error
from ..files.paths import safe_component
from ..leaves.factory_cache import stop_keeping
from ..measure.floor import SPEC, floor
from ..measure.timeline import Timeline
from ..results import Reference, Results, SignatureData, Status, TrialInfo
from ..results.schema import from_data
from ..run.rundir import claim_run_dir, mark, mark_in_place
from ..run.servers import ReferenceExports
from ..system.process import stop_requested
from ..system.timing_lock import MachineLock, machine_share
from .ahead import start_ahead
from .check import check_row, check_rows_paired
from .exports import export_all, plan_for, say_plan
from .meanwhile import exports_beside_reference, reference_meanwhile
from .outcomes import Failure, RowOutcomes, exported_artifacts
from .prepare import finish_reference, plan_devices, prepare
from .row import build_rows
from .stages import Context, Prepared, Rows, Timing, Workers
from .timing import (
    bench_reference,
    close_early,
    compute_figures,
    early_rss,
    paired_rounds,
    plan_timing,
    prespawn,
    recheck_prespawn,
    start_servers,
    time_baseline_pairs,
)
from .tpu_stage import tpu_stage

if TYPE_CHECKING:
    from ..leaves import Target
    from ..results import BenchResult, Pairing
    from ..run.devices import DevicePlan
    from ..run.export_pool import BuildingWorker
    from .config import CompareConfig
    from .memory_plan import MemoryPlan
    from .timing import EarlyWorkers


def run_compare(target: Target, config: CompareConfig, spec: str | None, progress: Callable[[str], None],
                early: EarlyWorkers | None = None, report: Callable[[Results, Path], object] | None = None,
                timeline: Timeline | None = None, target_modules: frozenset[str] = frozenset()) -> Results:
    """Every stage of one compare of `target` under `config`; the Results, also written to the output
    directory (with the reports `report` writes) however the run ends.

    spec: the TARGET string workers rebuild the target from (None: exports and the reference run here).
    progress: called with one line per step. early: paired workers the caller started for `spec` before the
    target was built, adopted when they fit. timeline: the caller's, when its clock started earlier.
    target_modules: the top-level packages the caller's build of the target imported (`Context.target_modules`).
    """
    ctx = Context(target=target, config=config, spec=spec,
                  out=Path(config.out_dir or Path("multiexport-out") / safe_component(target.name)),
                  threads=config.runtime_threads(), timeline=timeline if timeline is not None else Timeline(),
                  say=progress, report=report, target_modules=target_modules)
    return _Run(ctx, early).run()


class _Run:
    """The stages in order, and what each has returned so far: whatever exists when the run ends goes into
    results.json (a stage's outcome is set once, by the stage that returns it; the rows are built from the
    outcomes, `row.build_rows`)."""

    def __init__(self, ctx: Context, early: EarlyWorkers | None):
        self.ctx, self.early = ctx, early
        self.outcomes: dict[str, RowOutcomes] = {name: RowOutcomes(name) for name in ctx.config.backends}
        self.device: DevicePlan | None = None
        self.prepared: Prepared | None = None
        self.pairing: Pairing | None = None
        self.reference_bench: BenchResult | None = None
        self.memory: MemoryPlan | None = None
        self.ahead: BuildingWorker | None = None  # the worker making the exports that need the built target

    def rows(self, interrupted: bool = False) -> Rows:
        """The rows as the outcomes so far make them."""
        return build_rows(self.outcomes, self.ctx.config.backends, interrupted)

    def run(self) -> Results:
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
            stop_keeping()  # this compare's programs kept (prepare: small weights) until here, no further
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
        ctx, outcomes = self.ctx, self.outcomes
        try:
            if early_start:
                workers = prespawn(ctx, self.early, None)
                self.early = None
            self.device = plan_devices(ctx)
            started = workers

            def on_planned(planned: Prepared) -> None:  # the worker that makes the exports needing the target
                self.ahead = start_ahead(ctx, planned, early_rss(started), started.servers)

            self.prepared = prep = prepare(ctx, self.device, on_planned if early_start else None)
            if not early_start:
                workers = prespawn(ctx, self.early, self.device)
                self.early = None
            if prep.nondeterministic:
                self.prepared = finish_reference(ctx, prep, ctx.progress)
                failure = Failure("target", Status.NONDETERMINISTIC_TARGET.value, prep.nondeterministic)
                for name in outcomes:
                    outcomes[name] = dataclasses.replace(outcomes[name], failure=failure)
                return
            workers = recheck_prespawn(workers, prep)
            if isinstance(self.ahead, ReferenceExports) and workers.servers is None:
                self.ahead = None  # the reference's worker closed with the others: the plan's workers export
            # before any export: what cannot fit even alone is refused, the early workers closed if the exports
            # need their memory
            self.memory = memory = plan_for(ctx, prep, early_rss(workers), self.ahead)
            say_plan(ctx, memory)
            if memory.close_early:
                workers = close_early(workers)
            if self.ahead is not None and (memory.refused or memory.close_early):
                self.ahead.close()  # memory is tight after all: the plan's workers start as planned
                self.ahead = None
            if reference_meanwhile(ctx, memory):
                exports, self.prepared = exports_beside_reference(ctx, prep, memory, self.ahead)
            else:
                self.prepared = finish_reference(ctx, prep, ctx.progress)
                exports = export_all(ctx, self.prepared, memory, ahead=self.ahead)
            prep = self.prepared
            replaced = self.ahead.restore() if isinstance(self.ahead, ReferenceExports) else None
            if replaced is not None:  # started from here; its cold start says why (results.json)
                ctx.progress(f"reference: a fresh paired worker for jax.jit, since {replaced}")
            for name, export in exports.items():
                outcomes[name] = dataclasses.replace(outcomes[name], export=export)
            artifacts = exported_artifacts(outcomes, ctx.config.backends)
            tm = plan_timing(ctx, prep, artifacts, workers)
            workers = Workers(None, None)  # adopted by the timing plan, or closed by it
            self.pairing = tm.pairing
            timing_lock.enter_context(machine.exclusive(ctx.config.bench is not None))
            if tm.servers is not None:
                start_servers(ctx, tm.servers, artifacts)
            self.reference_bench = bench_reference(ctx, prep, tm)
            if replaced is not None and self.reference_bench is not None:
                self.reference_bench.extra["fresh_worker_since"] = replaced
            if tm.servers is not None and not ctx.config.native:  # cold starts one at a time, then the trials
                for name, checked in check_rows_paired(ctx, prep, tm, artifacts).items():
                    outcomes[name] = dataclasses.replace(outcomes[name], check=checked)
            for name, exported in artifacts.items():
                if outcomes[name].check is None:
                    outcomes[name] = dataclasses.replace(outcomes[name], check=check_row(ctx, prep, tm, name, exported))
            if tm.servers is None:  # sequential: each backend's new and baseline artifacts timed as a pair alone
                self.pairing = time_baseline_pairs(ctx, prep, tm, self.rows())
            if tm.servers is not None:
                self.pairing = paired_rounds(ctx, prep, tm, self.rows(), self.reference_bench)
        finally:
            if self.ahead is not None:
                self.ahead.close()  # used (then nothing to do), or the run stopped before the exports
                self.ahead = None
            for servers in (workers.servers, tm.servers):
                if servers is not None:
                    servers.close()
            if self.early is not None:  # never adopted (the run stopped before): its workers must not outlive it
                self.early.close()
        rows = self.rows()
        compute_figures(self.pairing, rows, self.reference_bench)
        if ctx.config.floor and self.pairing is not None:
            floors(ctx, rows, self.pairing)
        if self.device is not None and self.device.tpu and self.prepared is not None:
            self.device.tpu_rows = tpu_stage(ctx, self.prepared)

    def _finish(self, interrupted: bool) -> Results:
        ctx, prep = self.ctx, self.prepared
        signature = (from_data(SignatureData, prep.sig.to_json(), "signature") if prep is not None
                     else SignatureData(name=ctx.target.name, inputs=[], outputs=[]))
        reference = (dataclasses.replace(prep.reference, bench=self.reference_bench) if prep is not None
                     else Reference())
        results = Results(
            target=ctx.target.name, signature=signature,
            trials=[TrialInfo(t.name, dict(t.dims), t.origin) for t in (prep.trials if prep is not None else [])],
            backends=self.rows(interrupted), reference=reference, environment=dict(prep.environment) if prep is not None else {},
            out_dir=str(ctx.out), device=self.device.to_json() if self.device is not None else {},
            interrupted=interrupted, state="interrupted" if interrupted else "finished", config=ctx.config.to_json(),
            pairing=self.pairing, timeline=ctx.timeline.steps(),
            memory=self.memory.to_json() if self.memory is not None else {})
        return _write(ctx, results)


def _write(ctx: Context, results: Results) -> Results:
    """results.json and the caller's reports, then the directory marked with the run's state. A full disk
    is an environment problem, and the marker must not say the run still works."""
    try:
        results.write(ctx.out / "results.json")
        if ctx.report is not None:
            ctx.report(results, ctx.out)
    except OSError as exc:
        mark_in_place(ctx.out, "failed")
        mapped = disk_error(exc, ctx.out)
        if mapped is exc:
            raise
        raise EnvironmentProblem(f"{mapped}; the results of this run were not saved: free space (or choose "
                                 "another --out-dir) and run the compare again") from exc
    mark(ctx.out, results.state)
    return results


def floors(ctx: Context, rows: Rows, pairing: Pairing) -> None:
    """The per-call floor of every timed runtime: the floor target compared the same way (`run_compare`), in
    OUT/floor; each runner's floor (p50 ms) goes into `pairing.floors`."""
    timed = [n for n, r in rows.items() if r.status is Status.OK and r.bench is not None]
    if not timed:
        return
    ctx.progress(f"per-call floor of {', '.join(timed)} (one add on 8 floats, the same calling paths)")
    config = dataclasses.replace(ctx.config, backends=tuple(timed), out_dir=ctx.out / "floor", trials=1,
                                 batch_sizes=None, native=False, native_plugin=None, floor=False, inputs=None,
                                 dim_sizes={}, val_ranges={}, tolerances={}, backend_options={})
    spec = SPEC if ctx.spec is not None else None
    results = run_compare(floor(), config, spec, lambda m: ctx.progress(f"floor: {m}"), report=ctx.report)
    benches = {"jax": results.reference.bench, **{n: r.bench for n, r in results.backends.items()}}
    for name, bench in benches.items():
        measured = bench.measured() if bench is not None else []
        if measured:
            latency = present(measured[0].latency, "measured() keeps only the sizes with a latency")
            pairing.floors[name] = latency.p50_ms
