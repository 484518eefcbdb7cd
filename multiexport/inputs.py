"""Inputs for parity checks: seeded random values per leaf dtype, value ranges, example values, .npz.

Each trial is one complete named feed. Symbolic dimensions are filled with two or more concrete
sizes so a dynamic batch is exercised, not only the example's.

Random values follow the example where there is one: floats are drawn from a normal with the example
leaf's mean and standard deviation (weights stay in their initialised range; N(0,1) weights make a
deep block so ill-conditioned that float32 itself is off by 1e-3), and integers from the example's
[min, max] (token ids stay valid indices). Without an example: N(0,1) floats and integers in
DEFAULT_INT_RANGE. An explicit value range beats both.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .dtypes import parse_dtype
from .errors import UsageError
from .tolerance import check_patterns

# Non-negative by default: runtimes disagree on negative and out-of-range indices (JAX clamps a
# gather index, ONNX wraps a negative one), so index-like inputs stay inside any table of >= 8 rows.
DEFAULT_INT_RANGE = (0, 8)
DEFAULT_DIM_SIZES = (1, 5)


@dataclass(frozen=True)
class Trial:
    """One named feed, with the concrete value of each symbolic dimension."""

    name: str
    feed: dict[str, np.ndarray]
    dims: dict[str, int] = field(default_factory=dict)


def parse_val_ranges(specs: Sequence[str]) -> dict[str, tuple[float, float]]:
    """`["batch.idx=0:10", "*.mask=0:2"]` -> {pattern: (low, high)}; ints draw from [low, high)."""
    out = {}
    for spec in specs:
        pattern, sep, body = spec.partition("=")
        low, sep2, high = body.partition(":")
        try:
            lo, hi = float(low), float(high)
        except ValueError:
            lo = hi = None
        if not sep or not sep2 or lo is None or not lo < hi:
            raise UsageError(f"Value range '{spec}' | expected LEAF=LOW:HIGH with LOW < HIGH, e.g. batch.idx=0:10")
        out[pattern] = (lo, hi)
    return out


def parse_dim_sizes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`["b=1,8,64"]` -> {"b": (1, 8, 64)}."""
    out = {}
    for spec in specs:
        name, sep, body = spec.partition("=")
        try:
            sizes = tuple(int(s) for s in body.split(",") if s.strip())
        except ValueError:
            sizes = ()
        if not sep or not sizes or min(sizes) < 1:
            raise UsageError(f"Dimension sizes '{spec}' | expected NAME=SIZE,SIZE with sizes >= 1, e.g. b=1,8")
        out[name] = sizes
    return out


def example_stats(example: np.ndarray | None) -> dict[str, float] | None:
    """What random values for a leaf should look like, read off its example value."""
    if example is None or np.size(example) == 0:
        return None
    a = np.asarray(example)
    if a.dtype == np.bool_:
        return None
    if np.issubdtype(a.dtype, np.integer):
        return {"low": float(a.min()), "high": float(a.max()) + 1.0}
    f = a.astype(np.float64)
    if not np.isfinite(f).all():
        return None
    mean, std = float(f.mean()), float(f.std())
    if std == 0.0:  # a constant init (zeros bias, ones scale): vary it a little around its value
        std = 0.1 * abs(mean) if mean != 0.0 else 1.0
    return {"mean": mean, "std": std}


def random_value(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, value_range=None,
                 stats: dict[str, float] | None = None) -> np.ndarray:
    dt = parse_dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dt, np.integer):
        lo, hi = value_range or ((stats["low"], stats["high"]) if stats and "low" in stats else DEFAULT_INT_RANGE)
        info = np.iinfo(dt)
        lo, hi = max(int(np.ceil(lo)), info.min), min(int(np.ceil(hi)), info.max + 1)
        return rng.integers(lo, hi, size=shape).astype(dt)
    if np.issubdtype(dt, np.complexfloating):
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)
    if value_range:
        values = rng.uniform(*value_range, size=shape)
    elif stats and "mean" in stats:
        values = rng.normal(stats["mean"], stats["std"], size=shape)
    else:
        values = rng.normal(size=shape)
    return values.astype(dt)


def make_trials(
    inputs: Sequence,
    *,
    examples: Mapping[str, np.ndarray] | None = None,
    trials: int = 2,
    seed: int = 0,
    val_ranges: Mapping[str, tuple[float, float]] | None = None,
    dim_sizes: Mapping[str, Sequence[int]] | None = None,
) -> list[Trial]:
    """The example feed (when complete) first, then `trials` seeded random feeds per size setting.

    `inputs` are signature leaves or manifest bindings (anything with name, shape, dtype).
    """
    val_ranges = dict(val_ranges or {})
    dim_sizes = dict(dim_sizes or {})
    examples = dict(examples or {})
    names = [leaf.name for leaf in inputs]
    check_patterns(val_ranges, names, "Value range")
    symbols = sorted({d for leaf in inputs for d in leaf.shape if isinstance(d, str)})
    unknown = [s for s in dim_sizes if s not in symbols]
    if unknown:
        raise UsageError(f"Dimension '{unknown[0]}' | not symbolic in this signature, expected one of: {', '.join(symbols) or 'none'}")

    out: list[Trial] = []
    if examples and all(n in examples for n in names):
        out.append(Trial("example", {n: np.asarray(examples[n]) for n in names}, _bound_dims(inputs, examples)))
    sizes = {s: tuple(dim_sizes.get(s) or DEFAULT_DIM_SIZES) for s in symbols}
    n_settings = max((len(v) for v in sizes.values()), default=1)
    settings = [{s: v[min(i, len(v) - 1)] for s, v in sizes.items()} for i in range(n_settings)]
    stats = {leaf.name: example_stats(examples.get(leaf.name)) for leaf in inputs}
    rng = np.random.default_rng(seed)
    for setting in settings:
        for t in range(trials):
            feed = {}
            for leaf in inputs:
                shape = tuple(setting[d] if isinstance(d, str) else d for d in leaf.shape)
                feed[leaf.name] = random_value(rng, shape, leaf.dtype, _range_for(leaf.name, val_ranges), stats[leaf.name])
            label = " ".join(f"{k}={v}" for k, v in setting.items())
            out.append(Trial(f"random{t}" + (f" {label}" if label else ""), feed, dict(setting)))
    return out


def _range_for(name: str, ranges: Mapping[str, tuple[float, float]]):
    if name in ranges:
        return ranges[name]
    return next((r for p, r in ranges.items() if fnmatch.fnmatchcase(name, p)), None)


def _bound_dims(inputs, feed) -> dict[str, int]:
    dims = {}
    for leaf in inputs:
        for d, n in zip(leaf.shape, np.shape(feed[leaf.name])):
            if isinstance(d, str):
                dims.setdefault(d, int(n))
    return dims
