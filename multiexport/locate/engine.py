"""`locate`: for one trial, the first operation where an artifact parts from jax.jit, and who is at fault.

For each backend: the artifact (the user's, or exported here), run on the trial; the reference module's every
op value (`reference`); the artifact's value for every op it can map (its backend's `intermediates` hook);
the pairing (`pairing`); for the first diverging ops whose inputs agree, a replay of the op alone on the
artifact's inputs (`replay`) says whether the artifact computes that op differently or faithfully amplifies a
difference it was given; `--reduce` writes the culprit as a standalone repro (`reduce`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import MultiexportError, UsageError
from ..exporting import export_artifact
from ..exporting.facts import STATIC_FALLBACK_KEY
from ..exporting.intermediates import IntermediatesRequest, Site
from ..exporting.manifest import Manifest
from ..exporting.options import ExportOptions, RunOptions
from ..exporting.registry import get_backend
from ..exporting.static_runner import models_of, size_key
from ..leaves import build_signature
from ..measure.inputs import Trial, make_trials
from ..measure.tolerance import tolerance_for
from ..results.parity import Tolerance
from ..versions import dist_version
from .pairing import SiteError, align, candidates, compare_site, cone, pair
from .reduce import write_reduced
from .reference import Reference, build_reference
from .replay import ILL_CONDITIONED, replay
from .result import BackendLocation, Finding, LocateResult

REPLAY_LIMIT = 12  # candidates replayed at most, in order, until one is computed differently
HUGE = 1e6  # a first divergence whose values reach past this is called out as exploding activations


@dataclass(frozen=True)
class LocateConfig:
    """What to locate.

    backends: the backends to examine. artifacts: backend -> an artifact directory the user has (examined as
    shipped); the others are exported into `out_dir/artifacts/<backend>`. leaf: look only at the cone of this
    output leaf (None: all outputs). trial: the trial's name ("example", "random0"; None: the first trial on
    which some backend fails parity, else the example). trials, seed: how compare draws its trials.
    tolerances: output-leaf tolerance overrides (the final outputs' parity). cone: how many downstream
    diverging ops to list. reduce: write the culprit as a standalone repro. backend_options: per backend.
    val_ranges, dim_sizes: as compare's (--val-range, --dim-sizes), so a compare's trial is drawn the same.
    """

    backends: tuple[str, ...]
    out_dir: Path
    artifacts: Mapping[str, Path] = field(default_factory=dict)
    leaf: str | None = None
    trial: str | None = None
    trials: int = 2
    seed: int = 0
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    cone: int = 5
    reduce: bool = False
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    val_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    dim_sizes: Mapping[str, Sequence[int]] = field(default_factory=dict)


def locate(target: Any, config: LocateConfig, say: Any = print) -> LocateResult:
    """Run `locate` on `target` (a leaves.Target); `say` gets one line per step."""
    if not config.backends:
        raise UsageError("Option '--backend' | missing, expected one or more backend names")
    backends = {name: get_backend(name) for name in config.backends}
    sig = build_signature(target)
    trials = make_trials(sig.inputs, examples=sig.example_feed(), trials=config.trials, seed=config.seed,
                         val_ranges=config.val_ranges, dim_sizes=config.dim_sizes)
    if config.trial is not None and config.trial not in [t.name for t in trials]:
        raise UsageError(f"Option '--trial' | got {config.trial!r}, expected one of: {', '.join(t.name for t in trials)}")
    if config.leaf is not None and config.leaf not in [leaf.name for leaf in sig.outputs]:
        raise UsageError(f"Option '--leaf' | got {config.leaf!r}, expected one of: "
                         f"{', '.join(leaf.name for leaf in sig.outputs)}")
    config.out_dir.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, set[int]] = {}
    for t in trials:
        for dim, size in t.dims.items():
            sizes.setdefault(dim, set()).add(size)
    static = {dim: tuple(sorted(v)) for dim, v in sizes.items()}
    artifacts = {name: _artifact(backend, target, sig, config, static, say) for name, backend in backends.items()}
    runs: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for name, where in artifacts.items():
        if isinstance(where, Path):
            runs[name] = _run_trials(backends[name], where, trials, say)
    trial = _choose(trials, config, sig, runs, say)
    origin = trial.origin or "as given"
    say(f"trial '{trial.name}' ({origin if len(origin) < 160 else origin[:157] + '...'})")
    reference = build_reference(target.fn, sig, trial.feed, trial.dims)
    say(f"reference: {len(reference.sites)} op results; {reference.agreement}")
    sites = _sites_in_cone(reference, sig, config.leaf)
    answers = []
    for name, where in artifacts.items():
        if not isinstance(where, Path):
            answers.append(BackendLocation(name, error=where))
            continue
        try:
            answers.append(_locate_one(backends[name], where, trial, reference, sites, sig, config, runs, say))
        except MultiexportError as exc:
            answers.append(BackendLocation(name, artifact=str(where), error=str(exc)))
    result = LocateResult(target=sig.name or target.name, trial=trial.name, trial_origin=trial.origin,
                          reference=reference.agreement, backends=tuple(answers),
                          cross=_cross(answers, trial, runs, reference, sig, config),
                          versions={d: dist_version(d) or "" for d in ("jax", "jaxlib", *_distributions(backends))})
    result.write(config.out_dir / "locate.json")
    return result


def _artifact(backend: Any, target: Any, sig: Any, config: LocateConfig, static: Mapping[str, tuple[int, ...]],
              say: Any) -> Path | str:
    """The artifact directory to examine, or why there is none (one line). A symbolic signature is exported with
    static modules for every trial size too (`static`), so a format that needs them has the trial's."""
    if backend.name in config.artifacts:
        return Path(config.artifacts[backend.name])
    where = config.out_dir / "artifacts" / backend.name
    say(f"{backend.name}: exporting into {where}")
    try:
        export_artifact(backend, target.fn, sig, where, ExportOptions(
            keep_unused=True, static_sizes=dict(static),
            backend_options=dict(config.backend_options.get(backend.name, {}))))
    except MultiexportError as exc:
        return f"export failed: {exc}"
    return where


def _run_trials(backend: Any, directory: Path, trials: Sequence[Trial], say: Any) -> dict[str, dict[str, np.ndarray]]:
    runner = backend.load(directory, RunOptions(threads=1))
    try:
        return {t.name: runner(t.feed) for t in trials}
    finally:
        close = getattr(runner, "close", None)
        if close:
            close()


def _choose(trials: Sequence[Trial], config: LocateConfig, sig: Any, runs: Mapping[str, Any], say: Any) -> Trial:
    """The trial asked for; else the first on which some backend's outputs fail parity against jax.jit."""
    if config.trial is not None:
        return next(t for t in trials if t.name == config.trial)
    for trial in trials:
        expected = _jit(sig, trial)
        for outputs in runs.values():
            if _failing(sig, outputs[trial.name], expected, config)[0]:
                return trial
    say("no trial fails parity: locating on the first trial anyway (its largest deviations)")
    return trials[0]


def _jit(sig: Any, trial: Trial) -> dict[str, np.ndarray]:
    import jax

    with jax.default_device(jax.devices("cpu")[0]):
        out = jax.jit(sig.flat_function())(*[trial.feed[leaf.name] for leaf in sig.inputs])
    return {leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, out)}


