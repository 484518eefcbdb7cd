"""Numerical parity: a backend's outputs against the JAX reference, per named output leaf.

Every leaf of every trial is checked and all statistics kept (no stop at the first failure); the
result is one `results.ParityVerdict`. Failures name the leaf, the trial and what differs; a NaN/Inf
mismatch says on which side the non-finite values are and which input leaves were non-finite.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..dtypes import is_complex, is_float, parse_dtype
from ..results.parity import ExcludedTrial, LeafStats, LeafVerdict, ParityVerdict, Tolerance
from .rounding import DRAWS
from .tolerance import SENSITIVITY_MARGIN, default_tolerance, tolerance_for

_ULP_INTS = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def compare_leaf(name: str, got: Any, expected: np.ndarray, expected_dtype: str, tol: Tolerance, trial: str = "",
                 inputs_note: str = "") -> LeafVerdict:
    """Compare one output leaf; every statistic is computed even when an early check fails.

    inputs_note: what the trial's inputs were like, added to NaN/Inf messages ("inputs all finite").
    """
    got = np.asarray(got)
    expected = np.asarray(expected)
    base = dict(
        shape_match=got.shape == expected.shape, dtype_match=got.dtype.name == expected_dtype,
        got_dtype=got.dtype.name, expected_dtype=expected_dtype,
        got_shape=list(got.shape), expected_shape=list(expected.shape),
    )
    where = f" in trial '{trial}'" if trial else ""
    reasons = []
    if not base["shape_match"]:
        reasons.append(f"Output '{name}' | got shape {tuple(got.shape)}, expected {tuple(expected.shape)}{where}")
        return LeafVerdict(trial, name, False, tol, LeafStats(**base, compared=False), reasons)
    if not base["dtype_match"]:
        reasons.append(f"Output '{name}' | got dtype {got.dtype.name}, expected {expected_dtype}{where}")
    s = LeafStats(**base, **_value_stats(got, expected, expected_dtype, tol))
    if s.nan_mismatch:
        side = _side(s.nan_got_only, s.nan_ref_only, "NaN")
        reasons.append(f"Output '{name}' | NaN pattern differs at {s.nan_mismatch} of {s.count} elements ({side}){where}"
                       + (f"; {inputs_note}" if inputs_note else ""))
    if s.inf_mismatch:
        side = _side(s.inf_got_only, s.inf_ref_only, "Inf")
        reasons.append(f"Output '{name}' | Inf pattern differs at {s.inf_mismatch} of {s.count} elements ({side}"
                       f"{_first_inf_difference(got, expected)}){where}" + (f"; {inputs_note}" if inputs_note else ""))
    if s.mismatch_count:
        at = (f" at {tuple(s.worst_index)} (got {s.worst_got:.7g}, expected {s.worst_expected:.7g})"
              if s.worst_index is not None and s.worst_got is not None and s.worst_expected is not None else "")
        bound = ("exact match expected" if tol.rtol == tol.atol == tol.scale == 0
                 else f"beyond atol {tol.atol:g} + scale {tol.scale:g}*max|ref| + rtol {tol.rtol:g}*|ref|")
        reasons.append(
            f"Output '{name}' | {s.mismatch_count} of {s.count} elements {bound}; "
            f"max err {s.max_abs:.3g} ({s.err_scale:.3g} of the leaf's max |ref|), element-wise rel {s.max_rel:.3g}"
            f"{at}{where}"
        )
    return LeafVerdict(trial, name, not reasons, tol, s, reasons)


def _side(got_only: int, ref_only: int, what: str) -> str:
    parts = []
    if got_only:
        parts.append(f"{got_only} {what} in the artifact's output where jax.jit is finite")
    if ref_only:
        parts.append(f"{ref_only} {what} in jax.jit's output where the artifact is finite")
    return ", ".join(parts) or "both non-finite, differently"


def _first_inf_difference(got: np.ndarray, expected: np.ndarray) -> str:
    """'; first at (i, j): got G, expected E', saying when the finite side is its dtype's largest value
    (an infinity saturated to +-max: what TFLite's converter does to +-inf constants)."""
    cast = np.complex128 if "c" in (got.dtype.kind, expected.dtype.kind) else np.float64
    g, e = got.astype(cast), expected.astype(cast)
    differ = (np.isinf(g) != np.isinf(e)) | (np.isinf(g) & np.isinf(e) & (g != e))
    if not differ.any():
        return ""
    index = tuple(int(i) for i in np.argwhere(differ)[0])

    def shown(array: np.ndarray, value) -> str:
        raw = array[index]
        if array.dtype.kind == "f" and np.isfinite(raw) and abs(float(raw)) == float(np.finfo(array.dtype).max):
            return f"{value:.7g} ({'-' if raw < 0 else '+'}max {array.dtype.name}: an infinity saturated to the largest finite value)"
        return f"{value:.7g}"

    return f"; first at {index}: got {shown(got, g[index])}, expected {shown(expected, e[index])}"


def _value_stats(got: np.ndarray, expected: np.ndarray, dtype: str, tol: Tolerance) -> dict[str, Any]:
    dt = parse_dtype(dtype)
    count = int(expected.size)
    if count == 0:
        return {"count": 0}
    if not (is_float(dt) or is_complex(dt)):
        g, e = got.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(g - e)
        scale_ref = float(np.max(np.abs(e)))
        allowance = tol.atol + tol.scale * scale_ref
        bad = diff > allowance + tol.rtol * np.abs(e)
        return _error_stats(g, e, diff, bad, tol, allowance, scale=scale_ref) | {"count": count, "finite": count,
                                                                                 "scale_ref": scale_ref}
    cast = np.complex128 if dt.kind == "c" else np.float64
    g, e = got.astype(cast), expected.astype(cast)
    nan_g, nan_e = np.isnan(g), np.isnan(e)
    inf_g, inf_e = np.isinf(g), np.isinf(e)
    nan_mismatch = int(np.sum(nan_g != nan_e))
    inf_mismatch = int(np.sum((inf_g != inf_e) | (inf_g & inf_e & (g != e))))
    finite = np.isfinite(g) & np.isfinite(e)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(g - e), 0.0)
    magnitude = np.abs(np.where(finite, e, 0.0))
    sentinel = sentinels(magnitude)
    scale_ref = float(np.max(np.where(sentinel, 0.0, magnitude), initial=0.0))
    allowance = tol.atol + tol.scale * scale_ref
    bad = finite & (diff > allowance + tol.rtol * magnitude)
    out = _error_stats(g, e, diff, bad, tol, allowance, mask=finite, scale=scale_ref)
    out.update(count=count, nan_mismatch=nan_mismatch, inf_mismatch=inf_mismatch, finite=int(finite.sum()),
               sentinels=int(sentinel.sum()), scale_ref=scale_ref,
               nan_got_only=int(np.sum(nan_g & ~nan_e)), nan_ref_only=int(np.sum(nan_e & ~nan_g)),
               inf_got_only=int(np.sum(inf_g & ~inf_e)), inf_ref_only=int(np.sum(inf_e & ~inf_g)))
    if dt.kind != "c" and got.dtype == expected.dtype == dt and dt.itemsize in _ULP_INTS:
        out["max_ulp"] = _max_ulp(got, expected, finite)
    return out


