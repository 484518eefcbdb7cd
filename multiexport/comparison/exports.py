"""The export phase of a compare: which backends export, with which options, and the outcome of each.

A backend that builds on another (`Backend.builds_on`: LiteRT on the SavedModel, OpenVINO on the ONNX
file) is exported in the same worker right after that stage and starts from the artifact the stage just
wrote, so the framework is imported, the target traced and the stage converted once, not twice. Each
group has a worker of its own, unless there are more groups than may run at once (cores, and memory at
~3x the weights per export): the scheduling itself, a pool every worker takes from and the retry of what a
dead worker left, is `run.export_pool`'s. Export workers build the target from the programs the parent's
load compiled (signature/factory_cache.py). Each export returns its outcome (`outcomes.Exported` or a
`Failure`); no row is written here.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..environment import tpu_presence
from ..errors import BackendUnavailable, ExportError, MultiexportError, present
from ..exporting.contract import ExportOptions
from ..exporting.manifest import Manifest
from ..exporting.native_section import consumer_for
from ..exporting.pipeline import export_artifact
from ..exporting.precision import check_weights_quantizable, needs_calibration, split_variant
from ..exporting.registry import backend_class, get_backend
from ..leaves.handed import CPU
from ..leaves.weights import should_lift
from ..measure.bench import memory_now
from ..measure.plan import sizes_checked
from ..results import Binding, Status
from ..results.schema import to_data
from ..run.export_pool import ExportJob, WorkerPlan, export_in_workers, plan_workers
from ..run.messages import encode
from .given import Given, example_outputs, handed_target, with_builder
from .memory_plan import MEASURED, MemoryPlan, available_now, footprints, plan_memory, rss_of, weight_bytes
from .outcomes import Exported, Failure
from .stages import Context, Prepared

if TYPE_CHECKING:
    from ..run.export_pool import BuildingWorker

__all__ = ["WorkerPlan", "export_all", "export_groups", "export_jobs", "plan_for", "plan_workers", "say_plan"]


def export_all(ctx: Context, prep: Prepared, memory: MemoryPlan | None = None,
               meanwhile: str = "", ahead: BuildingWorker | None = None) -> dict[str, Exported | Failure]:
    """Every export the compare asks for: {backend: its artifact, or why there is none} (a row the gate
    stops, before any export, is a `Failure` of stage "gate"; one the memory plan refuses, of status
    insufficient-memory). memory: the plan `plan_for` made (else made here, with no early workers).
    meanwhile: what this process does while the workers export (`meanwhile.py`), added to the phase's step.
    ahead: an export worker building the target since before the reference (`comparison.ahead`): the worker
    whose exports need the built target, else closed here (the session closes it however the run ends)."""
    done: dict[str, Exported | Failure] = {}
    todo = []
    for name in ctx.config.backends:
        if name in prep.device.excluded:
            done[name] = Failure("gate", Status.NO_GPU.value, prep.device.excluded[name])
        elif (refused := _precision_refused(name, prep)) is not None:
            done[name] = refused
        else:
            todo.append(name)
    if not todo:
        return done
    memory = memory if memory is not None else plan_for(ctx, prep, {})
    for name in [n for n in todo if n in memory.refused]:
        done[name] = Failure("gate", Status.INSUFFICIENT_MEMORY.value, memory.refused[name])
        todo.remove(name)
    if not todo:
        return {name: done[name] for name in ctx.config.backends if name in done}
    groups = export_groups(todo)
    if ctx.spec is None:  # no TARGET string: in this process, one after another
        for name in (n for g in groups for n in g):
            stage = _builds_on(name)
            staged = done.get(stage) if stage is not None else None
            done[name] = _in_process(ctx, prep, name, staged.artifact if isinstance(staged, Exported) else None)
        return {name: done[name] for name in ctx.config.backends if name in done}
    with handed_target(ctx, prep) as handoff, example_outputs(ctx, prep) as expected:
        given = Given(handoff, expected)
        builds = handoff is None  # without a handoff every worker builds the target
        if handoff is not None and ctx.target_modules:  # a build that imported nothing costs no worker much
            needs = [needs_target(ctx, prep, group) for group in groups]
            groups, builds = with_builder(groups, needs), any(needs)  # the one that builds comes first
        if ahead is not None and not builds:
            ahead.close()
            ahead = None
        jobs = export_jobs(ctx, prep, len(groups), memory)
        if not ctx.config.export_jobs and memory.exports_at_once < min(len(groups), ctx.threads):
            # Memory, not cores, limits the overlap: a pooled worker would hold every framework it exported with
            # at once, so each group gets a fresh worker, queued for a slot.
            plans = [WorkerPlan(tuple(group)) for group in groups]
        else:
            plans = plan_workers(groups, jobs)
        pool = plans[0].pooled
        shared = [w.own for w in plans if len(w.own) > 1]
        ctx.progress(f"export with {', '.join(todo)} ({jobs} at a time in {len(plans)} worker(s)"
                     + (f"; together: {', '.join(' then '.join(g) for g in shared)}" if shared else "")
                     + (f"; then each takes the next of {', '.join(pool)}" if pool else "") + ")"
                     + ("; the target handed to the workers as its StableHLO modules, built only where an export "
                        "needs it" if handoff is not None else "")
                     + (f"; {ahead.role}" if ahead is not None else "")
                     + (f"; {meanwhile}" if meanwhile else ""))
        done.update(_in_workers(ctx, prep, plans, slots=jobs, given=given, ahead=ahead))
    return {name: done[name] for name in ctx.config.backends if name in done}


def needs_target(ctx: Context, prep: Prepared, group: list[str]) -> bool:
    """Whether a group's exports are best made where the target is built: one needs the function itself
    (`Backend.needs_target_for`: ONNX's jax2onnx route; the stage a backend builds on when exported for it
    alone), a module the handoff has none of (fixed sizes, another platform, lifted weights), or imports a
    framework the target's build imported (`Backend.export_modules` in `Context.target_modules`: keras-hub imports
    TensorFlow, so the SavedModel export costs that worker nothing more, where another would import TensorFlow
    for it). Where it is planned never changes what it makes."""
    for name in group:
        try:
            backend = get_backend(name)
            options = _options(ctx, prep, name, None)
            stage = get_backend(backend.builds_on) if backend.builds_on and backend.builds_on not in group else None
            stage_options = (backend.stage_options(backend.options_object(backend.resolve_options(
                options.backend_options))) if stage is not None else {})
        except MultiexportError:
            return True
        other = (options.static_sizes or tuple(options.platforms or CPU) != CPU
                 or should_lift(options.external_weights, prep.sig))
        if other or backend.needs_target_for(options.backend_options, prep.sig) or any(
                m.partition(".")[0] in ctx.target_modules for m in backend.export_modules) or (
                stage is not None and stage.needs_target_for(stage_options, prep.sig)):
            return True
    return False


def export_groups(todo: list[str]) -> list[list[str]]:
    """One group per worker: a stage followed by the backends built on it, else a backend alone; costliest
    first (the summed `Backend.export_cost` of its backends; ties in the compare's order). The first workers
    take the first groups and the pool hands out the rest in this order (`plan_workers`), so the longest
    exports start first and the short ones fill in around them: taken last from the pool, IREE's compile (the
    longest single export on most of the zoo's real models, one per size where it falls back) ran alone on
    one core at the end of the export phase (keras_hub_gpt2: ~3 s; keras_mobilenetv2: 16 s)."""
    stage_of = {name: _builds_on(name) for name in todo}
    groups: list[list[str]] = []
    for name in todo:
        stage = stage_of[name]
        if stage in todo:
            continue  # joins its stage's group
        groups.append([name, *(n for n in todo if stage_of[n] == name)])
    return sorted(groups, key=lambda g: -sum(_export_cost(n) for n in g))


def _stage_in(names: list[str], name: str) -> str | None:
    """The stage `name` builds on when it is exported before `name` among `names` (one worker's), else None."""
    stage = _builds_on(name)
    return stage if stage in names[:names.index(name)] else None


def export_jobs(ctx: Context, prep: Prepared, count: int, memory: MemoryPlan | None = None) -> int:
    """How many exports may overlap: the cores, and what memory allows (the memory plan's
    `exports_at_once`: ~3x the weights + 1 GiB per export)."""
    if ctx.config.export_jobs:
        return min(ctx.config.export_jobs, max(count, 1))
    memory = memory if memory is not None else plan_for(ctx, prep, {})
    return max(1, min(count, ctx.threads, memory.exports_at_once))


def plan_for(ctx: Context, prep: Prepared, early: Mapping[str, int], ahead: BuildingWorker | None = None) -> MemoryPlan:
    """The memory plan of this compare's exports (`memory_plan.plan_memory`), beside the live early workers
    `early` (name -> resident bytes), from the memory available now and this process's resident size. ahead:
    the export worker started before the reference (`comparison.ahead`), one of the export workers the plan
    budgets: what it holds already counts as available (measured memory only; a figure the user gives is
    taken as given)."""
    weights = weight_bytes(prep.sig)
    names = [n for n in ctx.config.backends if n not in prep.device.excluded]
    available, source = available_now()
    if ahead is not None and ahead.pid is not None and available is not None and source == MEASURED:
        available += rss_of(ahead.pid)
    return plan_memory(weights, available, int(memory_now()["rss_bytes"]), export_groups(names), early,
                       footprints(names), source)


def say_plan(ctx: Context, memory: MemoryPlan) -> None:
    """The plan as one progress line, before the exports, when memory changes anything (a backend not
    started, the early workers closed, fewer exports at once than the cores allow)."""
    groups = len(export_groups([n for n in memory.export_need if n not in memory.refused]))
    if memory.refused or memory.close_early or memory.exports_at_once < min(groups, ctx.threads):
        ctx.progress(memory.summary())


def _options(ctx: Context, prep: Prepared, name: str, stage_artifact: str | None) -> ExportOptions:
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


def _precision_refused(name: str, prep: Prepared) -> Failure | None:
    """Why `name`'s backend cannot make its precision for this target (unsupported-precision, said before
    any worker starts), or None."""
    precision = split_variant(name)[1]
    if precision == "fp32":
        return None
    try:
        backend = get_backend(name)
        check_weights_quantizable(prep.sig, precision, backend.name, backend.check_precision)
    except BackendUnavailable:
        return None  # the export path says it is unavailable, as for any row
    except ExportError as exc:
        return Failure("gate", exc.category, str(exc))
    return None


def unavailable(name: str) -> Failure | None:
    """Why `name`'s backend cannot export here (its libraries missing), or None."""
    try:
        status = get_backend(name).available()
    except MultiexportError as exc:
        return Failure("gate", Status.UNAVAILABLE.value, str(exc))
    return None if status.ok else Failure("gate", Status.UNAVAILABLE.value, status.reason)


def _in_process(ctx: Context, prep: Prepared, name: str, stage_artifact: str | None) -> Exported | Failure:
    """Export in this process (no TARGET string to load the function elsewhere)."""
    missing = unavailable(name)
    if missing is not None:
        return missing
    ctx.progress(f"{name}: export")
    t0 = time.perf_counter()
    try:
        export_artifact(get_backend(name), ctx.target.fn, prep.sig, ctx.out / name,
                        _options(ctx, prep, name, stage_artifact))
    except MultiexportError as exc:
        return Failure("export", getattr(exc, "category", "export-failed"), str(exc))
    return _record(ctx.out / name, round(time.perf_counter() - t0, 3), None, None)


def _in_worker(ctx: Context, prep: Prepared, names: list[str], given: Given) -> dict[str, Exported | Failure]:
    """Export `names` in one worker, in order."""
    return _in_workers(ctx, prep, [WorkerPlan(tuple(names))], slots=1, alone=True, given=given)


def _in_workers(ctx: Context, prep: Prepared, plans: list[WorkerPlan], slots: int,
                given: Given, alone: bool = False, ahead: BuildingWorker | None = None) -> dict[str, Exported | Failure]:
    """Export every plan's backends, one worker per plan, `slots` at a time (`run.export_pool`; the first in
    `ahead` when given). An export a dead worker did not finish and no other took is exported again, alone
    (`alone`: this is that)."""
    done: dict[str, Exported | Failure] = {}
    names = [n for w in plans for n in (*w.own, *w.pooled)]
    for name in dict.fromkeys(names):
        if (missing := unavailable(name)) is not None:
            done[name] = missing
    pooled = [n for n in plans[0].pooled if n not in done]
    owns = [[n for n in w.own if n not in done] for w in plans]
    pool_jobs = [_job(ctx, prep, name, pooled, True, alone) for name in pooled]
    own_jobs = [[_job(ctx, prep, name, own, False, alone) for name in own] for own in owns]
    spec = present(ctx.spec, "workers export from a TARGET string")
    left = export_in_workers(spec, ctx.out, own_jobs, pool_jobs, slots, ctx.config.timeout, given.expected,
                             given.handoff, ahead)
    retry = []
    for name, job in left.items():
        if job.failure is not None:
            done[name] = Failure("export", *job.failure)
        elif job.reply is None:
            retry.append(name)
        elif job.reply.fingerprint != prep.fingerprint and job.by_ahead and ahead is not None and ahead.own_environment:
            retry.append(name)  # built under the timed workers' settings: judged from a worker of its own instead
        elif job.reply.fingerprint != prep.fingerprint:
            done[name] = Failure("target", Status.NONDETERMINISTIC_TARGET.value, (
                f"Target '{ctx.target.name}' | loads with different example values or weights in a fresh process "
                "(random values without a fixed seed?), expected the same: seed them, or compare from Python with "
                "multiexport.compare(...), which exports in this process"))
        else:
            done[name] = _record(ctx.out / name, round(job.reply.seconds, 3), round(job.reply.cpu_seconds, 3),
                                 job.reply.peak_rss_bytes, job.reply.child_peak_rss_bytes)
    for name in retry:  # each export a dead worker did not finish, alone in a fresh worker
        done.update(_in_worker(ctx, prep, [name], given))
    return done


def _job(ctx: Context, prep: Prepared, name: str, names: list[str], pooled: bool, alone: bool) -> ExportJob:
    """`name`'s export among `names` (one worker's, or the pool), starting from its stage when that comes
    before it there; said as it is planned."""
    stage = _stage_in(names, name)
    options = _options(ctx, prep, name, str(ctx.out / stage) if stage else None)
    place = names.index(name)
    # Said, not marked: exports overlap, so the timeline keeps the phase as one step (each export's own
    # seconds are its row's); an export again alone, after the phase, is a step of its own.
    (ctx.progress if alone else ctx.say)(f"{name}: export in a worker process" + (
        " (the first worker free)" if pooled else f" (after {names[place - 1]}, in its worker)" if place else ""))
    return ExportJob(name, ctx.out / name, encode(options))


def _record(directory: Path, seconds: float | None, cpu_seconds: float | None, peak_rss_bytes: int | None,
            child_peak_rss_bytes: int | None = None) -> Exported:
    """The export's outcome: its timings, and the row's facts from the manifest on disk."""
    manifest = Manifest.read(directory)
    return Exported(
        artifact=str(directory), manifest=manifest, seconds=seconds, cpu_seconds=cpu_seconds,
        peak_rss_bytes=peak_rss_bytes, child_peak_rss_bytes=child_peak_rss_bytes,
        binding=tuple(Binding(b.name, b.used, b.param, _caller_key(manifest, b)) for b in manifest.inputs),
        warnings=tuple(manifest.warnings), weights={k: v for k, v in manifest.weights.items() if k != "tensors"},
        versions=dict(manifest.versions), requires=dict(manifest.requires), supports=dict(manifest.supports),
        setup=_setup(manifest.format.get("setup")), artifact_bytes=sum(manifest.inventory.values()),
        precision_facts=to_data(manifest.precision) if manifest.precision is not None else None)


def _setup(value: object) -> dict[str, Any] | None:
    """The one-time setup an export paid, as the manifest's format facts record it (a JSON object), else None."""
    return dict(value) if isinstance(value, dict) else None


def _builds_on(name: str) -> str | None:
    try:
        return backend_class(name).builds_on
    except MultiexportError:
        return None


def _export_cost(name: str) -> float:
    try:
        return float(backend_class(name).export_cost)
    except MultiexportError:
        return 1.0


def _static_modules(name: str) -> bool:
    """Whether `name`'s native consumer needs modules refined per size (it compiles no symbolic module)."""
    consumer = consumer_for(name)
    return consumer is not None and consumer.static_modules


def _caller_key(manifest: Manifest, binding) -> str | None:
    """The key a caller must still feed for a leaf the module does not read (a declared, unread input)."""
    return binding.param if not binding.used and isinstance(binding.param, str) else None
