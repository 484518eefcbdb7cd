"""The first stages of a compare: where each backend runs, then what every row is judged against.

`plan_devices` probes the GPU (on a GPU or auto request only); `prepare` builds the signature, checks
what needs it, makes the trials, runs jax.jit on the first (with its determinism check): all the exports
need. `finish_reference` runs jax.jit on the other trials, measures the rounding floor and records the
reference: what the checks need, so the session may run it while the export workers work. All are
functions of the Context; nothing here writes a row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..dtypes import is_float, parse_dtype
from ..environment import environment
from ..errors import MultiexportError, TargetError
from ..exporting.feed import check_signature_feed
from ..exporting.precision import (
    DEFAULT_CALIBRATION_SAMPLES,
    Calibration,
    calibration_feeds,
    needs_calibration,
    split_variant,
    write_calibration,
)
from ..exporting.tpu_only import tpu_only
from ..leaves import build_signature
from ..leaves.factory_cache import keep_compiles
from ..measure.inputs import Trial, make_trials, synthetic_samples
from ..measure.plan import bench_feeds, out_of_domain
from ..measure.reference import ReferenceRunner, error_vs, float64_outputs, nondeterminism, not_float64, without
from ..measure.rounding import DRAWS, rounding_sensitivity
from ..measure.tolerance import check_patterns, overridden
from ..results import Reference
from ..run.devices import probe_gpu, resolve, tpu_presence
from ..run.rundir import SYNTHETIC_CALIBRATION
from ..versions import dist_version
from .stages import Context, Prepared

if TYPE_CHECKING:
    from ..exporting.precision import Calibration
    from ..leaves import Signature
    from ..measure.inputs import Trial
    from ..run.devices import DevicePlan


def plan_devices(ctx: Context) -> DevicePlan:
    """Where each backend runs: the CPU, or the GPU for those that see one, and whether the TPU rows are added
    (`run.devices.resolve`; a TPU is found without opening it)."""
    config = ctx.config
    here = tpu_presence()
    tpu_here = here.attached and here.libtpu is not None
    probe = config.device == "gpu" or (config.device == "auto" and not tpu_here)
    if probe:
        ctx.progress(f"which backends see a GPU ({', '.join(config.backends)})")
    plan = resolve(config.device, probe_gpu(config.backends) if probe else {}, tpu_here)
    if plan.note:
        ctx.progress(plan.note)
    return plan


def prepare(ctx: Context, device: DevicePlan, on_planned: Callable[[Prepared], None] | None = None) -> Prepared:
    """The signature, the trials and jax.jit's outputs on the first, with its determinism check: what the
    exports need (`finish_reference` adds the rest). Every check that needs the signature runs before
    anything is printed or run, so a usage error is one line. on_planned: called before the reference with
    what the export plan reads (this Prepared without any reference output: the signature, the trials, the
    device plan, the calibration), so the session can start the export worker that builds the target."""
    config, target = ctx.config, ctx.target
    sig = build_signature(target)
    if ctx.spec is not None:  # the reference is timed in a worker: what this process compiles is kept for the next run
        keep_compiles(int(sig.weights.get("baked_bytes", 0)))
    check_patterns(config.tolerances, [leaf.name for leaf in sig.outputs], "Tolerance")
    check_patterns(config.accuracy, [leaf.name for leaf in sig.outputs], "Accuracy budget")  # a typo, as --tol
    trials = _trials(ctx, sig)
    feeds = (bench_feeds(sig, trials, config.batch_sizes, config.seed, config.val_ranges, target.batch_leaves)
             if config.bench else [])
    ctx.progress(f"signature of '{target.name}': {len(sig.inputs)} input leaves, {len(sig.outputs)} outputs")
    jax_gpu = device.chosen == "gpu" and (device.found.get("xla") or {}).get("gpu")
    ref_device = "gpu" if jax_gpu else "cpu"
    ref_runner = ReferenceRunner(target, sig, ref_device, matmul_precision=config.matmul_precision)
    unmeasured = Reference(kind="jax.jit", jax_version=dist_version("jax"), device=ref_device,
                           lifted_weights=ref_runner.lifted_weights, deterministic=False)
    planned = Prepared(device=device, sig=sig, trials=trials, bench_feeds=feeds, ref_device=ref_device,
                       ref_runner=ref_runner, ref_outputs=(), excluded=(), truth=None, reference=unmeasured,
                       environment={}, fingerprint=None, sensitivity={}, nondeterministic=None,
                       calibration=_calibration(ctx, sig, trials), reference_pending=True)
    if on_planned is not None:
        on_planned(planned)
    ctx.progress("reference outputs (jax.jit) for the first trial, and its determinism check")
    first = _reference_outputs(target.name, ref_runner, trials[:1])
    why = nondeterminism(target, sig, ref_runner, trials[0].feed)
    return dataclasses.replace(planned, ref_outputs=first, nondeterministic=why, environment=environment(),
                               reference=dataclasses.replace(unmeasured, deterministic=why is None),
                               fingerprint=sig.fingerprint(target.fn) if ctx.spec is not None else None)


def finish_reference(ctx: Context, prep: Prepared, say: Callable[[str], None]) -> Prepared:
    """`prep` with jax.jit's outputs on every trial, the trials that are no evidence, the rounding floor
    (when the reference is deterministic) and the float64 truth (`--reference float64`). `say`: how each
    step is announced (`ctx.progress` marks it on the timeline; the session passes `ctx.say` when this runs
    beside the exports, whose step then holds these seconds)."""
    if not prep.reference_pending:
        return prep
    config, target, sig, trials = ctx.config, ctx.target, prep.sig, list(prep.trials)
    rest = trials[1:]
    if rest:
        say(f"reference outputs (jax.jit) for the other {len(rest)} trial(s)")
    ref_outputs = [*prep.ref_outputs, *_reference_outputs(target.name, prep.ref_runner, rest)]
    sensitivity = (_rounding(ctx, sig, trials[0], ref_outputs[0], prep.ref_device, say)
                   if prep.nondeterministic is None else {})
    truth = float64_outputs(target, sig, [t.feed for t in trials]) if config.reference == "float64" else None
    reference = dataclasses.replace(prep.reference, rounding_sensitivity=dict(sensitivity) or None)
    if truth is not None:
        narrow = not_float64(truth)
        if narrow:
            truth = without(truth, narrow)
            reference.no_float64_truth = narrow
            say(f"--reference float64: {', '.join(narrow)} not computed in float64 (the function casts back), so "
                "no error against float64 is reported for them")
        reference.jax_error_vs_float64 = error_vs(ref_outputs, truth)
    return dataclasses.replace(prep, ref_outputs=ref_outputs, excluded=out_of_domain(trials, ref_outputs), truth=truth,
                               reference=reference, sensitivity=sensitivity, reference_pending=False)


def _reference_outputs(name: str, ref_runner, trials: list[Trial]) -> list:
    """jax.jit's outputs on every trial; a function whose kernel jax.jit cannot run here (a Pallas call, which
    lowers only for the TPU or a GPU) is the target's limit in one line, not an internal error."""
    try:
        return [ref_runner(t.feed) for t in trials]
    except Exception as exc:
        known = tpu_only(exc, "jax.jit on the CPU, the compare's reference")
        if known is None:
            raise
        raise TargetError(f"Target '{name}' | {known[1]}; compare checks every format against jax.jit on the CPU, "
                          "expected a function it can run there (a kernel with interpret=True runs on the CPU)") from None