SENTINEL_GAP = 1e3  # a mask constant sits this many times above every other magnitude of the leaf
SENTINEL_VALUES = 4  # ... and is one of at most this many distinct values
# The smallest magnitude a mask constant has (flax and most attention code use -1e4 or larger).
SENTINEL_MIN = 1e4


def sentinels(magnitude: np.ndarray) -> np.ndarray:
    """Elements that hold a mask constant: one of the leaf's <= 4 largest distinct magnitudes, with a gap of
    >= 1e3 below it to every other nonzero magnitude (finfo(float32).min or -1e9 beside logits of order 1).

    They are written by `where`, not computed from the other elements, so they must not set the leaf's
    scale: with them, the scale term allowed 1.4e33 of error per element of float32 logits (a false pass).
    A leaf whose large values are many distinct numbers (real data) has none: no gap of 1e3 among them.
    Only magnitudes of at least 1e4 count (masks use -1e4, -1e9, -1e30, finfo.min): a real 1000 beside
    values of 1e-6 is data and keeps setting the scale.
    """
    none = np.zeros(magnitude.shape, bool)
    values = magnitude[magnitude > 0]
    high = float(values.max(initial=0.0))
    for _ in range(SENTINEL_VALUES):
        rest = values[values < high]
        if rest.size == 0:
            return none
        below = float(rest.max())
        if high >= SENTINEL_GAP * below and high >= SENTINEL_MIN:
            return magnitude >= high
        high = below
    return none


