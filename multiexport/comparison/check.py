"""One backend's run in a compare: the sizes its artifact supports, its run worker, its parity verdict.

An artifact that was built for some sizes only (a converter that could not keep a symbolic dimension)
is checked and timed at exactly those sizes: trials at other sizes are not fed to it (extra trials at
its own size are made instead, so its verdict rests on as much evidence as any other's), and batch sizes
it does not support get a `size-unsupported` entry, never a latency.
"""

from __future__ import annotations

import numpy as np

from ..exporting.manifest import Manifest
from ..results import BackendResult, Status
from ..run.runs import run_artifact
from .stages import Context, Prepared, Timing


def check_row(ctx: Context, prep: Prepared, tm: Timing, row: BackendResult, manifest: Manifest) -> None:
    """Run `row`'s artifact on the trials it supports, time it, and give the row its verdict."""
    from ..measure.inputs import trial_at
    from ..measure.parity import check_parity, inputs_note
    from ..measure.plan import out_of_domain, supported, unsupported_reason
    from ..measure.reference import error_vs

    config = ctx.config
    fixed = manifest.fixed_sizes()
    indices = [i for i, t in enumerate(prep.trials) if supported(t.dims, fixed)]
    trials = [prep.trials[i] for i in indices]
    refs = [prep.ref_outputs[i] for i in indices]
    excluded_names = {e.trial for e in prep.excluded}
    excluded = [e for e in prep.excluded if e.trial in {t.name for t in trials}]
    if fixed and config.inputs is None:  # as much evidence at the artifact's own size as others get at theirs
        rng = np.random.default_rng(config.seed + 7)
        setting = {d: sizes[0] for d, sizes in fixed.items()}
        label = " ".join(f"{d}={v}" for d, v in setting.items())
        for t in range(config.trials):
            extra = trial_at(prep.sig.inputs, prep.sig.example_feed(), setting, rng, f"random{t} {label}",
                             config.val_ranges)
            trials.append(extra)
            refs.append(prep.ref_runner(extra.feed))
        for e in out_of_domain([prep.trials[0], *trials[len(indices):]], [prep.ref_outputs[0], *refs[len(indices):]]):
            excluded.append(e)
            excluded_names.add(e.trial)
    skipped = [t.name for t in prep.trials if not supported(t.dims, fixed)]
    unsupported = {b: unsupported_reason(row.backend, fixed) for b, feed in prep.bench_feeds
                   if fixed and not _fits(manifest, feed)}
    checked = [(t, r) for t, r in zip(trials, refs) if t.name not in excluded_names]
    paired = tm.servers is not None
    what = (f"{'cold start' if paired else 'benchmark'} and run {len(checked)} trials" if config.bench
            else f"run {len(checked)} trials")
    ctx.progress(f"{row.backend}: {what} in {'its paired' if paired else 'a'} worker" + (f" (at {', '.join(f'{d}={s}' for d, s in fixed.items())}"
                                                              " only)" if fixed else ""))
    if tm.servers is not None:  # paired mode: the runner's live worker, loaded once for parity and timing
        from ..run.paired import serve_artifact

        outcome = serve_artifact(tm.servers, row.backend, [t.feed for t, _ in checked], prep.bench_feeds, unsupported,
                                 config.bench)
    else:
        outcome = run_artifact(["run", str(row.artifact)], [t.feed for t, _ in checked], prep.bench_feeds,
                               unsupported, config.bench, prep.device.chosen, ctx.threads, config.timeout)
    if config.native:  # independent evidence: run whatever the Python runner's verdict is
        from .native_check import check_native

        row.native = check_native(ctx, prep, row, manifest, checked, excluded, outcome.bench)
    if outcome.failure:
        row.status, row.reason = Status.parse(outcome.failure[0]), outcome.failure[1]
        return  # no latency for a row that failed
    row.bench = outcome.bench
    verdict = check_parity(row.backend, outcome.outputs, [r for _, r in checked], prep.sig.outputs,
                           [t.name for t, _ in checked], config.tolerances, excluded=excluded,
                           inputs_notes=[inputs_note(t.feed) for t, _ in checked], feeds=[t.feed for t, _ in checked],
                           sensitivity=prep.sensitivity)
    row.parity = verdict
    notes = [f"not supported by this artifact: trials {', '.join(skipped)}"] if skipped else []
    if checked and row.precision != "fp32":  # judged by its accuracy budget; float parity stays as figures
        from ..measure.accuracy import judge

        row.accuracy = judge(row.precision, outputs=outcome.outputs, refs=[r for _, r in checked],
                             leaves=[leaf.name for leaf in prep.sig.outputs], overrides=config.accuracy,
                             synthetic=config.inputs is None)
        row.status, row.reason = ((Status.OK, "; ".join(notes)) if row.accuracy.passed else
                                  (Status.ACCURACY_FAILED, row.accuracy.summary()))
    elif not checked:
        row.status, row.reason = Status.RUN_FAILED, "no trial was evidence (every trial left the model's domain)"
    elif verdict.passed:
        row.status, row.reason = Status.OK, "; ".join(notes)
    else:
        row.status, row.reason = Status.PARITY_FAILED, verdict.summary()
    if prep.truth is not None:
        position = {t.name: i for i, t in enumerate(prep.trials)}
        pairs = [(got, prep.truth[position[t.name]]) for got, (t, _) in zip(outcome.outputs, checked) if t.name in position]
        row.error_vs_float64 = error_vs([g for g, _ in pairs], [w for _, w in pairs])


def _fits(manifest, feed) -> bool:
    """Whether a feed has the shapes the artifact takes (a specialised artifact takes one size only)."""
    from ..errors import InputError
    from ..exporting.feed import check_feed

    try:
        check_feed(manifest.inputs, feed)
    except InputError:
        return False
    return True
