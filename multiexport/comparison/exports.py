"""The export phase of a compare: every selected backend's artifact, overlapping in worker processes.

A backend that builds on another (`Backend.builds_on`: LiteRT on the SavedModel, OpenVINO on the ONNX
file) is exported in the same worker right after that stage and starts from the artifact the stage just
wrote, so the framework is imported, the target traced and the stage converted once, not twice. Each
group has a worker of its own, unless there are more groups than may run at once: then the groups beyond
the slots form a pool that every worker takes from, one export at a time, once its own group is done
(`plan_workers`): nothing waits for a slot, no worker starts (imports, builds the target) only to queue, and
the worker that finishes first takes the most. A worker that dies takes only the export it was on: the
exports after it that no other worker took are exported again, each alone.
Export workers build the target from the programs the parent's load compiled
(signature/factory_cache.py).
Functions of the stages' typed values (`stages.Context`, `Prepared`) and the rows, like `timing`.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..environment import tpu_presence
from ..errors import BackendUnavailable, ExportError, MultiexportError, present
from ..exporting.manifest import Manifest
from ..exporting.precision import needs_calibration, split_variant
from ..results import Binding, Status
from .stages import Context, Prepared, Rows

if TYPE_CHECKING:
    from ..exporting.contract import ExportOptions
    from ..run.messages import ExportReply


def export_all(ctx: Context, prep: Prepared, rows: Rows) -> dict[str, Manifest]:
    """Every export; {backend: manifest} of those that worked, in the compare's order."""
    todo = []
    for name in ctx.config.backends:
        row = rows[name]
        if name in prep.device.excluded:
            row.status, row.reason = Status.NO_GPU, prep.device.excluded[name]
            continue
        if not _has_precision(row, name, prep):
            continue
        todo.append(name)
    if not todo:
        return {}
    groups = export_groups(todo)
    artifacts: dict[str, Manifest] = {}
    jobs = export_jobs(ctx, prep, len(groups))
    if ctx.spec is None:  # no TARGET string: in this process, one after another
        for name in (n for g in groups for n in g):
            stage = _builds_on(name)
            manifest = _in_process(ctx, prep, rows, name, rows[stage].artifact if stage in artifacts else None)
            if manifest is not None:
                artifacts[name] = manifest
        return {name: artifacts[name] for name in ctx.config.backends if name in artifacts}
    if not ctx.config.export_jobs and _by_memory(prep) < min(len(groups), ctx.threads):
        # Memory, not cores, limits the overlap: a pooled worker would hold every framework it exported with
        # at once, so each group gets a fresh worker, queued for a slot.
        plans = [WorkerPlan(tuple(group)) for group in groups]
    else:
        plans = plan_workers(groups, jobs)
    pool = plans[0].pooled
    shared = [w.own for w in plans if len(w.own) > 1]
    ctx.progress(f"export with {', '.join(todo)} ({jobs} at a time in {len(plans)} worker(s)"
                 + (f"; together: {', '.join(' then '.join(g) for g in shared)}" if shared else "")
                 + (f"; then each takes the next of {', '.join(pool)}" if pool else "") + ")")
    for name, manifest in _in_workers(ctx, prep, rows, plans, slots=jobs).items():
        if manifest is not None:
            artifacts[name] = manifest
    return {name: artifacts[name] for name in ctx.config.backends if name in artifacts}


def export_groups(todo: list[str]) -> list[list[str]]:
    """One group per worker: a stage followed by the backends built on it, else a backend alone. Groups with
    a stage come first (the longest chains start first), then the others in the compare's order."""
    stage_of = {name: _builds_on(name) for name in todo}
    groups: list[list[str]] = []
    for name in todo:
        stage = stage_of[name]
        if stage in todo:
            continue  # joins its stage's group
        groups.append([name, *(n for n in todo if stage_of[n] == name)])
    return sorted(groups, key=lambda g: -len(g))


@dataclass(frozen=True)
class WorkerPlan:
    """What one export worker exports.

    own: its group (a stage first, then what builds on it), in order.
    pooled: the exports every worker shares, taken one at a time after `own`, each by the first worker to
        reach it (the others skip it); the same tuple in every plan.
    """

    own: tuple[str, ...]
    pooled: tuple[str, ...] = ()