def _error_stats(got, ref, diff, bad, tol: Tolerance, allowance: float, mask=None,
                 scale: float | None = None) -> dict[str, Any]:
    mask = np.ones(diff.shape, bool) if mask is None else mask
    d = diff[mask]
    if d.size == 0:
        return {}
    absref = np.where(mask, np.abs(ref), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(absref > 0, diff / absref, np.where(diff > 0, np.inf, 0.0))
        need_rtol = np.where(absref > 0, (diff - allowance) / absref, np.where(diff > allowance, np.inf, 0.0))
    rel, need_rtol = np.where(mask, rel, 0.0), np.where(mask, need_rtol, 0.0)
    mismatch = int(np.sum(bad))
    worst = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0) if mismatch else diff)), diff.shape)
    scale = float(absref.max()) if scale is None else scale
    max_abs = float(d.max())
    return {
        "max_abs": max_abs,
        "max_rel": float(rel.max()),
        "err_scale": max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf")),
        "mean_abs": float(d.mean()),
        "p99_abs": float(np.percentile(d, 99)),
        "mismatch_count": mismatch,
        "mismatch_ratio": mismatch / diff.size,
        "min_atol": float(max(0.0, (diff - tol.rtol * absref)[mask].max())),
        "min_rtol": float(max(0.0, need_rtol.max())),
        "worst_index": [int(i) for i in worst],
        "worst_got": float(np.real(got[worst])),
        "worst_expected": float(np.real(ref[worst])),
    }


def _max_ulp(got: np.ndarray, expected: np.ndarray, finite: np.ndarray) -> int:
    """Largest distance in units in the last place, via the monotonic integer order of IEEE floats."""
    bits = _ULP_INTS[got.dtype.itemsize]

    def ordered(a):
        i = np.ascontiguousarray(a).view(bits).astype(np.int64)
        return np.where(i < 0, np.iinfo(bits).min - i, i)

    d = np.abs(ordered(got) - ordered(expected))
    return int(d[finite].max()) if finite.any() else 0


