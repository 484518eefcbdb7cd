"""The accuracy budget of reduced-precision rows: each figure against its definition on arrays where the answer
is known, the defaults per precision, and `--accuracy` overrides (bad ones refused in one line)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from multiexport import UsageError
from multiexport.measure.accuracy import DEFAULT_BUDGETS, budget_for, judge, leaf_accuracy, parse_accuracy, wilson_upper
from multiexport.results.accuracy import Budget


def test_each_figure_is_its_definition():
    want = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 5.0]])
    noise = np.array([[0.1, 0.0, 0.0], [0.0, 0.0, -0.1]])
    got = want + noise
    leaf = leaf_accuracy("out.hidden", [got], [want], Budget())
    centred_want, centred_got = want - want.mean(), got - want.mean()  # the variation is the signal
    assert leaf.err_scale == pytest.approx(0.1 / 5.0)
    assert leaf.sqnr_db == pytest.approx(10 * math.log10(np.sum(centred_want ** 2) / 0.02))
    assert leaf.cosine == pytest.approx(float(np.sum(centred_got * centred_want) / np.linalg.norm(centred_got)
                                              / np.linalg.norm(centred_want)))
    assert leaf.top1 is None and leaf.failed == []  # not class scores by name: no top-k


def test_top_k_on_class_scores_counts_rows_whose_winner_moved():
    rng = np.random.default_rng(0)
    want = rng.normal(size=(100, 8))
    got = want.copy()
    got[:30] = -got[:30]  # 30 rows' winners move (the largest becomes the smallest)
    leaf = leaf_accuracy("out.logits", [got[:50], got[50:]], [want[:50], want[50:]], Budget(top1=0.9))
    assert leaf.rows == 100 and leaf.top1 == pytest.approx(0.7)
    assert leaf.top5 is not None and leaf.top5 < 1.0
    assert leaf.failed == ["top1 70.0% of 100 rows (at most 78.1% at 95% confidence), budget >= 0.9"]


def test_one_changed_row_of_eight_is_no_evidence_against_a_90_percent_budget_but_half_of_them_is():
    want = np.eye(8)
    one = want.copy()
    one[0] = np.roll(one[0], 1)
    assert not leaf_accuracy("out.logits", [one], [want], Budget(top1=0.9)).failed
    half = np.roll(want, 1, axis=1)
    half[4:] = want[4:]
    assert leaf_accuracy("out.logits", [half], [want], Budget(top1=0.9)).failed
    assert wilson_upper(7 / 8, 8) == pytest.approx(0.9776, abs=1e-3)


def test_equal_outputs_pass_every_budget_and_sqnr_is_infinite():
    want = np.linspace(-1, 1, 20).reshape(2, 10)
    leaf = leaf_accuracy("out.logits", [want], [want], DEFAULT_BUDGETS["fp16"])
    assert leaf.sqnr_db == math.inf and leaf.cosine == pytest.approx(1.0) and leaf.top1 == 1.0 and not leaf.failed


def test_non_finite_where_jax_is_finite_fails_whatever_the_budget():
    want = np.ones((2, 3))
    got = want.copy()
    got[0, 0] = np.nan
    leaf = leaf_accuracy("y", [got], [want], Budget())
    assert leaf.failed and "non-finite" in leaf.failed[0]


def test_a_wide_error_fails_the_int8_default_with_the_figures_named():
    rng = np.random.default_rng(1)
    want = rng.normal(size=(4, 100))
    got = want + rng.normal(scale=0.5, size=want.shape)  # ~6 dB
    verdict = judge("int8", [{"y": got}], [{"y": want}], ["y"], {}, synthetic=True)
    assert not verdict.passed
    assert "sqnr" in verdict.summary() and "cos" in verdict.summary() and verdict.summary().startswith("Output 'y' |")


def test_overrides_replace_the_default_figures_for_matching_leaves_only():
    pattern, figures = parse_accuracy("out.logits=top1:0.99,cos:0.999")
    assert (pattern, figures) == ("out.logits", {"top1": 0.99, "cos": 0.999})
    overrides = {pattern: figures}
    assert budget_for("out.logits", "int8", overrides) == Budget(cos=0.999, sqnr=20.0, top1=0.99, top5=0.95)
    assert budget_for("out.other", "int8", overrides) == DEFAULT_BUDGETS["int8"]
    assert budget_for("out.x", "int8", {"out.*": {"err": 0.05}}).err == 0.05


@pytest.mark.parametrize("text, message", [
    ("out.logits", "expected e.g. out.logits=top1:0.99"),
    ("out.logits=top3:0.9", "METRIC one of cos, err, sqnr, top1, top5"),
    ("out.logits=cos:high", "got cos 'high', expected a number"),
    ("out.logits=top1:1.5", "expected a finite number >= 0 and <= 1"),
    ("out.logits=sqnr:-3", "expected a finite number >= 0"),
])
def test_a_bad_accuracy_spec_is_one_line(text, message):
    with pytest.raises(UsageError, match=message):
        parse_accuracy(text)


def test_a_user_top_k_budget_makes_a_leaf_class_scores_whatever_its_name():
    want = np.eye(16)
    got = np.roll(want, 1, axis=1)
    verdict = judge("int8", [{"out.y": got}], [{"out.y": want}], ["out.y"], {"out.y": {"top1": 0.5}}, synthetic=False)
    assert verdict.leaves[0].top1 == 0.0 and not verdict.passed and verdict.synthetic is False


def test_an_output_that_lost_its_variation_fails_though_its_offset_matches():
    rng = np.random.default_rng(2)
    want = -2.3 + 0.1 * rng.normal(size=(8, 10))  # log-probabilities: a large offset, a small variation
    leaf = leaf_accuracy("out.logp", [np.full_like(want, -2.3)], [want], DEFAULT_BUDGETS["int8"])
    assert leaf.failed and leaf.cosine < 0.5  # raw values would give cosine 0.999 and 28 dB


def test_a_shape_or_dtype_other_than_jax_jits_fails_the_leaf_and_a_missing_leaf_fails_the_row():
    want = np.arange(8, dtype=np.float32)
    assert leaf_accuracy("y", [want.reshape(4, 2)], [want], Budget()).failed == ["got shape (4, 2), expected (8,)"]
    assert leaf_accuracy("y", [want.astype(np.float16)], [want], Budget()).failed == ["got float16, expected float32"]
    verdict = judge("int8", [{}], [{"y": want}], ["y"], {}, synthetic=True)
    assert not verdict.passed and verdict.leaves[0].failed == ["missing in trial 0"]


def test_a_constant_reference_is_judged_by_its_error_against_its_scale():
    want = np.ones((4, 3))
    assert not leaf_accuracy("y", [want * 1.001], [want], DEFAULT_BUDGETS["fp16"], constant_err=1e-2).failed
    assert leaf_accuracy("y", [want * 1.2], [want], DEFAULT_BUDGETS["fp16"], constant_err=1e-2).failed


def test_class_scores_of_another_width_per_trial_and_inf_signs_are_handled():
    a, b = np.eye(3), np.eye(4)
    leaf = leaf_accuracy("out.scores", [a, b], [a, b], Budget(top1=0.9))
    assert leaf.top1 is None and not leaf.failed  # no one class axis: top-k not counted, nothing crashes
    want = np.array([1.0, np.inf, -np.inf])
    assert leaf_accuracy("y", [np.array([1.0, -np.inf, np.inf])], [want], Budget()).failed
    assert not leaf_accuracy("y", [want.copy()], [want], Budget()).failed
