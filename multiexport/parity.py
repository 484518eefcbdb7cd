"""Numerical parity: a backend's outputs against the JAX reference, per named output leaf.

Every leaf of every trial is checked and all statistics kept (no stop at the first failure); the
result is one `ParityVerdict` that serialises to JSON and back. Failures name the leaf, the trial and
the statistic that failed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .dtypes import parse_dtype
from .tolerance import Tolerance, tolerance_for


@dataclass(frozen=True)
class LeafStats:
    """Statistics of one output leaf in one trial (floats compared in float64).

    min_atol: smallest absolute allowance (atol + scale*max|ref|) that would pass at the configured rtol;
    min_rtol: smallest rtol that would pass at the configured absolute allowance (inf when an element
    with a zero reference differs by more than that allowance).
    """

    shape_match: bool
    dtype_match: bool
    got_dtype: str
    expected_dtype: str
    got_shape: list[int]
    expected_shape: list[int]
    count: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    mean_abs: float = 0.0
    p99_abs: float = 0.0
    max_ulp: int | None = None
    mismatch_count: int = 0
    mismatch_ratio: float = 0.0
    nan_mismatch: int = 0
    inf_mismatch: int = 0
    min_atol: float = 0.0
    min_rtol: float = 0.0
    worst_index: list[int] | None = None
    worst_got: float | None = None
    worst_expected: float | None = None


@dataclass(frozen=True)
class LeafVerdict:
    trial: str
    name: str
    passed: bool
    tolerance: Tolerance
    stats: LeafStats
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ParityVerdict:
    """Parity of one backend over every trial and output leaf."""

    backend: str
    passed: bool
    leaves: list[LeafVerdict]
    trials: list[str]
    reference: str = "jax.jit"

    @property
    def failures(self) -> list[LeafVerdict]:
        return [v for v in self.leaves if not v.passed]

    def worst(self) -> dict[str, LeafVerdict]:
        """Per output leaf, the trial with the largest error (a failing one first)."""
        out: dict[str, LeafVerdict] = {}
        for v in self.leaves:
            cur = out.get(v.name)
            key = (not v.passed, v.stats.max_rel if math.isfinite(v.stats.max_rel) else 1e300, v.stats.max_abs)
            if cur is None or key > (not cur.passed, cur.stats.max_rel if math.isfinite(cur.stats.max_rel) else 1e300, cur.stats.max_abs):
                out[v.name] = v
        return out

    def summary(self) -> str:
        if self.passed:
            return f"{self.backend}: parity passed on {len(self.trials)} trials"
        return f"{self.backend}: parity FAILED: " + "; ".join(r for v in self.failures for r in v.reasons)

    def to_json(self) -> dict[str, Any]:
        return _finite(asdict(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ParityVerdict":
        leaves = [
            LeafVerdict(
                trial=v["trial"], name=v["name"], passed=v["passed"], tolerance=Tolerance(**v["tolerance"]),
                stats=LeafStats(**_unfinite(v["stats"])), reasons=list(v["reasons"]),
            )
            for v in data["leaves"]
        ]
        return cls(backend=data["backend"], passed=data["passed"], leaves=leaves, trials=list(data["trials"]),
                   reference=data.get("reference", "jax.jit"))


def compare_leaf(name: str, got: Any, expected: np.ndarray, expected_dtype: str, tol: Tolerance, trial: str = "") -> LeafVerdict:
    """Compare one output leaf; every statistic is computed even when an early check fails."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    stats = dict(
        shape_match=got.shape == expected.shape, dtype_match=got.dtype.name == expected_dtype,
        got_dtype=got.dtype.name, expected_dtype=expected_dtype,
        got_shape=list(got.shape), expected_shape=list(expected.shape),
    )
    where = f" in trial '{trial}'" if trial else ""
    reasons = []
    if not stats["shape_match"]:
        reasons.append(f"Output '{name}' | got shape {tuple(got.shape)}, expected {tuple(expected.shape)}{where}")
        return LeafVerdict(trial, name, False, tol, LeafStats(**stats), reasons)
    if not stats["dtype_match"]:
        reasons.append(f"Output '{name}' | got dtype {got.dtype.name}, expected {expected_dtype}{where}")
    stats.update(_value_stats(got, expected, expected_dtype, tol))
    s = LeafStats(**stats)
    if s.nan_mismatch:
        reasons.append(f"Output '{name}' | NaN pattern differs at {s.nan_mismatch} elements{where}")
    if s.inf_mismatch:
        reasons.append(f"Output '{name}' | Inf pattern differs at {s.inf_mismatch} elements{where}")
    if s.mismatch_count:
        at = f" at {tuple(s.worst_index)} (got {s.worst_got:.7g}, expected {s.worst_expected:.7g})" if s.worst_index is not None else ""
        bound = ("exact match expected" if tol.rtol == tol.atol == tol.scale == 0
                 else f"beyond atol {tol.atol:g} + scale {tol.scale:g}*max|ref| + rtol {tol.rtol:g}*|ref|")
        reasons.append(
            f"Output '{name}' | {s.mismatch_count} of {s.count} elements {bound}; "
            f"max_abs {s.max_abs:.3g}, max_rel {s.max_rel:.3g}{at}{where}"
        )
    return LeafVerdict(trial, name, not reasons, tol, s, reasons)


