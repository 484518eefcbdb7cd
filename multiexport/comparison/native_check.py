"""`compare --native`: one backend's artifact run from disk by its native, Python-free consumer.

On the same trials as its Python runner (those the consumer can take: a symbolic XLA artifact runs
the static modules refined for the sizes compare asked the export for; an artifact holding one model per size
runs each trial in the model of its size), its outputs are checked against
jax.jit with the same tolerances, and its per-call latency is measured inside the program at each batch
size the Python runner was timed at, for as many calls. One native failure is that row's native
verdict; it never touches the Python verdict or the other rows.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import BackendUnavailable, MultiexportError, RunError, present
from ..exporting.feed import check_signature_feed
from ..exporting.native_section import consumer_for
from ..exporting.precision import split_variant
from ..exporting.static_runner import has_model, held_sizes, size_key
from ..measure.accuracy import judge
from ..measure.bench import summarize
from ..measure.pairing import all_ratios
from ..measure.parity import check_parity, inputs_note
from ..measure.plan import native_supports
from ..native.run import print_command, run as native_run
from ..results import NATIVE_SUFFIX, BenchResult, NativeResult, NativeSize, Status
from .outcomes import Exported
from .stages import Context, Prepared, Rows
from .verdict import judged

# At least MIN_CALLS timed calls, or as many as fill the bench time, whichever is more (capped at MAX_CALLS).
MIN_CALLS, MAX_CALLS = 200, 5000


def check_native(ctx: Context, prep: Prepared, name: str, exported: Exported, checked: Sequence[tuple[Any, Any]],
                 excluded, bench: BenchResult | None) -> NativeResult | None:
    """`name`'s native verdict and latency, or None when its backend has no native consumer."""
    declared = consumer_for(name)
    if declared is None:
        return None
    consumer, manifest = declared.consumer, exported.manifest
    config, directory = ctx.config, exported.artifact
    if prep.device.chosen not in declared.devices:
        return NativeResult(consumer, Status.NO_GPU,
                            f"this consumer runs on {', '.join(declared.devices)} only, not on {prep.device.chosen}")
    models = _size_models(manifest, directory)
    if not manifest.native and models is None:
        return NativeResult(consumer, Status.UNAVAILABLE, "the artifact has no native section (re-export it)")
    # On a GPU plan pjrt_run loads jax's CUDA PJRT plugin (the static modules are refined for cuda there).
    # Compare exported this artifact itself, into the directory it claimed, and its run worker loaded it
    # through the trust gate: checking it again here would import TensorFlow into the compare's own process.
    kwargs: dict[str, Any] = {"threads": ctx.threads, "plugin": config.native_plugin,
                              "device": prep.device.chosen, "trust_artifact": True}
    try:
        command = print_command(directory, **kwargs)  # builds the program first, so "unavailable" is said once
    except BackendUnavailable as exc:
        return NativeResult(consumer, Status.UNAVAILABLE, str(exc))
    except MultiexportError as exc:
        return NativeResult(consumer, Status.RUN_FAILED, str(exc))
    why_not = [_supports(manifest, models, t.dims) for t, _ in checked]
    usable = [pair for pair, why in zip(checked, why_not) if why is None]
    skipped = [f"{t.name} ({why})" for (t, _), why in zip(checked, why_not) if why is not None]
    if not usable:
        return NativeResult(consumer, Status.SIZE_UNSUPPORTED, "; ".join(skipped) or "no trial to run", command)
    ctx.progress(f"{name}: native run ({consumer}) on {len(usable)} trials")
    outputs = []
    for trial, _ in usable:
        try:
            outputs.append(native_run(directory, trial.feed, timeout=config.timeout, **kwargs).outputs)
        except MultiexportError as exc:
            status = Status.parse(getattr(exc, "category", "run-failed")) if isinstance(exc, RunError) else Status.RUN_FAILED
            return NativeResult(consumer, status, f"trial '{trial.name}': {exc}", command)
    verdict = check_parity(f"{name} native", outputs, [r for _, r in usable], prep.sig.outputs,
                           [t.name for t, _ in usable], config.tolerances, excluded=excluded,
                           inputs_notes=[inputs_note(t.feed) for t, _ in usable], sensitivity=prep.sensitivity)
    notes = [f"not run natively: {', '.join(skipped)}"] if skipped else []
    precision, accuracy = split_variant(name)[1], None
    if precision != "fp32":  # a reduced-precision artifact is held to its accuracy budget natively too
        accuracy = judge(precision, outputs, [r for _, r in usable], [leaf.name for leaf in prep.sig.outputs],
                         config.accuracy, synthetic=config.inputs is None)
    status, reason = judged(verdict, accuracy, notes)
    result = NativeResult(consumer, status, reason, command, verdict)
    if config.bench and bench is not None:
        result.sizes = _latency(ctx, prep, name, exported, bench, kwargs, models)
    return result