def _failing(sig: Any, got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
             config: LocateConfig) -> tuple[bool, str]:
    """(whether the outputs fail parity, one line on the worst output)."""
    worst: SiteError | None = None
    failing = False
    for leaf in sig.outputs:
        shape = tuple(np.shape(expected[leaf.name]))
        site = Site(leaf.name, -1, 0, "output", shape, leaf.dtype)
        error = compare_site(site, expected[leaf.name], got[leaf.name],
                             tolerance_for(leaf.name, leaf.dtype, config.tolerances))
        failing = failing or error.status == "diverge"
        if worst is None or error.relative > worst.relative:
            worst = error
    if worst is None:
        return False, "no outputs"
    verdict = "beyond tolerance" if failing else "within tolerance"
    return failing, f"outputs {verdict} of jax.jit; worst {worst.key}: {worst.relative:.3g} of max|ref| {worst.max_ref:.3g}"


def _sites_in_cone(reference: Reference, sig: Any, leaf: str | None) -> tuple[Site, ...]:
    """Every site, or with `leaf` only those the leaf depends on (walked back from the site it returns)."""
    if leaf is None:
        return reference.sites
    value = reference.outputs[leaf]
    by_key = {s.key: s for s in reference.sites}
    ends = [s for s in reversed(reference.sites) if s.shape == value.shape
            and np.array_equal(reference.values[s.key], value, equal_nan=True)][:1]
    needed, stack = set(), [s.key for s in ends]
    while stack:
        key = stack.pop()
        if key in needed or key not in by_key:
            continue
        needed.add(key)
        stack.extend(by_key[key].operands)
    return tuple(s for s in reference.sites if s.key in needed) or reference.sites