def _rounding(ctx: Context, sig: Signature, trial: Trial, ref_output, ref_device: str,
              say: Callable[[str], None]) -> dict[str, float]:
    """How far rounding alone moves each float output leaf no --tolerance covers (measure/rounding.py),
    on the first trial: the default tolerances widen to it. A function it cannot trace again keeps them."""
    leaves = rounding_leaves(ctx, sig)
    if not leaves:
        return {}
    say(f"rounding sensitivity of jax.jit ({DRAWS} runs with inputs and weights moved by one rounding step)")
    try:
        found = rounding_sensitivity(ctx.target, sig, trial.feed, ref_output, ref_device)
    except Exception as exc:  # a measurement that widens tolerances must never stop the compare
        said = str(exc).splitlines()[0][:200] if str(exc) else ""
        say(f"rounding sensitivity not measured ({type(exc).__name__}: {said}): default tolerances apply")
        return {}
    return {leaf.name: found[leaf.name] for leaf in leaves if leaf.name in found}


def rounding_leaves(ctx: Context, sig: Signature) -> list:
    """The output leaves whose rounding floor `finish_reference` measures: float ones no --tolerance covers."""
    return [leaf for leaf in sig.outputs
            if is_float(parse_dtype(leaf.dtype)) and not overridden(leaf.name, ctx.config.tolerances)]


def _trials(ctx: Context, sig: Signature) -> list[Trial]:
    config = ctx.config
    if config.inputs is not None:
        arrays, dims = check_signature_feed(sig, config.inputs)
        return [Trial("inputs", {leaf.name: a for leaf, a in zip(sig.inputs, arrays)}, dims, "the given inputs")]
    trials = make_trials(sig.inputs, examples=sig.example_feed(), trials=config.trials, seed=config.seed,
                         val_ranges=config.val_ranges, dim_sizes=config.dim_sizes)
    if not trials:
        raise MultiexportError(f"Target '{sig.name}' | produced no trials")
    return trials


def _calibration(ctx: Context, sig: Signature, trials: list[Trial]) -> Calibration | None:
    """The int8 rows' calibration: the given file, checked against the signature now (a bad leaf is one line
    before any export), or synthetic samples at the first trial's sizes, drawn apart from the parity trials
    (a quantizer calibrated on the very feeds it is judged on would look better than it is)."""
    config = ctx.config
    if not any(needs_calibration(split_variant(name)[1]) for name in config.backends):
        return None
    if config.calibration is not None:
        given = Calibration(str(Path(config.calibration).resolve()), False, "")
        count = len(calibration_feeds(sig, given))  # checked now: a bad leaf is one line before any export
        ctx.progress(f"calibration for int8: {count} samples from {config.calibration}")
        return dataclasses.replace(given, how=f"{count} samples given in {Path(config.calibration).name}")
    feeds = synthetic_samples(sig.inputs, sig.example_feed(), trials[0].dims, config.seed + 1009,
                              DEFAULT_CALIBRATION_SAMPLES, config.val_ranges)
    path = write_calibration(ctx.out / SYNTHETIC_CALIBRATION, feeds)  # stamped: the next run in OUT removes it
    how = (f"{DEFAULT_CALIBRATION_SAMPLES} synthetic samples at the first trial's sizes, drawn like the trials "
           f"(seed {config.seed + 1009}, not the parity trials); give real data with --calibration")
    ctx.progress(f"calibration for int8: {how}")
    return Calibration(str(path), True, how)

