import pytest

from multiexport import UsageError
from multiexport.measure.tolerance import (
    DEFAULTS,
    EXACT,
    Tolerance,
    check_patterns,
    check_tolerances,
    default_tolerance,
    parse_tolerances,
    tolerance_for,
)


def test_defaults_per_dtype_and_exact_integers():
    assert default_tolerance("float32") == DEFAULTS["float32"]
    assert default_tolerance("bfloat16").rtol > default_tolerance("float16").rtol > default_tolerance("float32").rtol
    assert default_tolerance("int32") == EXACT and default_tolerance("bool") == EXACT


def test_parse_overrides_and_precedence():
    tols = parse_tolerances(["out.*=rtol:1e-3", "out.logits=rtol:1e-2,atol:1e-4", "aux=scale:1e-5"])
    assert tols["out.*"] == Tolerance(1e-3, 0.0)
    assert tols["aux"] == Tolerance(0.0, 0.0, 1e-5)
    assert tolerance_for("out.logits", "float32", tols) == Tolerance(1e-2, 1e-4)  # exact name beats glob
    assert tolerance_for("out.probs", "float32", tols) == Tolerance(1e-3, 0.0)
    assert tolerance_for("other", "float32", tols) == DEFAULTS["float32"]


@pytest.mark.parametrize("spec, message", [
    ("out.logits", "no '='"),
    ("out=rtol1e-3", "expected rtol:NUMBER"),
    ("out=rtol:abc", "expected a number"),
    ("out=atol:-1", "expected a finite number >= 0"),
    ("out=rtol:inf", "expected a finite number >= 0"),
    ("out=atol:nan", "expected a finite number >= 0"),
    ("out=mtol:1", "expected rtol:NUMBER"),
])
def test_bad_overrides_are_usage_errors(spec, message):
    with pytest.raises(UsageError, match=message):
        parse_tolerances([spec])


def test_patterns_must_match_a_leaf():
    check_patterns({"out.*": 1}, ["out.a"], "Tolerance")
    with pytest.raises(UsageError, match=r"Tolerance 'out\.logit' \| matched no leaf"):
        check_patterns({"out.logit": 1}, ["out.logits"], "Tolerance")


@pytest.mark.parametrize("bad", [Tolerance(float("inf"), 0), Tolerance(0, float("nan")), Tolerance(-1, 0), "rtol:1"])
def test_tolerances_from_python_are_validated_too(bad):
    with pytest.raises(UsageError, match="Tolerance 'out'"):
        check_tolerances({"out": bad})


def test_float8_and_float4_get_a_tolerance_at_their_precision():
    assert default_tolerance("float8_e4m3fn").rtol == 0.25 and default_tolerance("float4_e2m1fn").rtol == 0.25