def plan_workers(groups: list[list[str]], jobs: int) -> list[WorkerPlan]:
    """One worker per slot: the first `jobs` groups are one worker's each, the rest a pool every worker
    takes from once its own group is done (groups come longest first: a chain starts early)."""
    slots = max(jobs, 1)
    pooled = tuple(name for group in groups[slots:] for name in group)
    return [WorkerPlan(tuple(group), pooled) for group in groups[:slots]]


def _stage_in(names: list[str], name: str) -> str | None:
    """The stage `name` builds on when it is exported before `name` among `names` (one worker's), else None."""
    stage = _builds_on(name)
    return stage if stage in names[:names.index(name)] else None


def export_jobs(ctx: Context, prep: Prepared, count: int) -> int:
    """How many exports may overlap: the cores, and what memory allows (~3x the weights per export)."""
    if ctx.config.export_jobs:
        return min(ctx.config.export_jobs, max(count, 1))
    return max(1, min(count, ctx.threads, _by_memory(prep)))


def _by_memory(prep: Prepared) -> int:
    """How many exports memory allows at once (~3x the weights each, plus 1 GiB for the frameworks)."""
    weights = int(prep.sig.weights.get("baked_bytes", 0)) + int(prep.sig.weights.get("input_bytes", 0))
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        available = 8 << 30
    return max(1, int(available // max(3 * weights + (1 << 30), 1)))


def _options(ctx: Context, prep: Prepared, name: str, stage_artifact: str | None) -> ExportOptions:
    from ..exporting.contract import ExportOptions
    from ..measure.plan import sizes_checked

    config = ctx.config
    checked = sizes_checked(prep.sig, prep.trials, prep.bench_feeds)
    static = checked if config.native and _static_modules(name) else {}
    # No load check in the export worker: the run worker loads the artifact next, and the backend classifies
    # a failure there the same way (one root cause, one category), without paying the load twice. Except for
    # a symbolic signature: the check compares a symbolic artifact with jax.jit at the example, so one that
    # computes wrong is rebuilt at static sizes (exporting/symbolic_check.py).
    base, precision = split_variant(name)
    # XLA keeps several platforms in one artifact: --platforms, and the TPU's beside the CPU's when the compare has TPU
    # rows or runs on a machine with a TPU (as `export` there), so the artifact it writes also runs on the chip
    # (`run --device tpu`); the rows' own platform stays in.
    tpu = prep.device.tpu or tpu_presence().attached
    extra = (config.platforms or (("tpu",) if tpu else ())) if base == "xla" else ()
    options = ExportOptions.for_device(prep.device.chosen, keep_unused=config.keep_unused,
                                    external_weights=config.external_weights, static_sizes=static,
                                    fallback_sizes=checked,
                                    backend_options=dict(config.backend_options.get(base, {})),
                                    check_load=bool(prep.sig.symbolic_dims),
                                    stage_artifact=stage_artifact, precision=precision,
                                    calibration=prep.calibration if needs_calibration(precision) else None)
    return replace(options, platforms=tuple(dict.fromkeys([*(options.platforms or ()), *extra]))) if extra else options


def _has_precision(row, name: str, prep: Prepared) -> bool:
    """Whether `name`'s backend makes its precision for this target; if not, the row says what is missing
    (unsupported-precision) and no worker is started for it."""
    from ..exporting.precision import check_weights_quantizable
    from ..exporting.registry import get_backend

    precision = split_variant(name)[1]
    if precision == "fp32":
        return True
    try:
        backend = get_backend(name)
        check_weights_quantizable(prep.sig, precision, backend.name, backend.check_precision)
    except BackendUnavailable:
        return True  # the export path says it is unavailable, as for any row
    except ExportError as exc:
        row.status, row.reason = Status.parse(exc.category), str(exc)
        return False
    return True


def _available(row, name: str) -> bool:
    from ..exporting.registry import get_backend

    try:
        status = get_backend(name).available()
    except MultiexportError as exc:
        row.status, row.reason = Status.UNAVAILABLE, str(exc)
        return False
    if not status.ok:
        row.status, row.reason = Status.UNAVAILABLE, status.reason
    return status.ok


def _in_process(ctx: Context, prep: Prepared, rows: Rows, name: str, stage_artifact: str | None) -> Manifest | None:
    """Export in this process (no TARGET string to load the function elsewhere)."""
    from ..exporting.registry import get_backend

    row = rows[name]
    if not _available(row, name):
        return None
    ctx.progress(f"{name}: export")
    t0 = time.perf_counter()
    try:
        get_backend(name).export(ctx.target.fn, prep.sig, ctx.out / name, _options(ctx, prep, name, stage_artifact))
    except MultiexportError as exc:
        row.status, row.reason = Status.parse(getattr(exc, "category", "export-failed")), str(exc)
        if row.status is Status.RUN_FAILED:
            row.status = Status.EXPORT_FAILED
        return None
    row.export_seconds = round(time.perf_counter() - t0, 3)
    return _record(row, ctx.out / name)


@dataclass(frozen=True)
class _Job:
    """One export as the workers are told it: its backend, its private directory (export.json or
    error.json land there; a pooled one's `claim` names the worker that took it) and its options' JSON."""

    name: str
    work: Path
    options: str


def _in_worker(ctx: Context, prep: Prepared, rows: Rows, names: list[str]) -> dict[str, Manifest | None]:
    """Export `names` in one worker, in order; {name: manifest or None}."""
    return _in_workers(ctx, prep, rows, [WorkerPlan(tuple(names))], slots=1, alone=True)


def _in_workers(ctx: Context, prep: Prepared, rows: Rows, plans: list[WorkerPlan], slots: int,
                alone: bool = False) -> dict[str, Manifest | None]:
    """Export every plan's backends, one worker per plan, `slots` at a time; {name: manifest or None}. An
    export a dead worker did not finish and no other took is exported again, alone (`alone`: this is that)."""
    from ..exporting.outdir import remove_stale

    done: dict[str, Manifest | None] = {n: None for w in plans for n in (*w.own, *w.pooled)}
    pooled = [n for n in plans[0].pooled if _available(rows[n], n)]
    owns = [[n for n in w.own if _available(rows[n], n)] for w in plans]
    pool_jobs = [_job(ctx, prep, name, pooled, True, alone) for name in pooled]
    own_jobs = [[_job(ctx, prep, name, own, False, alone) for name in own] for own in owns]
    every = [*pool_jobs, *(j for jobs in own_jobs for j in jobs)]
    launch = [(k, jobs) for k, jobs in enumerate(own_jobs) if jobs or pool_jobs]
    if not launch:
        return done
    timeout = ctx.config.timeout * (max(len(jobs) for _, jobs in launch) + len(pool_jobs))
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(slots, len(launch)))) as pool:
            outcomes = list(pool.map(lambda item: _run_worker(ctx, item[0], item[1], pool_jobs, timeout), launch))
        if any(outcome.returncode != 0 for outcome in outcomes):
            remove_stale(ctx.out)  # a dead worker's staging directories and locks in the output directory
        claims = {job.name: _claimed_by(job.work) for job in pool_jobs}  # read once, every worker ended
        retry = []
        for (k, jobs), outcome in zip(launch, outcomes):
            taken = [*jobs, *(j for j in pool_jobs if claims[j.name] == k)]
            retry += _collect(ctx, prep, rows, taken, outcome, timeout, done)
        retry += [j.name for j in pool_jobs if claims[j.name] is None]  # no worker got that far
    except BaseException:  # a signal stopped the wait: the workers are gone, and so are their directories
        remove_stale(ctx.out)
        raise
    finally:
        for job in every:
            _remove(job.work)
    for name in retry:  # each export a dead worker did not finish, alone in a fresh worker
        done[name] = _in_worker(ctx, prep, rows, [name])[name]
    return done


