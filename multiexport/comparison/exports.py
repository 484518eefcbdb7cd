"""The export phase of a compare: every selected backend's artifact, overlapping in worker processes.

A backend that builds on another (`Backend.builds_on`: LiteRT on the SavedModel, OpenVINO on the ONNX
file) is exported in the same worker right after that stage and starts from the artifact the stage just
wrote, so the framework is imported, the target traced and the stage converted once, not twice. Each
other backend has a worker of its own, unless there are more groups than may run at once: then groups
share workers (`share_workers`) until there are as many as may run, since a group without a slot would
wait for one anyway and a shared worker builds the target once. Groups overlap as cores and memory allow;
a worker that dies takes only the export it was on: the backends after it in its worker are exported
again, each alone. Export workers build the target from the programs the parent's load compiled
(signature/factory_cache.py).
Functions of the stages' typed values (`stages.Context`, `Prepared`) and the rows, like `timing`.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING

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
    groups = export_groups(todo)
    artifacts: dict[str, Manifest] = {}
    jobs = export_jobs(ctx, prep, len(groups))
    groups = share_workers(groups, jobs)
    if ctx.spec is None:  # no TARGET string: in this process, one after another
        for group in groups:
            for name in group:
                stage = _stage_in(group, name)
                manifest = _in_process(ctx, prep, rows, name, rows[stage].artifact if stage in artifacts else None)
                if manifest is not None:
                    artifacts[name] = manifest
        return {name: artifacts[name] for name in ctx.config.backends if name in artifacts}
    shared = [g for g in groups if len(g) > 1]
    ctx.progress(f"export with {', '.join(todo)} ({jobs} at a time in {len(groups)} worker(s)"
                 + (f"; together: {', '.join(' then '.join(g) for g in shared)}" if shared else "") + ")")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_in_worker, ctx, prep, rows, group): group for group in groups}
        for future in as_completed(futures):
            for name, manifest in future.result().items():
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


def share_workers(groups: list[list[str]], jobs: int) -> list[list[str]]:
    """With more groups than workers may run at once, the two smallest groups (by exports; the later ones on
    a tie) become one worker's, until there are `jobs`: a group without a slot would wait for one anyway, and
    a worker's start (its imports, the target built and traced) is then paid once, not twice. Each backend
    still starts from the target unless its own stage was exported before it in that worker (`_stage_in`),
    and dies alone (`_in_worker`)."""
    workers = [[i] for i in range(len(groups))]  # each worker's groups, by their place in `groups`
    while len(workers) > max(jobs, 1):
        by_size = sorted(range(len(workers)), key=lambda w: (sum(len(groups[i]) for i in workers[w]), -w))
        first, second = sorted(by_size[:2])
        workers[first] = sorted(workers[first] + workers.pop(second))
    return [[name for i in w for name in groups[i]] for w in workers]


def _stage_in(names: list[str], name: str) -> str | None:
    """The stage `name` builds on when it is exported before `name` among `names` (one worker's), else None."""
    stage = _builds_on(name)
    return stage if stage in names[:names.index(name)] else None


def export_jobs(ctx: Context, prep: Prepared, count: int) -> int:
    """How many exports may overlap: the cores, and what memory allows (~3x the weights per export)."""
    if ctx.config.export_jobs:
        return min(ctx.config.export_jobs, max(count, 1))
    weights = int(prep.sig.weights.get("baked_bytes", 0)) + int(prep.sig.weights.get("input_bytes", 0))
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        available = 8 << 30
    by_memory = max(1, int(available // max(3 * weights + (1 << 30), 1)))
    return max(1, min(count, ctx.threads, by_memory))


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
    return ExportOptions.for_device(prep.device.chosen, keep_unused=config.keep_unused,
                                    external_weights=config.external_weights, static_sizes=static,
                                    fallback_sizes=checked,
                                    backend_options=dict(config.backend_options.get(base, {})),
                                    check_load=bool(prep.sig.symbolic_dims),
                                    stage_artifact=stage_artifact, precision=precision,
                                    calibration=prep.calibration if needs_calibration(precision) else None)


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


def _in_worker(ctx: Context, prep: Prepared, rows: Rows, group: list[str]) -> dict[str, Manifest | None]:
    """Export `group` in one worker (a stage first, then what builds on it); {name: manifest or None}."""
    from ..exporting.outdir import remove_stale
    from ..run.messages import encode
    from ..run.workers import (
        classify,
        classify_outcome,
        private_tmp,
        start_work_dir,
        worker_command,
        worker_environment,
    )
    from ..system.process import run_command

    done: dict[str, Manifest | None] = {n: None for n in group}
    names = [n for n in group if _available(rows[n], n)]
    if not names:
        return done
    jobs = []
    for i, name in enumerate(names):
        stage = _stage_in(names, name)
        options = _options(ctx, prep, name, str(ctx.out / stage) if stage else None)
        jobs.append((name, start_work_dir("export"), encode(options)))
        ctx.progress(f"{name}: export in a worker process" + (f" (after {names[i - 1]}, in its worker)" if i else ""))
    args = ["export", present(ctx.spec, "workers export from a TARGET string"), names[0], str(ctx.out / names[0]),
            str(jobs[0][1]), "--options", jobs[0][2]]
    for name, work, payload_json in jobs[1:]:
        args += ["--then", name, str(ctx.out / name), str(work), payload_json]
    timeout = ctx.config.timeout * len(jobs)
    try:
        with private_tmp() as tmp:
            outcome = run_command(worker_command(*args), timeout=timeout, env=worker_environment(tmp))
    except BaseException:  # a signal stopped the wait: the worker is gone, and so are its directories
        for _, work, _ in jobs:
            _remove(work)
        remove_stale(ctx.out)  # its staging directories and locks in the output directory too
        raise
    if outcome.returncode != 0:
        remove_stale(ctx.out)
    reached, retry = True, []
    for i, (name, work, _) in enumerate(jobs):
        row = rows[name]
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
        _remove(work)
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
    for name in retry:  # each export the dead worker did not finish, alone in a fresh worker
        done[name] = _in_worker(ctx, prep, rows, [name])[name]
    return done


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