def _locate_one(backend: Any, directory: Path, trial: Trial, reference: Reference, sites: tuple[Site, ...], sig: Any,
                config: LocateConfig, runs: Mapping[str, Any], say: Any) -> BackendLocation:
    manifest = Manifest.read(directory)
    if STATIC_FALLBACK_KEY in manifest.format:  # one model per size: the trial's
        models = models_of(manifest, directory)
        if size_key(trial.dims) not in models:
            raise UsageError(f"Artifact '{directory}' | has models for {', '.join(models)}, not for trial "
                             f"'{trial.name}' ({size_key(trial.dims)}): choose another --trial")
        directory = models[size_key(trial.dims)]
        manifest = Manifest.read(directory)
    failing, outputs_line = _failing(sig, runs[backend.name][trial.name], reference.jit_outputs, config)
    work = config.out_dir / "work" / backend.name
    work.mkdir(parents=True, exist_ok=True)
    feed = {leaf.name: trial.feed[leaf.name] for leaf in manifest.inputs if leaf.name in trial.feed}
    request = IntermediatesRequest(directory, manifest, feed, sites, work, RunOptions(threads=1))
    got = backend.intermediates(request)
    values, unmapped = dict(got.values), dict(got.unmapped)
    extra: list[str] = []
    notes: dict[str, str] = {}
    if got.own_sites is not None:
        keys, notes = align(sites, got.own_sites)
        paired = set(keys.values())
        extra = [o.op for o in got.own_sites if o.key not in paired]
        values = {r: got.values[o] for r, o in keys.items() if o in got.values}
        unmapped = {s.key: got.unmapped.get(keys[s.key], "cannot map") if s.key in keys else
                    "cannot map: the artifact's module has no op here (inserted or dropped ops)" for s in sites
                    if s.key not in values}
    # The format's own notes (keyed like its values) first; the alignment's notes about this site win.
    own_notes = dict(got.notes) if got.own_sites is None else \
        {r: got.notes[o] for r, o in keys.items() if o in got.notes}
    notes = {**own_notes, **notes}
    errors = pair(sites, reference.values, values, unmapped, notes)
    mapped = sum(e.status != "unmapped" for e in errors.values())
    say(f"{backend.name}: {mapped} of {len(sites)} op results mapped ({got.how}); {outputs_line}")
    first, culprit = None, None
    for site in candidates(sites, errors)[:REPLAY_LIMIT]:
        finding = Finding(site, errors[site.key], replay(reference, site, values, errors, trial.feed))
        first = first or finding
        if finding.replay and finding.replay.verdict == "op-differs":
            culprit = finding
            break
    anchor = culprit or first
    downstream = tuple(Finding(s, errors[s.key]) for s in cone(sites, anchor.site, errors, config.cone)) if anchor else ()
    reasons: dict[str, int] = {}
    for e in errors.values():
        if e.status == "unmapped":
            reasons[e.note] = reasons.get(e.note, 0) + 1
    answer = BackendLocation(backend.name, str(directory), got.how, got.recompiled, mapped, len(sites), reasons,
                             outputs_line, failing, first, culprit, downstream,
                             _verdict(backend.name, first, culprit, failing, mapped, _magnitude(first, errors), extra))
    if config.reduce and anchor is not None:
        answer = write_reduced(answer, anchor, reference, values, trial, backend, request, config.out_dir)
    return answer