def check_parity(
    backend: str,
    got: Sequence[Mapping[str, np.ndarray]],
    expected: Sequence[Mapping[str, np.ndarray]],
    outputs: Sequence,
    trials: Sequence[str],
    overrides: Mapping[str, Tolerance] | None = None,
    excluded: Sequence[ExcludedTrial] = (),
    inputs_notes: Sequence[str] | None = None,
    feeds: Sequence[Mapping[str, np.ndarray]] | None = None,
    sensitivity: Mapping[str, float] | None = None,
) -> ParityVerdict:
    """Compare every output leaf of every trial: `got[i]` and `expected[i]` are trial i's named outputs.

    excluded: trials that are no evidence (already left out of got/expected), recorded in the verdict.
    feeds: the trials' inputs, to tell an output that ignores its inputs from trials that were all alike.
    sensitivity: per output leaf, how far rounding alone moves it (measure/rounding.py): a default
        tolerance's scale term is widened to it (measure/tolerance.widened), and the verdict says so where that
        decided the leaf.
    """
    overrides = overrides or {}
    sensitivity = sensitivity or {}
    notes = list(inputs_notes) if inputs_notes is not None else [""] * len(trials)
    verdicts = []
    decided: dict[str, bool] = {}  # leaves whose widened tolerance mattered: passed only under it (True) or failed
    for trial, have, want, note in zip(trials, got, expected, notes, strict=True):
        for leaf in outputs:
            tol = tolerance_for(leaf.name, leaf.dtype, overrides, sensitivity.get(leaf.name))
            if leaf.name not in have:
                stats = LeafStats(False, False, "missing", leaf.dtype, [], list(np.shape(want[leaf.name])), compared=False)
                reason = f"Output '{leaf.name}' | got nothing, expected an array in trial '{trial}'"
                verdicts.append(LeafVerdict(trial, leaf.name, False, tol, stats, [reason]))
                continue
            verdict = compare_leaf(leaf.name, have[leaf.name], want[leaf.name], leaf.dtype, tol, trial, note)
            verdicts.append(verdict)
            unwidened = tolerance_for(leaf.name, leaf.dtype, overrides)
            if tol != unwidened and (not verdict.passed or not compare_leaf(
                    leaf.name, have[leaf.name], want[leaf.name], leaf.dtype, unwidened, trial, note).passed):
                decided[leaf.name] = decided.get(leaf.name, True) and verdict.passed
    weak = weak_checks(expected, outputs, feeds)
    return ParityVerdict(backend, all(v.passed for v in verdicts) and bool(verdicts), verdicts, list(trials),
                         excluded=list(excluded),
                         notes=[*evidence_notes(verdicts, outputs),
                                *widening_notes(outputs, overrides, sensitivity, decided),
                                *weak.values()],
                         weak=list(weak))


def widening_notes(outputs: Sequence, overrides: Mapping[str, Tolerance], sensitivity: Mapping[str, float],
                   decided: Mapping[str, bool]) -> list[str]:
    """Leaves whose default tolerance was widened to this model's rounding sensitivity and for which that
    mattered, with the figures. decided: leaf name -> True where the leaf passed only under the widened
    tolerance, False where it failed even so. A leaf within the default as well gets no note: the widening
    changed nothing there (its tolerance is still recorded in the leaf's verdict)."""
    notes = []
    for leaf in outputs:
        if leaf.name not in decided:  # only a widened tolerance (no override, a measured floor) can decide
            continue
        measured = sensitivity[leaf.name]
        tol, default = tolerance_for(leaf.name, leaf.dtype, overrides, measured), default_tolerance(leaf.dtype)
        capped = " (capped: the model amplifies rounding beyond it)" if tol.scale < SENSITIVITY_MARGIN * measured else ""
        notes.append(f"Output '{leaf.name}' | tolerance scale {tol.scale:.2g}*max|ref| instead of the {leaf.dtype} "
                     f"default {default.scale:g}: rounding alone (every float input and weight moved by one rounding "
                     f"step, {DRAWS} draws) moves jax.jit's output by {measured:.2g} of its max |ref|, and "
                     f"{SENSITIVITY_MARGIN:g}x that is allowed{capped}; "
                     + ("it passes only under this widened tolerance" if decided[leaf.name]
                        else "it fails even under it"))
    return notes


