"""One backend's run in a compare: the sizes its artifact supports, its run worker, its parity verdict.

An artifact that was built for some sizes only (a converter that could not keep a symbolic dimension)
is checked and timed at exactly those sizes: trials at other sizes are not fed to it (extra trials at
its own size are made instead, so its verdict rests on as much evidence as any other's), and batch sizes
it does not support get a `size-unsupported` entry, never a latency.

In paired mode without native consumers the rows are checked together (`check_rows_paired`): each runner's
timed cold start alone, one after another, then the untimed parity trials in the runners' workers, as many
at once as the compare's threads, then each verdict.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import InputError, present
from ..exporting.feed import check_feed
from ..exporting.manifest import Manifest
from ..exporting.precision import split_variant
from ..exporting.static_runner import has_model, held_sizes
from ..measure.accuracy import judge
from ..measure.inputs import trial_at
from ..measure.parity import check_parity, inputs_note
from ..measure.plan import out_of_domain, supported, unsupported_reason
from ..measure.reference import error_vs
from ..run.paired import serve_artifact
from ..run.runs import ArtifactRun, run_artifact
from .native_check import check_native
from .outcomes import Checked, Exported, Failure
from .stages import Context, Prepared, Timing


def check_row(ctx: Context, prep: Prepared, tm: Timing, name: str, exported: Exported) -> Checked:
    """Run `name`'s artifact on the trials it supports, time it, and judge its outputs (the row's status
    is `verdict.decide`'s, from what this returns)."""
    config = ctx.config
    plan = _plan(ctx, prep, name, exported)
    paired = tm.servers is not None
    what = (f"{'cold start' if paired else 'benchmark'} and run {len(plan.checked)} trials" if config.bench
            else f"run {len(plan.checked)} trials")
    ctx.progress(f"{name}: {what} in {'its paired' if paired else 'a'} worker{plan.only}")
    if tm.servers is not None:  # paired mode: the runner's live worker, loaded once for parity and timing
        outcome = serve_artifact(tm.servers, name, [t.feed for t, _ in plan.checked], prep.bench_feeds,
                                 plan.unsupported, config.bench)
    else:
        outcome = run_artifact(["run", exported.artifact], [t.feed for t, _ in plan.checked], prep.bench_feeds,
                               plan.unsupported, config.bench, prep.device.chosen, ctx.threads, config.timeout)
    # independent evidence: the native consumer runs whatever the Python runner's verdict is
    native = check_native(ctx, prep, name, exported, plan.checked, plan.excluded, outcome.bench) if config.native else None
    return _judge(ctx, prep, name, plan, outcome, native)


def check_rows_paired(ctx: Context, prep: Prepared, tm: Timing, artifacts: Mapping[str, Exported]) -> dict[str, Checked]:
    """Paired mode without native consumers: every runner's cold start, one at a time (each alone on the
    machine, as `check_row` times it), then every runner's parity trials, `ctx.threads` runners at a time:
    nothing is timed while they run (the rounds start after the last), and a runner's trials in its own worker
    give the same outputs whenever they run. Each row is judged as `check_row` judges it."""
    servers = present(tm.servers, "paired mode has live servers")
    config = ctx.config
    plans = {name: _plan(ctx, prep, name, exported) for name, exported in artifacts.items()}
    colds: dict[str, ArtifactRun] = {}
    if config.bench:
        for name, plan in plans.items():
            ctx.progress(f"{name}: cold start in its paired worker{plan.only}")
            colds[name] = serve_artifact(servers, name, [], prep.bench_feeds, plan.unsupported, config.bench)
    at_once = max(1, min(ctx.threads, len(plans)))
    ctx.progress(f"parity: {', '.join(plans)} run their trials in their paired workers, {at_once} at a time "
                 "(nothing is timed meanwhile)")

    def parity(name: str) -> ArtifactRun:
        return serve_artifact(servers, name, [t.feed for t, _ in plans[name].checked], (), {}, None)

    with ThreadPoolExecutor(max_workers=at_once) as pool:
        runs = dict(zip(plans, pool.map(parity, plans)))
    checked = {}
    for name, plan in plans.items():
        cold, run = colds.get(name), runs[name]
        failure = (cold.failure if cold is not None else None) or run.failure
        outcome = ArtifactRun(run.outputs if failure is None else [], cold.bench if cold is not None else None,
                              failure, run.runner)
        checked[name] = _judge(ctx, prep, name, plan, outcome, None)
    return checked


@dataclass(frozen=True)
class _RowPlan:
    """What one row is checked on.

    checked: (trial, reference outputs) pairs that are evidence for it.
    excluded: the trials among them whose outputs left the model's domain.
    skipped: the names of the trials its artifact does not support.
    unsupported: batch size -> why its artifact is not timed there.
    only: the progress line's note on the sizes it was built for ('' for any size).
    """

    checked: list
    excluded: list
    skipped: list[str]
    unsupported: dict
    only: str


