"""Paired timing as statistics: round orders, ratios with intervals over whole rounds, the memory rule."""

from __future__ import annotations

import numpy as np
import pytest

from multiexport.measure.pairing import (
    ADDED_LEVEL,
    PLANNED_LEVEL,
    PLANTED_ENV,
    all_ratios,
    fits_in_memory,
    level_after,
    new_over_base,
    paired_ratio,
    planted,
    round_orders,
    slice_plan,
)


def _rounds(rng, median, noise_by_round, n=2000):
    return [rng.lognormal(np.log(median), 0.05, n) * k for k in noise_by_round]


def test_noise_both_runners_saw_cancels_in_the_ratio():
    """Two equal runners, one round three times slower for both (a load spike): a tie, ratio about 1."""
    rng = np.random.default_rng(0)
    spike = [1, 3, 1, 1, 1]
    (r,) = all_ratios({"a": _rounds(rng, 1.0, spike), "b": _rounds(rng, 1.0, spike)}, batch=8)
    assert not r.significant and r.ci95_low <= 1.0 <= r.ci95_high and abs(r.ratio - 1) < 0.02
    assert r.batch == 8


def test_a_real_difference_is_beyond_noise_and_bracketed():
    rng = np.random.default_rng(1)
    rounds = [1, 1.3, 1, 0.9, 1.1]
    (r,) = all_ratios({"fast": _rounds(rng, 1.0, rounds), "slow": _rounds(rng, 2.0, rounds)}, batch=None)
    assert (r.faster, r.slower) == ("fast", "slow") and r.significant
    assert r.ci95_low <= 2.0 <= r.ci95_high * 1.01 and 1.9 < r.ratio < 2.1


def test_every_pair_once_with_the_faster_first():
    rng = np.random.default_rng(2)
    ratios = all_ratios({n: _rounds(rng, m, [1] * 4) for n, m in (("a", 3.0), ("b", 1.0), ("c", 2.0))}, batch=1)
    assert {(r.faster, r.slower) for r in ratios} == {("b", "a"), ("c", "a"), ("b", "c")}
    assert all(r.ratio >= 1 for r in ratios)


def test_rounds_rotate_and_alternate_direction():
    orders = round_orders(["a", "b", "c"], 6)
    assert orders[0] == ["a", "b", "c"] and orders[1] == ["b", "c", "a"][::-1]
    for position in range(3):  # over a full cycle every runner takes every place
        assert {order[position] for order in orders} == {"a", "b", "c"}
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)
    # a pair alone (a new artifact and its baseline in added rounds, a fresh pair): each goes first every other
    # round, so neither always runs right after the parent's look at the interval between rounds
    assert round_orders(["new", "base"], 4) == [["new", "base"], ["base", "new"]] * 2


def test_runners_that_do_not_fit_in_memory_are_timed_one_after_another():
    ok, why = fits_in_memory({"xla": 10 << 20, "onnx": 10 << 20}, 16 << 30)
    assert ok and why.startswith("paired: all 2 runners")
    ok, why = fits_in_memory({"xla": 6 << 30, "onnx": 6 << 30}, 16 << 30)
    assert not ok and why.startswith("sequential: loading all 2 runners at once would need about")


def test_a_slice_spreads_the_configured_time_over_the_rounds():
    assert slice_plan(1.0, 20, 100_000, 5) == (0.2, 4, 20_000)


def test_rounds_added_past_the_planned_ones_are_judged_at_the_stricter_level():
    """Each added round is another look at the data: past the planned rounds the interval is the 99% one,
    wider than the 95% one on the same rounds, and the ratio records its level."""
    rng = np.random.default_rng(3)
    new = [rng.lognormal(np.log(1.06), 0.03, 200) * k for k in rng.lognormal(0, 0.05, 20)]
    base = [rng.lognormal(0.0, 0.03, 200) * k for k in rng.lognormal(0, 0.05, 20)]
    assert level_after(15, 15) == PLANNED_LEVEL == 0.95 and level_after(16, 15) == ADDED_LEVEL == 0.99
    planned = paired_ratio(new, base, 8, "onnx", "baseline:onnx")
    added = paired_ratio(new, base, 8, "onnx", "baseline:onnx", level_after(20, 15))
    assert (planned.level, added.level) == (0.95, 0.99) and planned.ratio == added.ratio
    assert added.ci95_low < planned.ci95_low <= planned.ratio <= planned.ci95_high < added.ci95_high


def test_a_planted_slowdown_for_the_first_worker_only_reads_its_factor(monkeypatch):
    calls = []
    monkeypatch.setenv(PLANTED_ENV, "1.5:first")
    def call():
        calls.append(1)

    slowed = planted(call)
    assert slowed is not call and slowed() is None and calls == [1]  # the call wrapped in its spin
    monkeypatch.setenv(PLANTED_ENV, "fast:first")
    with pytest.raises(ValueError, match="expected a factor >= 1, optionally followed by ':first'"):
        planted(lambda: None)


def _loaded_slices(rng, factor, rounds=15, calls=250):
    """Slices as XLA's CNN read on 2 loaded cores: each call either run through (~70 us) or delayed by the
    scheduler (~200 us), the delayed share different in every slice (0-80%), for either worker of a pair."""
    out = []
    for _ in range(rounds):
        delayed = rng.uniform(size=calls) < rng.uniform(0, 0.8)
        out.append(np.where(delayed, rng.lognormal(np.log(200), 0.1, calls),
                            rng.lognormal(np.log(70), 0.03, calls)) * factor)
    return out


def test_a_slowdown_is_read_through_calls_the_scheduler_delayed():
    """The per-round statistic is each slice's 10th percentile: a slice's median flips between the two modes
    with the delayed share (on these slices the median-based 95% interval of a 1.2x reached down to 0.72x, of
    an A/A up to 1.6x), while the calls run through carry the artifact's own time in every slice."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        new, base = _loaded_slices(rng, 1.2), _loaded_slices(rng, 1.0)
        ratio, low, high = new_over_base(paired_ratio(new, base, 8, "xla", "baseline:xla"), "xla")
        assert 1.1 < low <= ratio <= high < 1.3, (seed, low, high)  # past the 1.05x threshold after 15 rounds
        same, other = _loaded_slices(rng, 1.0), _loaded_slices(rng, 1.0)
        ratio, low, high = new_over_base(paired_ratio(same, other, 8, "xla", "baseline:xla"), "xla")
        assert 0.95 < low <= 1.0 <= high < 1.05, (seed, low, high)  # an A/A pair: decided as no slowdown
