"""Inputs for parity checks: the example, then seeded trials that stay in the example's domain.

A model's inputs have domains the function relies on: a BatchNorm variance is positive, token ids index
a table, a mask holds 0/1, attention biases hold -inf. A trial drawn from nowhere (N(0,1) floats) leaves
them and makes every faithful backend fail with NaNs. So each trial is the example perturbed: rows of the
example resampled along any axis whose size changes (symbolic dims), floats moved by a fraction of the
leaf's spread and kept inside its sign and range, leaves with a few distinct values (masks, one-hots) or
non-finite values redrawn from the values they hold, integers drawn inside the example's [min, max].
Only leaves with no example (given as shapes) are drawn from N(0, 1) / DEFAULT_INT_RANGE; an explicit
value range beats everything.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence, cast

import numpy as np

from ..dtypes import is_complex, is_float, is_integer, parse_dtype
from ..errors import UsageError
from ..exporting.stablehlo import evaluate_dim
from .tolerance import check_patterns

# Non-negative by default: runtimes disagree on negative and out-of-range indices (JAX clamps a
# gather index, ONNX wraps a negative one), so index-like inputs stay inside any table of >= 8 rows.
DEFAULT_INT_RANGE = (0, 8)
DEFAULT_DIM_SIZES = (1, 5)
PERTURBATION = 0.25  # of the leaf's standard deviation
DISCRETE_VALUES = 4  # a float leaf with at most this many distinct values is redrawn from them


@dataclass(frozen=True)
class Trial:
    """One named feed, with the concrete value of each symbolic dimension and how it was made."""

    name: str
    feed: dict[str, np.ndarray]
    dims: dict[str, int] = field(default_factory=dict)
    origin: str = ""


def parse_val_ranges(specs: Sequence[str]) -> dict[str, tuple[float, float]]:
    """`["batch.idx=0:10", "*.mask=0:2"]` -> {pattern: (low, high)}; ints draw from [low, high)."""
    out = {}
    for spec in specs:
        pattern, sep, body = spec.partition("=")
        low, sep2, high = body.partition(":")
        lo: float | None
        hi: float | None
        try:
            lo, hi = float(low), float(high)
        except ValueError:
            lo = hi = None
        if not sep or not sep2 or lo is None or hi is None or not np.isfinite([lo, hi]).all() or not lo < hi:
            raise UsageError(f"Value range '{spec}' | expected LEAF=LOW:HIGH with finite LOW < HIGH, e.g. batch.idx=0:10")
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
        if not sep or not name or not sizes or min(sizes) < 1:
            raise UsageError(f"Dimension sizes '{spec}' | expected NAME=SIZE,SIZE with sizes >= 1, e.g. b=1,8")
        out[name] = sizes
    return out


def check_value_ranges(ranges: Mapping[str, object]) -> dict[str, tuple[float, float]]:
    """Validate value ranges given from Python: pattern -> (low, high), finite, low < high."""
    out = {}
    for pattern, bounds in ranges.items():
        try:
            lo, hi = (float(b) for b in cast(Iterable[Any], bounds))  # anything else raises TypeError: below
        except (TypeError, ValueError):
            raise UsageError(f"Value range '{pattern}' | got {bounds!r}, expected (low, high)") from None
        if not np.isfinite([lo, hi]).all() or not lo < hi:
            raise UsageError(f"Value range '{pattern}' | got {bounds!r}, expected finite low < high")
        out[pattern] = (lo, hi)
    return out


def random_value(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, value_range=None,
                 example: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """One leaf's trial value at `shape`, and how it was made."""
    dt = parse_dtype(dtype)
    if value_range is not None:
        return _uniform(rng, shape, dt, value_range), "the given value range"
    if example is not None and np.size(example) > 0:
        return _perturbed(rng, np.asarray(example), shape, dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool), "random bools"
    if is_integer(dt):
        return _uniform(rng, shape, dt, DEFAULT_INT_RANGE), f"integers in {list(DEFAULT_INT_RANGE)}"
    if is_complex(dt):
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt), "N(0, 1)"
    return rng.normal(size=shape).astype(dt), "N(0, 1)"


def _uniform(rng, shape, dt: np.dtype, bounds) -> np.ndarray:
    lo, hi = bounds
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if is_integer(dt):
        info = np.iinfo(np.int64) if dt.kind == "V" else np.iinfo(dt)
        lo, hi = max(int(np.ceil(lo)), info.min), min(int(np.ceil(hi)), info.max + 1)
        return rng.integers(lo, max(hi, lo + 1), size=shape).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