def weak_checks(expected: Sequence[Mapping[str, np.ndarray]], outputs: Sequence,
                feeds: Sequence[Mapping[str, np.ndarray]] | None = None) -> dict[str, str]:
    """Output leaves whose check could not have failed much, with why: jax.jit's output exactly zero in every
    trial, the same in every trial (it does not depend on the inputs checked: a zero-initialised head), or
    only 0/1 values (a softmax of random-init logits saturated to one-hot). A random-init model can make
    parity vacuous; such a leaf is said to be a weak check, never silently counted as evidence."""
    weak: dict[str, str] = {}
    for leaf in outputs:
        indexed = [(i, np.asarray(trial[leaf.name])) for i, trial in enumerate(expected) if leaf.name in trial]
        indexed = [(i, v) for i, v in indexed if v.size]
        values = [v for _, v in indexed]
        if not values or (values[0].dtype.kind in "fc" and not any(np.isfinite(v).any() for v in values)):
            continue  # empty, or no finite value anywhere: evidence_notes already says it is no evidence
        floating = is_float(parse_dtype(leaf.dtype)) or is_complex(parse_dtype(leaf.dtype))
        by_shape: dict[tuple, list[int]] = {}
        for i, v in indexed:
            by_shape.setdefault(v.shape, []).append(i)
        groups = [[np.asarray(expected[i][leaf.name]) for i in g] for g in by_shape.values() if len(g) > 1]
        alike = feeds is not None and all(_same_feeds([feeds[i] for i in g]) for g in by_shape.values() if len(g) > 1)
        if floating and all(not np.any(v) for v in values):
            weak[leaf.name] = (f"Output '{leaf.name}' | weak check: jax.jit gives exactly 0 everywhere in all "
                               f"{len(values)} trials (e.g. a zero-initialised last layer), so any artifact that "
                               "returns zeros passes")
        elif groups and alike:
            weak[leaf.name] = (f"Output '{leaf.name}' | weak check: the {sum(map(len, groups))} trials of each "
                               "size had identical inputs (an example that holds one value everywhere redraws as "
                               "itself), so the check saw one input per size; give varied example values or "
                               "--inputs")
        elif groups and all(all(np.array_equal(g[0], v, equal_nan=floating) for v in g[1:]) for g in groups):
            weak[leaf.name] = (f"Output '{leaf.name}' | weak check: jax.jit's output is the same in all "
                               f"{sum(map(len, groups))} trials of the same shape"
                               + (" although their inputs differ" if feeds is not None else "")
                               + " (it does not depend on the inputs checked), so the check cannot tell a wrong "
                               "computation of the inputs from a right one")
        elif floating and sum(v.size for v in values) >= 4 and all(
                np.isin(v.real if np.iscomplexobj(v) else v, (0.0, 1.0)).all() for v in values):
            weak[leaf.name] = (f"Output '{leaf.name}' | weak check: jax.jit's output holds only 0 and 1 in every "
                               "trial (saturated, e.g. a softmax of random-init logits), so parity compares the "
                               "pattern, not the numbers behind it")
    return weak


def evidence_notes(verdicts: Sequence[LeafVerdict], outputs: Sequence) -> list[str]:
    """Leaves whose check compared no number: NaN/Inf everywhere in every trial (the pattern matched, the
    values are no evidence), and leaves whose mask constants were kept out of the scale."""
    notes = []
    for leaf in outputs:
        mine = [v for v in verdicts if v.name == leaf.name and v.stats.compared and v.stats.count]
        if mine and (is_float(parse_dtype(leaf.dtype)) or is_complex(parse_dtype(leaf.dtype))) \
                and all(v.stats.finite == 0 for v in mine):
            notes.append(f"Output '{leaf.name}' | no finite value in any trial on either side: only its NaN/Inf "
                         "pattern was compared, so its parity is no evidence about its numbers")
        masked = max((v.stats.sentinels for v in mine), default=0)
        if masked:
            notes.append(f"Output '{leaf.name}' | {masked} elements hold mask constants (far above every other "
                         "value): each is checked against its own value, the leaf's scale comes from the rest")
    return notes


def _same_feeds(feeds: Sequence[Mapping[str, np.ndarray]]) -> bool:
    first = feeds[0]
    return all(set(f) == set(first) and all(np.array_equal(np.asarray(f[k]), np.asarray(first[k])) for k in first)
               for f in feeds[1:])


def inputs_note(feed: Mapping[str, np.ndarray]) -> str:
    """Which input leaves of a trial hold NaN or Inf (for NaN/Inf mismatch messages)."""
    bad = []
    for name, value in feed.items():
        a = np.asarray(value)
        if (is_float(a.dtype) or is_complex(a.dtype)) and a.size and not np.isfinite(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)).all():
            bad.append(name)
    return f"non-finite inputs: {', '.join(bad)}" if bad else "inputs all finite"