def _value_stats(got: np.ndarray, expected: np.ndarray, dtype: str, tol: Tolerance) -> dict[str, Any]:
    dt = parse_dtype(dtype)
    count = int(expected.size)
    if count == 0:
        return {"count": 0}
    is_float = dt.kind in "fc" or dt.name.startswith(("bfloat", "float"))
    if not is_float:
        g, e = got.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(g - e)
        allowance = tol.atol + tol.scale * float(np.max(np.abs(e)))
        bad = diff > allowance + tol.rtol * np.abs(e)
        return _error_stats(g, e, diff, bad, tol, allowance) | {"count": count}
    cast = complex if dt.kind == "c" else np.float64
    g, e = got.astype(cast), expected.astype(cast)
    nan_g, nan_e = np.isnan(g), np.isnan(e)
    inf_g, inf_e = np.isinf(g), np.isinf(e)
    nan_mismatch = int(np.sum(nan_g != nan_e))
    inf_mismatch = int(np.sum((inf_g != inf_e) | (inf_g & inf_e & (g != e))))
    finite = np.isfinite(g) & np.isfinite(e)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(g - e), 0.0)
    allowance = tol.atol + tol.scale * float(np.max(np.abs(np.where(finite, e, 0.0)), initial=0.0))
    bad = finite & (diff > allowance + tol.rtol * np.abs(np.where(finite, e, 0.0)))
    out = _error_stats(g, e, diff, bad, tol, allowance, mask=finite)
    out.update(count=count, nan_mismatch=nan_mismatch, inf_mismatch=inf_mismatch)
    if dt.kind != "c" and got.dtype == expected.dtype == dt:
        out["max_ulp"] = _max_ulp(got, expected, finite)
    return out


def _error_stats(got, ref, diff, bad, tol: Tolerance, allowance: float, mask=None) -> dict[str, Any]:
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
    return {
        "max_abs": float(d.max()),
        "max_rel": float(rel.max()),
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
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
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
) -> ParityVerdict:
    """Compare every output leaf of every trial: `got[i]` and `expected[i]` are trial i's named outputs."""
    overrides = overrides or {}
    verdicts = []
    for trial, have, want in zip(trials, got, expected, strict=True):
        for leaf in outputs:
            tol = tolerance_for(leaf.name, leaf.dtype, overrides)
            if leaf.name not in have:
                stats = LeafStats(False, False, "missing", leaf.dtype, [], list(np.shape(want[leaf.name])))
                reason = f"Output '{leaf.name}' | got nothing, expected an array in trial '{trial}'"
                verdicts.append(LeafVerdict(trial, leaf.name, False, tol, stats, [reason]))
                continue
            verdicts.append(compare_leaf(leaf.name, have[leaf.name], want[leaf.name], leaf.dtype, tol, trial))
    return ParityVerdict(backend, all(v.passed for v in verdicts), verdicts, list(trials))


def _finite(obj):
    """JSON has no inf/nan: write them as strings, read back by `_unfinite`."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _unfinite(obj):
    if isinstance(obj, str) and obj in ("inf", "-inf", "nan"):
        return float(obj)
    if isinstance(obj, dict):
        return {k: _unfinite(v) for k, v in obj.items()}
    return obj