def _resample(rng, example: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The example at `shape`: along each axis whose size differs, entries drawn from the example's."""
    out = example
    for axis, (have, want) in enumerate(zip(example.shape, shape)):
        if have != want:
            out = np.take(out, rng.integers(0, have, size=want), axis=axis)
    return out


def _perturbed(rng, example: np.ndarray, shape: tuple[int, ...], dt: np.dtype) -> tuple[np.ndarray, str]:
    base = _resample(rng, example, shape)
    lo: float  # ints in the integer branch
    hi: float
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool), "random bools"
    if is_integer(dt):
        wide = example.astype(np.int64)
        lo, hi = int(wide.min()), int(wide.max())
        if lo == hi:  # a constant example says nothing about its range: don't make every trial that constant
            lo, hi = min(lo, 0), max(hi, 0) + DEFAULT_INT_RANGE[1] - 1
        return _uniform(rng, shape, dt, (lo, hi + 1)), f"integers in the example's range [{lo}, {hi}]"
    values = example.astype(np.complex128 if dt.kind == "c" else np.float64)
    finite = np.isfinite(values)
    distinct = np.unique(values[finite]) if finite.any() else np.array([])
    if not finite.all() or distinct.size <= DISCRETE_VALUES:
        # masks, one-hots, -inf attention biases: keep the values the leaf holds, redraw where they sit
        pool = np.unique(values) if not finite.all() else distinct
        picked = pool[rng.integers(0, pool.size, size=shape)] if pool.size else base.astype(values.dtype)
        return np.asarray(picked).astype(dt), "the example's own values, redrawn"
    if dt.kind == "c":
        std = float(np.std(np.abs(values))) or 1.0
        noise = rng.normal(size=shape) + 1j * rng.normal(size=shape)
        return (base.astype(np.complex128) + PERTURBATION * std * noise).astype(dt), "the example perturbed"
    lo, hi = float(values.min()), float(values.max())
    std = float(values.std()) or (0.1 * abs(lo) if lo else 1.0)
    moved = base.astype(np.float64) + rng.normal(0.0, PERTURBATION * std, size=shape)
    spread = (hi - lo) * PERTURBATION
    low = lo - spread
    if lo >= 0:  # keep the sign: variances, scales, probabilities stay non-negative (positive ones positive)
        low = lo / 2 if lo > 0 else 0.0
    high = hi + spread
    if hi <= 0:
        high = hi / 2 if hi < 0 else 0.0
    return np.clip(moved, low, high).astype(dt), "the example perturbed within its sign and range"


def make_trials(
    inputs: Sequence,
    *,
    examples: Mapping[str, np.ndarray] | None = None,
    trials: int = 2,
    seed: int = 0,
    val_ranges: Mapping[str, tuple[float, float]] | None = None,
    dim_sizes: Mapping[str, Sequence[int]] | None = None,
) -> list[Trial]:
    """The example feed (when complete) first, then `trials` seeded feeds per size setting.

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
        out.append(Trial("example", {n: np.asarray(examples[n]) for n in names}, _bound_dims(inputs, examples),
                         "the target's example values"))
    sizes = {s: tuple(dim_sizes.get(s) or DEFAULT_DIM_SIZES) for s in symbols}
    n_settings = max((len(v) for v in sizes.values()), default=1)
    settings = [{s: v[min(i, len(v) - 1)] for s, v in sizes.items()} for i in range(n_settings)]
    rng = np.random.default_rng(seed)
    for setting in settings:
        for t in range(trials):
            label = " ".join(f"{k}={v}" for k, v in setting.items())
            out.append(trial_at(inputs, examples, setting, rng, f"random{t}" + (f" {label}" if label else ""),
                                val_ranges))
    return out


def trial_at(inputs: Sequence, examples: Mapping[str, np.ndarray], setting: Mapping[str, int],
             rng: np.random.Generator, name: str, val_ranges: Mapping[str, tuple[float, float]] | None = None) -> Trial:
    """One trial with every symbolic dimension at its size in `setting`."""
    feed, origins = {}, set()
    for leaf in inputs:
        shape = tuple(d if isinstance(d, int) else evaluate_dim(d, dict(setting)) for d in leaf.shape)
        value, origin = random_value(rng, shape, leaf.dtype, _range_for(leaf.name, val_ranges or {}),
                                     examples.get(leaf.name))
        feed[leaf.name] = value
        origins.add(origin)
    return Trial(name, feed, dict(setting), "; ".join(sorted(origins)))


def synthetic_samples(inputs: Sequence, examples: Mapping[str, np.ndarray], setting: Mapping[str, int], seed: int,
                      count: int, val_ranges: Mapping[str, tuple[float, float]] | None = None) -> list[dict[str, np.ndarray]]:
    """`count` feeds drawn as the trials are (`trial_at`: the example perturbed within its domain) at the sizes in
    `setting`, from their own `seed`: int8's synthetic calibration samples, apart from the parity trials."""
    rng = np.random.default_rng(seed)
    return [trial_at(inputs, examples, setting, rng, f"sample{i}", val_ranges).feed for i in range(count)]


def _range_for(name: str, ranges: Mapping[str, tuple[float, float]]):
    if name in ranges:
        return ranges[name]
    return next((r for p, r in ranges.items() if fnmatch.fnmatchcase(name, p)), None)


def _bound_dims(inputs, feed) -> dict[str, int]:
    dims: dict[str, int] = {}
    for leaf in inputs:
        for d, n in zip(leaf.shape, np.shape(feed[leaf.name])):
            if isinstance(d, str):
                dims.setdefault(d, int(n))
    return dims


def is_finite_feed(values: Mapping[str, np.ndarray]) -> bool:
    """Whether every float/complex array in `values` is finite."""
    for a in values.values():
        a = np.asarray(a)
        if (is_float(a.dtype) or is_complex(a.dtype)) and a.size:
            if not np.isfinite(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)).all():
                return False
    return True