def _job(ctx: Context, prep: Prepared, name: str, names: list[str], pooled: bool, alone: bool) -> _Job:
    """`name`'s export among `names` (one worker's, or the pool), starting from its stage when that comes
    before it there; said as it is planned."""
    from ..run.messages import encode
    from ..run.workers import start_work_dir

    stage = _stage_in(names, name)
    options = _options(ctx, prep, name, str(ctx.out / stage) if stage else None)
    place = names.index(name)
    # Said, not marked: exports overlap, so the timeline keeps the phase as one step (each export's own
    # seconds are its row's); an export again alone, after the phase, is a step of its own.
    (ctx.progress if alone else ctx.say)(f"{name}: export in a worker process" + (
        " (the first worker free)" if pooled else f" (after {names[place - 1]}, in its worker)" if place else ""))
    return _Job(name, start_work_dir("export"), encode(options))


def _run_worker(ctx: Context, k: int, jobs: list[_Job], pooled: list[_Job], timeout: float):
    """Worker `k`: its own jobs in order, then each pooled job it claims first."""
    from ..run.workers import private_tmp, worker_command, worker_environment
    from ..system.process import run_command

    ordered = [*jobs, *pooled]
    first = ordered[0]
    args = ["export", present(ctx.spec, "workers export from a TARGET string"), first.name, str(ctx.out / first.name),
            str(first.work), "--options", first.options]
    for job in ordered[1:]:
        args += ["--then", job.name, str(ctx.out / job.name), str(job.work), job.options]
    if pooled:
        args += ["--pool", str(len(pooled)), "--claim-as", str(k)]
    with private_tmp() as tmp:
        return run_command(worker_command(*args), timeout=timeout, env=worker_environment(tmp))


