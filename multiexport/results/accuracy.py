"""A reduced-precision row's accuracy against jax.jit: the budget it is held to and the figures per output leaf.

Float parity asks "is this the same function up to rounding"; a quantized artifact is not, by design. Its
question is "how much did the answer move", in the terms deployers use: cosine similarity, error relative to
the leaf's scale, signal-to-quantization-noise ratio, and for class scores whether the top-1 / top-5 class
agrees with jax.jit's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import InputError

METRICS = ("cos", "err", "sqnr", "top1", "top5")
# What each budget metric means and which way it passes.
METRIC_MEANING = {
    "cos": "cosine similarity with jax.jit's output, at least",
    "err": "max |error| / the leaf's scale (max |jax.jit output|), at most",
    "sqnr": "signal-to-quantization-noise ratio in dB, at least",
    "top1": "fraction of rows whose largest score is jax.jit's, at least",
    "top5": "fraction of rows whose jax.jit top-1 class is within the artifact's top 5, at least",
}


@dataclass(frozen=True)
class Budget:
    """The accuracy a reduced-precision output leaf must keep; None: that figure is reported, not judged.

    cos: minimum cosine similarity. err: maximum error / scale. sqnr: minimum SQNR in dB.
    top1, top5: minimum top-1 / top-5 agreement (judged only on leaves that are class scores).
    """

    cos: float | None = None
    err: float | None = None
    sqnr: float | None = None
    top1: float | None = None
    top5: float | None = None

    def text(self) -> str:
        """The budget in words: "cos>=0.99, sqnr>=20" ("none" when nothing is judged)."""
        return ", ".join(f"{k}{'<=' if k == 'err' else '>='}{v:g}" for k in METRICS
                         if (v := getattr(self, k)) is not None) or "none"


@dataclass(frozen=True)
class LeafAccuracy:
    """One output leaf's figures over every checked trial (all elements of all trials together).

    leaf: the output leaf. cosine, err_scale, sqnr_db: the figures (sqnr_db inf when the outputs are equal).
    top1, top5: agreement fractions when the leaf is class scores (its last axis the classes), else None.
    rows: how many rows (score vectors) top-k was counted over. budget: what the leaf was held to.
    failed: the budget metrics it missed, in words; empty when within budget.
    """

    leaf: str
    cosine: float
    err_scale: float
    sqnr_db: float
    top1: float | None
    top5: float | None
    rows: int
    budget: Budget
    failed: list[str] = field(default_factory=list)

    def check_loaded(self, where: str) -> None:
        """Figures read from results.json are numbers (`where` names the field)."""
        for name in ("cosine", "err_scale"):
            if math.isnan(getattr(self, name)):
                raise InputError(f"{where}.{name} | got nan, expected a number")


@dataclass(frozen=True)
class AccuracyVerdict:
    """A reduced-precision row's accuracy verdict.

    precision: the row's precision. leaves: per output leaf, its figures and budget.
    trials: how many trials the figures are over. synthetic: whether the inputs were generated (random
        weights and inputs make the figures a check of the toolchain, not of task accuracy).
    """

    precision: str
    leaves: list[LeafAccuracy]
    trials: int
    synthetic: bool = True

    @property
    def passed(self) -> bool:
        """Every output leaf within its budget."""
        return all(not leaf.failed for leaf in self.leaves)

    def worst(self, figure: str) -> float | None:
        """The worst value of `figure` (cosine, sqnr_db, top1: smallest; err_scale: largest) over the leaves."""
        values = [v for leaf in self.leaves if (v := getattr(leaf, figure)) is not None]
        if not values:
            return None
        return max(values) if figure == "err_scale" else min(values)

    def summary(self) -> str:
        """One line per leaf beyond its budget, naming the figures it missed (empty when passed)."""
        bad = [leaf for leaf in self.leaves if leaf.failed]
        if not bad:
            return ""
        return "; ".join(f"Output '{leaf.leaf}' | {', '.join(leaf.failed)}" for leaf in bad)