def _latency(ctx: Context, prep: Prepared, name: str, exported: Exported, bench: BenchResult, kwargs,
             held: list[dict[str, int]] | None) -> list[NativeSize]:
    """Per-call latency inside the native program at each size the Python runner was timed at (held: the
    artifact's size models, `_size_models`)."""
    config, manifest = ctx.config, exported.manifest
    timing = present(config.bench, "native latency is measured only with a benchmark")
    python = {s.batch: s for s in bench.sizes}
    sizes = []
    for batch, feed in prep.bench_feeds:
        size = python.get(batch)
        if size is None or size.status is not Status.OK or (size.latency is None and size.first_call_s is None):
            sizes.append(NativeSize(batch, Status.SIZE_UNSUPPORTED if size is not None and size.status is
                                    Status.SIZE_UNSUPPORTED else Status.BENCH_FAILED,
                                    "the Python runner has no latency at this size to set beside it"))
            continue
        dims = _dims(prep.sig, feed)
        why = _supports(manifest, held, dims)
        if why:
            sizes.append(NativeSize(batch, Status.SIZE_UNSUPPORTED, why))
            continue
        # As many calls as fill the configured bench time at the Python runner's speed (its cold-start call in
        # paired mode, where its steady-state figure comes later), and never fewer than MIN_CALLS. In paired
        # mode this first figure also sizes the native slices of the interleaved rounds, which replace it.
        per_call = max(size.latency.p50_ms if size.latency is not None else 1e3 * (size.first_call_s or 0.0), 1e-3)
        calls = max(MIN_CALLS, min(MAX_CALLS, int(timing.bench_time * 1e3 / per_call)))
        ctx.progress(f"{name}: native latency" + (f" at batch {batch}" if batch is not None else "") +
                     f" ({calls} calls)")
        try:
            done = native_run(exported.artifact, feed, iters=calls, warmup=max(timing.warmup_iters, 1),
                              timeout=config.timeout, **kwargs)
        except MultiexportError as exc:
            sizes.append(NativeSize(batch, Status.BENCH_FAILED, str(exc)))
            continue
        sizes.append(measured_size(batch, present(done.samples_ns, "a timed native run gives its samples"),
                                   "alone", size.latency.p50_ms if size.latency is not None else None))
    return sizes


def measured_size(batch: int | None, samples_ns, measured: str, python_p50_ms: float | None) -> NativeSize:
    """A native size from every timed call's time: the Python runner's statistic (p50 with its interval), and
    the program's own order statistics kept beside it."""
    stats = summarize(np.asarray(samples_ns))
    return NativeSize(batch, calls=stats.n, min_ms=stats.min_ms, median_ms=stats.p50_ms, p90_ms=stats.p90_ms,
                      max_ms=stats.max_ms, mean_ms=stats.mean_ms, python_p50_ms=python_p50_ms, latency=stats,
                      measured=measured)


def native_slices(ctx: Context, prep: Prepared, rows: Rows) -> dict[str, Any]:
    """The paired rounds' native participants: "<backend> native" -> a slice function, for every row whose
    native run passed parity and was timed alone at some size (that figure sizes its slices)."""
    slices = {}
    config = ctx.config
    for name, row in rows.items():
        native = row.native
        if native is None or native.status is not Status.OK or not any(s.latency for s in native.sizes):
            continue
        estimate = {s.batch: s.latency.p50_ms for s in native.sizes if s.latency is not None}
        kwargs: dict[str, Any] = {"threads": ctx.threads, "plugin": config.native_plugin,
                                  "device": prep.device.chosen, "trust_artifact": True}

        def one_slice(i, seconds, min_calls, max_calls, row=row, estimate=estimate, kwargs=kwargs):
            batch, feed = prep.bench_feeds[i]
            if batch not in estimate:
                raise RunError(f"Native consumer | not timed alone at batch {batch}, so not paired there")
            # the bench time's share of calls, and never under MIN_CALLS over all the rounds
            calls = max(min_calls, -(-MIN_CALLS // config.rounds),
                        min(max_calls, int(seconds * 1e3 / max(estimate[batch], 1e-4))))
            bench = present(config.bench, "native slices are timed only with a benchmark")
            done = native_run(row.artifact, feed, iters=calls, warmup=max(bench.warmup_iters, 1),
                              timeout=config.timeout, **kwargs)
            return present(done.samples_ns, "a timed native run gives its samples")

        slices[name + NATIVE_SUFFIX] = one_slice
    return slices


def apply_paired(ctx: Context, prep: Prepared, rows: Rows, timed: dict[str, Any]) -> None:
    """Replace each native size's figure by the one its paired slices give, with the paired ratio to its
    Python runner over the same rounds (the rounds every participant completed at that size)."""
    rounds = ctx.config.rounds
    for name, row in rows.items():
        native, ours = row.native, timed.get(name + NATIVE_SUFFIX)
        if native is None or ours is None:
            continue
        python = timed.get(name)
        for i, (batch, _) in enumerate(prep.bench_feeds):
            slices = ours.samples.get(i, [])
            at = next((k for k, s in enumerate(native.sizes) if s.batch == batch and s.status is Status.OK), None)
            if at is None or len(slices) != rounds:
                continue
            old = native.sizes[at]
            size = measured_size(batch, np.concatenate(slices), "paired", old.python_p50_ms)
            if python is not None and len(python.samples.get(i, [])) == rounds:
                size.ratio = all_ratios({name: python.samples[i], name + NATIVE_SUFFIX: slices}, batch)[0]
            native.sizes[at] = size


def _size_models(manifest, directory) -> list[dict[str, int]] | None:
    """The size bindings of an artifact holding one model per size, without a native section of its own (each
    run natively by the model of its size: native.run.size_model), else None."""
    return None if manifest.native else held_sizes(manifest, directory)


def _supports(manifest, held: list[dict[str, int]] | None, dims: Mapping[str, int]) -> str | None:
    """None when the native consumer can run at `dims`, else why not: a size the artifact holds no model for,
    or one a symbolic XLA artifact has no refined static module for (measure.plan.native_supports)."""
    if held is None:
        return native_supports(manifest.native, dims)
    if has_model(held, dims):
        return None
    key = size_key({d: dims[d] for d in manifest.symbolic_dims if d in dims})
    return f"no model for {key} (the artifact holds {'; '.join(size_key(h) for h in held)})"


def _dims(sig, feed) -> dict[str, int]:
    return check_signature_feed(sig, feed)[1]