@dataclass(frozen=True)
class _Sizes:
    """The sizes an artifact takes.

    fixed: symbolic dim -> the sizes it takes of it (empty: any size).
    held: for an artifact holding one model per size, the size bindings it holds a model for (a pair of dims
        takes only the combinations built, not every product of their sizes), in its order, the example's first;
        None otherwise.
    """

    fixed: dict[str, list[int]]
    held: list[dict[str, int]] | None

    def takes(self, dims: Mapping[str, int]) -> bool:
        """Whether a feed binding `dims` has a model (or fits the fixed sizes)."""
        return has_model(self.held, dims) if self.held is not None else supported(dims, self.fixed)

    def first(self) -> dict[str, int]:
        """A binding the artifact was built for: its first model's (the example's), else each dim's first size."""
        return dict(self.held[0]) if self.held else {d: sizes[0] for d, sizes in self.fixed.items()}


def _sizes(exported: Exported) -> _Sizes:
    manifest = exported.manifest
    held = held_sizes(manifest, Path(exported.artifact)) if exported.artifact is not None else None
    return _Sizes(manifest.fixed_sizes(), held)


def _plan(ctx: Context, prep: Prepared, name: str, exported: Exported) -> _RowPlan:
    manifest = exported.manifest
    sizes = _sizes(exported)
    fixed = sizes.fixed
    checked, excluded, skipped = _evidence(ctx, prep, sizes)
    unsupported = {b: unsupported_reason(name, fixed) for b, feed in prep.bench_feeds
                   if fixed and not _fits(manifest, sizes, feed)}
    only = f" (at {', '.join(f'{d}={s}' for d, s in fixed.items())} only)" if fixed else ""
    return _RowPlan(checked, excluded, skipped, unsupported, only)


def _judge(ctx: Context, prep: Prepared, name: str, plan: _RowPlan, outcome: ArtifactRun, native) -> Checked:
    """The row's parity (and accuracy, and error against float64) from what its runner gave."""
    config, checked = ctx.config, plan.checked
    if outcome.failure:
        return Checked(failure=Failure("check", *outcome.failure), native=native)  # no latency for a failed row
    verdict = check_parity(name, outcome.outputs, [r for _, r in checked], prep.sig.outputs,
                           [t.name for t, _ in checked], config.tolerances, excluded=plan.excluded,
                           inputs_notes=[inputs_note(t.feed) for t, _ in checked], feeds=[t.feed for t, _ in checked],
                           sensitivity=prep.sensitivity)
    notes = (f"not supported by this artifact: trials {', '.join(plan.skipped)}",) if plan.skipped else ()
    precision = split_variant(name)[1]
    accuracy = None
    if checked and precision != "fp32":  # judged by its accuracy budget; float parity stays as figures
        accuracy = judge(precision, outputs=outcome.outputs, refs=[r for _, r in checked],
                         leaves=[leaf.name for leaf in prep.sig.outputs], overrides=config.accuracy,
                         synthetic=config.inputs is None)
    error = None
    if prep.truth is not None:
        position = {t.name: i for i, t in enumerate(prep.trials)}
        pairs = [(got, prep.truth[position[t.name]]) for got, (t, _) in zip(outcome.outputs, checked) if t.name in position]
        error = error_vs([g for g, _ in pairs], [w for _, w in pairs])
    return Checked(bench=outcome.bench, parity=verdict, evidence=len(checked), accuracy=accuracy, notes=notes,
                   error_vs_float64=error, native=native)


def _evidence(ctx: Context, prep: Prepared, sizes: _Sizes) -> tuple[list, list, list[str]]:
    """The trials an artifact taking `sizes` only is checked on, with their reference outputs: (trial, ref)
    pairs that are evidence, the excluded trials among them (outputs out of the model's domain), and the names
    of the trials it does not support."""
    config, fixed = ctx.config, sizes.fixed
    indices = [i for i, t in enumerate(prep.trials) if sizes.takes(t.dims)]
    trials = [prep.trials[i] for i in indices]
    refs = [prep.ref_outputs[i] for i in indices]
    excluded_names = {e.trial for e in prep.excluded}
    excluded = [e for e in prep.excluded if e.trial in {t.name for t in trials}]
    skipped = [t.name for t in prep.trials if not sizes.takes(t.dims)]
    if fixed and skipped and config.inputs is None:
        # As much evidence at the artifact's own sizes as others get at theirs: trials it cannot take are
        # replaced by as many at its first size, numbered after the compare's own (an artifact holding every
        # size the compare checks takes every trial and gets none: "random0 b=1" twice was two different feeds)
        rng = np.random.default_rng(config.seed + 7)
        setting = sizes.first()  # a binding it holds a model for, not a product of per-dim sizes it may lack
        label = " ".join(f"{d}={v}" for d, v in setting.items())
        for t in range(config.trials, 2 * config.trials):
            extra = trial_at(prep.sig.inputs, prep.sig.example_feed(), setting, rng, f"random{t} {label}",
                             config.val_ranges)
            trials.append(extra)
            refs.append(prep.ref_runner(extra.feed))
        for e in out_of_domain([prep.trials[0], *trials[len(indices):]], [prep.ref_outputs[0], *refs[len(indices):]]):
            excluded.append(e)
            excluded_names.add(e.trial)
    return [(t, r) for t, r in zip(trials, refs) if t.name not in excluded_names], excluded, skipped


def _fits(manifest: Manifest, sizes: _Sizes, feed) -> bool:
    """Whether a feed has the shapes the artifact takes: its leaves' shapes, and for an artifact holding one model
    per size (whose leaves stay symbolic), a size it holds a model for."""
    try:
        _, dims = check_feed(manifest.inputs, feed)
    except InputError:
        return False
    return sizes.takes(dims)