def _claimed_by(work: Path) -> int | None:
    """Which worker took a pooled job (its `claim` file, written by that worker), or None."""
    try:
        return int((work / "claim").read_text().strip())
    except (OSError, ValueError):
        return None


def _collect(ctx: Context, prep: Prepared, rows: Rows, taken: list[_Job], outcome, timeout: float,
             done: dict[str, Manifest | None]) -> list[str]:
    """The rows of the jobs one worker took, in the order it took them, from what it left; returns the names
    to export again alone (those after the one it died on, or that it died on after another export)."""
    from ..run.workers import classify, classify_outcome

    reached, retry = True, []
    for i, job in enumerate(taken):
        row, name, work = rows[job.name], job.name, job.work
        info, failure = _read(work / "export.json"), None
        if info is None and (work / "error.json").is_file():
            failure = classify(outcome, work, timeout)  # its own clean error report
        elif info is None and reached:
            reached = False  # the worker ended on this export: the ones after it never ran there
            failure = classify_outcome(outcome, timeout) or (
                "export-failed", f"the worker exited with code 0 before reporting a result for {name} (something in "
                                 "the process ended it early: the target's code calling exit from native code?)")
            if i > 0 and failure[0] != "internal-error":
                retry.append(name)  # it died after another export in the same process: judge it alone
                failure = None
        elif info is None:
            retry.append(name)
        if failure is not None:
            row.status, row.reason = Status.parse(failure[0]), failure[1]
        elif info is not None and info.fingerprint != prep.fingerprint:
            row.status, row.reason = Status.NONDETERMINISTIC_TARGET, (
                f"Target '{ctx.target.name}' | loads with different example values or weights in a fresh process "
                "(random values without a fixed seed?), expected the same: seed them, or compare from Python with "
                "multiexport.compare(...), which exports in this process")
        elif info is not None:
            row.export_seconds, row.export_cpu_seconds = round(info.seconds, 3), round(info.cpu_seconds, 3)
            row.export_peak_rss_bytes = info.peak_rss_bytes
            done[name] = _record(row, ctx.out / name)
    return retry


def _read(path: Path) -> ExportReply | None:
    """An export worker's export.json, or None when it wrote none (or one that does not parse)."""
    from ..errors import InputError
    from ..run.messages import ExportReply, decode

    try:
        return decode(ExportReply, path.read_text(), str(path)) if path.is_file() else None
    except (OSError, InputError):
        return None


def _remove(work: Path) -> None:
    import shutil

    shutil.rmtree(work, ignore_errors=True)


def _record(row, directory: Path) -> Manifest:
    """The row's facts from the manifest on disk."""
    manifest = Manifest.read(directory)
    row.artifact = str(directory)
    row.binding = [Binding(b.name, b.used, b.param, _caller_key(manifest, b)) for b in manifest.inputs]
    row.warnings = list(manifest.warnings)
    row.weights = {k: v for k, v in manifest.weights.items() if k != "tensors"}
    row.versions, row.requires, row.supports = dict(manifest.versions), dict(manifest.requires), dict(manifest.supports)
    row.export_setup = manifest.format.get("setup")
    row.artifact_bytes = sum(manifest.inventory.values())
    if manifest.precision is not None:
        from ..results.schema import to_data

        row.precision_facts = to_data(manifest.precision)
    return manifest


def _builds_on(name: str) -> str | None:
    from ..exporting.registry import backend_class

    try:
        return backend_class(name).builds_on
    except MultiexportError:
        return None


def _static_modules(name: str) -> bool:
    """Whether `name`'s native consumer needs modules refined per size (it compiles no symbolic module)."""
    from ..exporting.native_section import consumer_for

    consumer = consumer_for(name)
    return consumer is not None and consumer.static_modules


def _caller_key(manifest: Manifest, binding) -> str | None:
    """The key a caller must still feed for a leaf the module does not read (a declared, unread input)."""
    return binding.param if not binding.used and isinstance(binding.param, str) else None
