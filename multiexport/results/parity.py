"""Parity results as data: per leaf and trial statistics, verdicts, and the one definition of "worst".

Computed by `measure.parity`; read by every report. The headline error of a leaf is `err_scale`, its
largest absolute error relative to the leaf's largest reference magnitude: an element-wise relative
error is dominated by elements that cancel to about zero, so it is kept beside it, not in its place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tolerance:
    """An element passes when |got - ref| <= atol + scale * max|ref| + rtol * |ref|.

    rtol: relative to the element's reference value.
    atol: absolute.
    scale: relative to the leaf's largest reference magnitude (accepts rounding at elements that cancel).
    """

    rtol: float
    atol: float
    scale: float = 0.0

    def text(self) -> str:
        return f"rtol {self.rtol:g}, atol {self.atol:g}" + (f", scale {self.scale:g}" if self.scale else "")


@dataclass(frozen=True)
class LeafStats:
    """Statistics of one output leaf in one trial (floats compared in float64).

    shape_match, dtype_match: whether the artifact's output has the reference's shape and dtype.
    got_dtype, expected_dtype, got_shape, expected_shape: what each side had.
    compared: whether values were compared at all (not when the shapes differ).
    count: elements compared.
    max_abs, mean_abs, p99_abs: absolute errors over the finite elements.
    max_rel: largest element-wise relative error (inf where a zero reference differs).
    err_scale: max_abs / max|ref|, the headline error relative to the leaf's scale.
    max_ulp: largest distance in units in the last place (same dtype only), None otherwise.
    mismatch_count, mismatch_ratio: elements beyond tolerance (for ints and bools: unequal).
    nan_mismatch, inf_mismatch: elements where the NaN / Inf pattern differs.
    nan_got_only, nan_ref_only: of those, NaN in the artifact's output only / in the reference only.
    inf_got_only, inf_ref_only: of the Inf mismatches, an infinity in the artifact's output only / in the
        reference only (e.g. a converter that saturates -inf to the largest finite value: ref_only).
    min_atol: smallest absolute allowance (atol + scale*max|ref|) that would pass at the configured rtol.
    min_rtol: smallest rtol that would pass at the configured absolute allowance.
    worst_index, worst_got, worst_expected: the element with the largest failing (else largest) error.
    finite: elements where both sides are finite (the values actually compared).
    sentinels: elements holding a few huge constants far above the rest (a mask value such as
        finfo(float32).min or -1e9): left out of the leaf's scale, each still checked against its own value.
    scale_ref: the magnitude the scale term and err_scale use: max|ref| over the finite non-sentinel elements.
    """

    shape_match: bool
    dtype_match: bool
    got_dtype: str
    expected_dtype: str
    got_shape: list[int]
    expected_shape: list[int]
    compared: bool = True
    count: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    err_scale: float = 0.0
    mean_abs: float = 0.0
    p99_abs: float = 0.0
    max_ulp: int | None = None
    mismatch_count: int = 0
    mismatch_ratio: float = 0.0
    nan_mismatch: int = 0
    inf_mismatch: int = 0
    nan_got_only: int = 0
    nan_ref_only: int = 0
    inf_got_only: int = 0
    inf_ref_only: int = 0
    min_atol: float = 0.0
    min_rtol: float = 0.0
    worst_index: list[int] | None = None
    worst_got: float | None = None
    worst_expected: float | None = None
    finite: int = 0
    sentinels: int = 0
    scale_ref: float = 0.0


@dataclass(frozen=True)
class LeafVerdict:
    """One output leaf in one trial: passed or not, against which tolerance, and why not."""

    trial: str
    name: str
    passed: bool
    tolerance: Tolerance
    stats: LeafStats
    reasons: list[str] = field(default_factory=list)

    def severity(self) -> tuple[bool, bool, float, float]:
        """Order of badness: failing first, then values not compared, then headline error, element-wise error."""
        s = self.stats
        return (not self.passed, not s.compared, _finite(s.err_scale), _finite(s.max_rel))


@dataclass(frozen=True)
class ExcludedTrial:
    """A trial left out of the verdict, and why (the reference itself was not finite there, ...)."""

    trial: str
    reason: str


@dataclass(frozen=True)
class ParityVerdict:
    """Parity of one backend over every trial and output leaf it was checked on.

    backend: the backend checked.
    passed: every leaf of every checked trial passed.
    leaves: one verdict per (trial, output leaf).
    trials: the trials checked, in order.
    excluded: trials that are no evidence either way, with the reason.
    reference: what the outputs were compared with.
    notes: facts that limit what the verdict shows (a leaf with no finite value in any trial).
    weak: output leaves whose check could not have failed much (jax.jit's output zero, constant across
        trials or saturated to 0/1): a pass there is weak evidence, and every display says so.
    """

    backend: str
    passed: bool
    leaves: list[LeafVerdict]
    trials: list[str]
    excluded: list[ExcludedTrial] = field(default_factory=list)
    reference: str = "jax.jit"
    notes: list[str] = field(default_factory=list)
    weak: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[LeafVerdict]:
        return [v for v in self.leaves if not v.passed]

    def worst(self) -> dict[str, LeafVerdict]:
        """Per output leaf, the verdict of the trial where it was worst (a failing one first)."""
        out: dict[str, LeafVerdict] = {}
        for v in self.leaves:
            if v.name not in out or v.severity() > out[v.name].severity():
                out[v.name] = v
        return out

    def headline(self) -> LeafVerdict | None:
        """The single worst leaf verdict: what a one-line summary shows."""
        return max(self.leaves, key=LeafVerdict.severity, default=None)

    def weak_everywhere(self) -> bool:
        """Every output leaf checked was a weak check: the pass says almost nothing."""
        return bool(self.weak) and {v.name for v in self.leaves} <= set(self.weak)

    def summary(self) -> str:
        if self.passed:
            weak = f" (a weak check on {', '.join(self.weak)})" if self.weak else ""
            return f"{self.backend}: parity passed on {len(self.trials)} trials{weak}"
        reasons = [r for v in self.failures for r in v.reasons]
        more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
        return "parity FAILED: " + "; ".join(reasons[:3]) + more


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 1e300
