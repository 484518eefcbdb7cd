"""measure.load: the Poisson schedule, the Server driver's latency from scheduled arrival, the Offline driver, and
the figures drawn from rounds."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from multiexport.errors import UsageError
from multiexport.measure.load import (
    LoadConfig,
    ServerRun,
    ladder,
    multistream_result,
    percentile_ms,
    poisson_schedule,
    run_multistream,
    run_offline,
    run_server,
    server_result,
    spread,
)


def test_schedule_is_fixed_by_its_seed_and_poisson_in_its_gaps():
    a, b = poisson_schedule(200.0, 50.0, seed=3), poisson_schedule(200.0, 50.0, seed=3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, poisson_schedule(200.0, 50.0, seed=4))
    gaps = np.diff(a)
    assert a.size == 10_000 and a[0] == 0.0 and (gaps >= 0).all()
    assert abs(gaps.mean() - 1 / 200) < 0.05 / 200  # exponential gaps: mean 1/rate
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05  # and coefficient of variation 1 (not a fixed interval)


def test_schedule_has_a_minimum_count():
    assert poisson_schedule(1.0, 2.0, seed=0, minimum=50).size == 50
    with pytest.raises(UsageError, match="rate"):
        poisson_schedule(0.0, 1.0, seed=0)


def _sleeper(seconds: float):
    return lambda: time.sleep(seconds)


def test_server_latency_counts_the_queue():
    # five requests scheduled at once on one lane that takes 20 ms: the k-th waits for the k-1 before it, and its
    # latency (from its scheduled arrival) includes that wait; timed from when a lane took it, each would be ~20 ms
    run = run_server([_sleeper(0.02)], np.zeros(5))
    lat = np.sort(run.latencies_ns) / 1e6
    for k, value in enumerate(lat):
        assert value >= 20 * (k + 1) - 1


def test_server_spreads_requests_over_lanes():
    active, peak, lock = [0], [0], threading.Lock()

    def call():
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1

    run = run_server([call, call], np.zeros(4))
    assert peak[0] == 2  # two requests in flight at once
    lat = np.sort(run.latencies_ns) / 1e6
    assert lat[2] >= 39 and lat[3] >= 39  # the third and fourth queued behind the first two


def test_server_stops_running_requests_far_behind_schedule():
    # 100 requests in 0.1 s on a lane taking 50 ms each, no slack: past 1 s the rest are dropped as +inf
    run = run_server([_sleeper(0.05)], np.linspace(0, 0.1, 100), slack=0.0)
    dropped = np.isinf(run.latencies_ns).sum()
    assert 0 < dropped < 100
    assert math.isinf(percentile_ms(run.latencies_ns, 99))
    assert run.achieved_per_s < 100


def test_server_raises_a_lane_failure():
    def broken():
        raise RuntimeError("runtime fell over")

    with pytest.raises(RuntimeError, match="fell over"):
        run_server([broken], np.zeros(3))


def test_offline_counts_every_lane():
    counts = [0, 0]

    def lane(i):
        def call():
            counts[i] += 1
            time.sleep(0.005)
        return call

    calls, seconds = run_offline([lane(0), lane(1)], 0.2)
    assert calls == sum(counts) and counts[0] > 0 and counts[1] > 0
    assert seconds >= 0.2


def test_multistream_query_waits_for_all_its_samples_spread_over_the_lanes():
    # queries of 4 samples on 2 lanes of 10 ms: both lanes busy at once, two waves per query, so each query takes
    # >= 20 ms (one sample alone 10 ms); a query is issued only when the previous one completed (its 4 calls done)
    active, peak, lock, calls = [0], [0], threading.Lock(), [0]

    def call():
        with lock:
            active[0] += 1
            calls[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1

    latencies, seconds = run_multistream([call, call], 4, 0.0, min_queries=5)
    assert latencies.size == 5 and calls[0] == 20 and peak[0] == 2
    assert (latencies / 1e6 >= 19).all()
    assert seconds >= latencies.sum() / 1e9 * 0.99
    result = multistream_result([(latencies, seconds), (latencies * 2, seconds * 2)], 4)
    assert result.queries == 10 and result.rounds == 2 and result.samples_per_query == 4
    assert result.p99_low_ms == pytest.approx(percentile_ms(latencies, 99))
    assert result.p99_high_ms == pytest.approx(2 * result.p99_low_ms)
    assert result.samples_per_s == pytest.approx(40 / (3 * seconds))


def test_multistream_raises_a_lane_failure():
    def broken():
        raise RuntimeError("runtime fell over")

    with pytest.raises(RuntimeError, match="fell over"):
        run_multistream([broken], 3, 0.0, min_queries=2)


def test_server_result_takes_the_highest_rate_under_the_bound_and_the_rounds_range():
    fast = np.full(200, 2e6)  # 2 ms
    slow = np.full(200, 30e6)  # 30 ms
    runs = {10.0: [ServerRun(fast, 20.0), ServerRun(fast, 20.0)],
            20.0: [ServerRun(fast, 10.0), ServerRun(slow, 10.0)],  # one round over the bound
            40.0: [ServerRun(slow, 5.0), ServerRun(slow, 5.0)]}
    result = server_result(runs, 10.0, "ladder: test")
    assert [p.rate_per_s for p in result.points] == [10.0, 20.0, 40.0]
    assert [p.meets_bound for p in result.points] == [True, False, False]  # 20: pooled p99 is 30 ms
    assert result.max_rate_per_s == 10.0
    assert (result.max_rate_low, result.max_rate_high) == (10.0, 20.0)  # round 1 held 20, round 2 only 10
    assert result.points[1].p99_low_ms == pytest.approx(2.0) and result.points[1].p99_high_ms == pytest.approx(30.0)


def test_a_lower_rate_over_the_bound_caps_the_max_rate():
    fast, slow = np.full(200, 2e6), np.full(200, 30e6)
    runs = {10.0: [ServerRun(slow, 20.0)], 20.0: [ServerRun(fast, 10.0)], 40.0: [ServerRun(fast, 5.0)]}
    result = server_result(runs, 10.0, "ladder")
    assert [p.meets_bound for p in result.points] == [False, True, True]
    assert result.max_rate_per_s is None and result.max_rate_high == 0.0  # 20 and 40 passed above a failure
    runs[5.0] = [ServerRun(fast, 40.0)]
    assert server_result(runs, 10.0, "ladder").max_rate_per_s == 5.0


def test_server_result_with_no_rate_under_the_bound():
    runs = {10.0: [ServerRun(np.full(100, 50e6), 10.0)]}
    result = server_result(runs, 10.0, "ladder")
    assert result.max_rate_per_s is None and result.max_rate_high == 0.0


def test_ladder_and_spread():
    assert ladder(1000.0, (0.5, 1.0)) == (500.0, 1000.0)
    assert spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    with pytest.raises(UsageError):
        ladder(0.0)


@pytest.mark.parametrize("field, value, message", [
    ("scenario", "batch", "--scenario"), ("p99_ms", 0.0, "--p99-ms"), ("rates", (5.0, -1.0), "--rates"),
    ("batch_sizes", (0,), "--batch-sizes"), ("rounds", 0, "--rounds"), ("seconds", math.inf, "--seconds"),
    ("min_requests", 5, "--min-requests"), ("samples_per_query", 0, "--samples-per-query"), ("driver", "c", "--driver"),
])
def test_config_refuses_bad_values(field, value, message):
    with pytest.raises(UsageError, match=message):
        LoadConfig(**{field: value})