def _magnitude(first: Finding | None, errors: Mapping[str, SiteError]) -> float:
    """The largest |value| at the first divergence and its inputs (the reference's)."""
    if first is None:
        return 0.0
    keys = [first.site.key, *first.site.operands]
    return max((errors[k].max_ref for k in keys if k in errors), default=0.0)


def _verdict(name: str, first: Finding | None, culprit: Finding | None, failing: bool, mapped: int,
             magnitude: float = 0.0, extra: Sequence[str] = ()) -> str:
    if mapped == 0:
        return f"{name}: no intermediate value could be mapped, so no op can be named"
    if first is None:
        ops = sorted(set(extra))
        more = (f"; the artifact's module has {len(extra)} op(s) the reference has not ({', '.join(ops[:4])})"
                if extra else "")
        return (f"{name}: every mapped op agrees with the reference" +
                (f" although the outputs fail: the divergence is in what could not be mapped{more}" if failing else ""))
    if culprit is not None and not failing:
        s = culprit.site
        return (f"{name}: its outputs pass parity; {s.op} ({s.key}) at {s.location or 'unknown'} differs from XLA's "
                f"beyond that op's own rounding on the same inputs ({culprit.replay.relative if culprit.replay else 0:.3g} "
                "of max|ref|), which the outputs absorb: a fact about the runtime, not a failure")
    if culprit is not None:
        s = culprit.site
        return (f"{name} computes {s.op} ({s.key}) differently from jax.jit: given the same inputs its result is "
                f"{culprit.replay.relative if culprit.replay else 0:.3g} of max|ref| away. Source: "
                f"{s.location or 'unknown'}{' in ' + s.scope if s.scope else ''}. The converter or runtime is at fault.")
    s = first.site
    ill = " (an op that can be ill-conditioned)" if s.op in ILL_CONDITIONED else ""
    huge = (f"; it and its inputs reach {magnitude:.3g} on this input (exploding activations)"
            if magnitude > HUGE else "")
    passing = "its outputs pass parity; " if not failing else ""
    return (f"{name}: {passing}the first divergence is at {s.op} ({s.key}){ill} at {s.location or 'unknown'}"
            f"{' in ' + s.scope if s.scope else ''}{huge}, but the artifact computes every replayed op faithfully "
            "on its own inputs: rounding-level differences are amplified by the model on this input, not an op "
            "computed wrongly")


def _cross(answers: Sequence[BackendLocation], trial: Trial, runs: Mapping[str, Any], reference: Reference, sig: Any,
           config: LocateConfig) -> str:
    """Whether the backends that fail agree with each other (then jax.jit is the odd one out)."""
    failing = [a.backend for a in answers if a.failing and a.backend in runs]
    if len(failing) < 2:
        return ""
    first = runs[failing[0]][trial.name]
    agree = all(not _failing(sig, runs[b][trial.name], first, config)[0] for b in failing[1:])
    if agree:
        return (f"{', '.join(failing)} agree with each other within tolerance but not with jax.jit on trial "
                f"'{trial.name}': jax.jit is the odd one out, as on an ill-conditioned input")
    return f"{', '.join(failing)} fail and also differ from each other on trial '{trial.name}'"


def _distributions(backends: Mapping[str, Any]) -> list[str]:
    return [d for b in backends.values() for d in getattr(b, "distributions", ())]
