"""Parity tolerances: defaults per dtype, and per-leaf overrides such as `out.logits=rtol:1e-3,atol:1e-4`.

A value passes when |got - ref| <= atol + scale * max|ref| + rtol * |ref|: numpy's allclose plus a term
relative to the leaf's largest magnitude, because rounding differences between two faithful
implementations (another summation order, a fused multiply-add) scale with the magnitudes summed, not
with a result that happens to cancel to near zero. The float defaults come from
benchmarks/tolerance_calibration.py: a faithful implementation in a dtype differs from the float64
truth by its rounding error, and two faithful implementations (JAX and an export) by up to about twice
that; each default still passes at least 10x the worst error measured on the benchmark models
(worst margins: float32 22x, float16 15x, bfloat16 11x; see the script). The scale term is set from
the measured max|err|/max|ref| (float32 5e-7, float16 1e-3, bfloat16 8.5e-3) with a margin of 3-8x.
Integers and bools are exact by default.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Mapping, Sequence

from ..errors import UsageError
from ..results.parity import Tolerance

# Measured on the benchmark models (benchmarks/tolerance_calibration.py, figures in its docstring).
DEFAULTS: dict[str, Tolerance] = {
    "float64": Tolerance(rtol=1e-12, atol=1e-13, scale=1e-13),
    "float32": Tolerance(rtol=1e-5, atol=4e-6, scale=4e-6),
    "float16": Tolerance(rtol=4e-2, atol=4e-3, scale=4e-3),
    "bfloat16": Tolerance(rtol=1e-1, atol=2.5e-2, scale=3e-2),
    "complex64": Tolerance(rtol=1e-5, atol=4e-6, scale=4e-6),
    "complex128": Tolerance(rtol=1e-12, atol=1e-13, scale=1e-13),
}
EXACT = Tolerance(rtol=0.0, atol=0.0)

# The float32 default is about 10x the rounding sensitivity of the shallow models it was calibrated on
# (an MLP 3e-7, HF BERT 4e-7, a Flax CNN 7e-7 of max|ref|); the deep Keras convnets, where that default
# failed every faithful runtime, sit at 1.0-1.9e-5 (MobileNetV2), 4e-5 (ResNet50), 4.7e-5 (EfficientNetB0)
# with runtimes up to 3x their sensitivity from jax.jit (benchmarks/real_models/MATRIX.md): the same 10x.
SENSITIVITY_MARGIN = 10.0
# However much a model amplifies rounding, parity never accepts errors beyond these fractions of a leaf's
# max |ref| without being told (--tolerance): 250x the float32 default is 0.1 %, where a real fault (a
# dropped bias, a layer in half precision) begins.
WIDEST_SCALE: dict[str, float] = {
    "float64": 1e-10, "float32": 1e-3, "float16": 3e-2, "bfloat16": 1.5e-1,
}


def default_tolerance(dtype: str) -> Tolerance:
    """The default for a dtype name; float8/float4 variants get a tolerance at their precision, anything
    else (ints, bools) is exact."""
    if dtype in DEFAULTS:
        return DEFAULTS[dtype]
    if dtype.startswith(("float8", "float6", "float4")):
        return Tolerance(rtol=0.25, atol=0.1, scale=0.1)
    return EXACT


def check_tolerances(overrides: Mapping[str, object]) -> dict[str, Tolerance]:
    """Validate tolerances given from Python: Tolerance objects with finite, non-negative fields."""
    out = {}
    for pattern, tol in overrides.items():
        if not isinstance(pattern, str) or not isinstance(tol, Tolerance):
            raise UsageError(f"Tolerance '{pattern}' | got {type(tol).__name__}, expected a Tolerance "
                             "(multiexport.measure.tolerance.parse_tolerances builds them from text)")
        for key in ("rtol", "atol", "scale"):
            value = getattr(tol, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise UsageError(f"Tolerance '{pattern}' | got {key} {value!r}, expected a finite number >= 0")
        out[pattern] = tol
    return out


def parse_tolerances(specs: Sequence[str]) -> dict[str, Tolerance]:
    """`["out.logits=rtol:1e-3,atol:1e-4", "out.*=rtol:1e-4,scale:1e-5"]` -> {pattern: Tolerance}.

    Keys not given are 0 (an override states the whole tolerance); patterns are globs.
    """
    out: dict[str, Tolerance] = {}
    for spec in specs:
        pattern, sep, body = spec.partition("=")
        if not sep or not pattern:
            raise UsageError(f"Tolerance '{spec}' | got no '=', expected LEAF=rtol:1e-3,atol:1e-4")
        values = {}
        for part in body.split(","):
            key, sep, val = part.strip().partition(":")
            if key not in ("rtol", "atol", "scale") or not sep:
                raise UsageError(f"Tolerance '{spec}' | got '{part}', expected rtol:NUMBER, atol:NUMBER or scale:NUMBER")
            try:
                values[key] = float(val)
            except ValueError:
                raise UsageError(f"Tolerance '{spec}' | got {key} '{val}', expected a number") from None
            if not math.isfinite(values[key]) or values[key] < 0:
                raise UsageError(f"Tolerance '{spec}' | got {key} {val}, expected a finite number >= 0")
        out[pattern] = Tolerance(rtol=values.get("rtol", 0.0), atol=values.get("atol", 0.0), scale=values.get("scale", 0.0))
    return out


def tolerance_for(name: str, dtype: str, overrides: Mapping[str, Tolerance], sensitivity: float | None = None) -> Tolerance:
    """Exact-name override, else the first matching glob, else the dtype default, its scale term widened to
    this model's measured rounding sensitivity (`widened`) when one is given."""
    if name in overrides:
        return overrides[name]
    for pattern, tol in overrides.items():
        if fnmatch.fnmatchcase(name, pattern):
            return tol
    return widened(default_tolerance(dtype), dtype, sensitivity)


def overridden(name: str, overrides: Mapping[str, Tolerance]) -> bool:
    """Whether the user gave this leaf's tolerance (by name or glob): then it is used as given."""
    return name in overrides or any(fnmatch.fnmatchcase(name, pattern) for pattern in overrides)


def widened(tol: Tolerance, dtype: str, sensitivity: float | None) -> Tolerance:
    """`tol` with its scale term at SENSITIVITY_MARGIN x the leaf's measured rounding sensitivity
    (measure/rounding.py) where that is wider, never beyond WIDEST_SCALE for the dtype: a deep network
    amplifies rounding beyond any fixed default, and an error below what rounding alone moves the output
    cannot tell a wrong artifact from a faithful one. Integer leaves and unmeasured leaves keep `tol`."""
    cap = WIDEST_SCALE.get(dtype)
    if sensitivity is None or cap is None or not math.isfinite(sensitivity):
        return tol
    scale = min(cap, SENSITIVITY_MARGIN * sensitivity)
    return Tolerance(rtol=tol.rtol, atol=tol.atol, scale=scale) if scale > tol.scale else tol


def check_patterns(overrides: Mapping[str, object], names: Sequence[str], what: str) -> None:
    """Every pattern must match some leaf: a typo must not silently fall back to defaults."""
    for pattern in overrides:
        if pattern not in names and not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise UsageError(f"{what} '{pattern}' | matched no leaf, expected one of: {', '.join(names)}")
