"""A symbolic dimension of the equation table is sized with the trial's sizes, or matches nothing (-1)."""

from __future__ import annotations

from multiexport.exporting.dim_size import recorded_size


def test_a_recorded_dimension_is_sized_with_the_trials_symbols():
    assert recorded_size(7, {}) == 7
    assert recorded_size("b", {"b": 5}) == 5
    assert recorded_size("2*b + 1", {"b": 5}) == 11
    assert recorded_size("b // 2 - 1", {"b": 6}) == 2


def test_an_unbound_symbol_or_other_text_matches_no_shape():
    assert recorded_size("b", {}) == -1
    assert recorded_size("max(b, 2)", {"b": 5}) == -1
    assert recorded_size("b +", {"b": 5}) == -1
