"""Paired latency: how rounds are laid out, and what ratios between runners the rounds support.

Runners timed one after another see different seconds of a shared machine's noise, so a ratio of two
medians can carry a load spike of one and not the other. In paired mode every runner is loaded at once
(one worker each, idle while another is timed) and each batch size is timed in rounds: every round
gives each runner one slice, in an order that rotates, so a ratio is measured over the same stretch of
time. A ratio between runners is that of the pooled medians; its 95% interval comes from a bootstrap
that resamples whole rounds, the same ones for both runners, keeping each round's pair together.

A new artifact against its baseline (the regression gate's A/B) is judged per round instead: each round
gives one ratio of the two slices' 10th percentiles (interference under load only adds time), and the
estimate is the Hodges-Lehmann centre of their logs with its Wilcoxon signed-rank interval (distribution-
free, and one round another process disturbed moves it by one rank, not by its size). Rounds are added to an undecided pair up to a cap, each added look held to
a stricter level (`level_after`); a pair whose ratio passes the gate's threshold is measured again by a fresh
pair of processes (`fresh_name`), since one process can run slow for a whole run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from ..results.bench import Ratio

BOOTSTRAP = 1000
SUBSAMPLE = 512
PER_WORKER_BYTES = 768 << 20  # a runtime's own footprint (TF loaded: ~700 MB RSS measured), besides the artifact
# A slowdown planted in a paired worker's timed calls, for benchmarks/gate_calibration.py only: FACTOR (> 1)
# makes each call last FACTOR times as long (a spin after it); the baseline's workers never get it.
# FACTOR:first plants it in each new runner's first worker only, not in a fresh one started to confirm its
# ratio: one process slow for the whole run (as seen under load), not a slower artifact.
PLANTED_ENV = "MULTIEXPORT_PLANTED_SLOWDOWN"
FIRST_ONLY = ":first"
# Sequential rounds against a baseline: a pair still undecided after the planned rounds gets more, up to this
# many times the planned rounds in all (15 planned: 45 at most, about 2 more --bench-time of that pair).
SEQUENTIAL_CAP = 3
# The paired ratio's interval level over the planned rounds, and past them: every round added to an undecided
# pair is one more look at the data, so those looks are held to 99% and do not spend the planned 5%.
PLANNED_LEVEL, ADDED_LEVEL = 0.95, 0.99
# The per-round statistic of a pair against its baseline: each slice's 10th percentile, not its median. Under
# load a call is either run through or delayed by the scheduler (XLA's CNN on 2 loaded cores: ~70 us or
# ~200 us, the mix changing from slice to slice), and interference only adds time: a low quantile reads the
# calls run through, which a slower artifact slows as much as any. Measured (benchmarks/gate.md, 45 paired
# rounds, load 5-9): the 99% interval of an A/A pair 0.990-1.036 at the 10th percentile, 0.894-1.075 at the
# median; a planted 1.2x 1.244-1.406 after 15 rounds, 1.051-1.340 at the median. (Chen and Revels, "Robust
# benchmarking in noisy environments", 2016: noise on a timing is positive, so low order statistics estimate it.)
SLICE_QUANTILE = 10
# A fresh worker started to measure a pair again (the confirming process pair): "onnx" -> "onnx#2", and its
# baseline "baseline:onnx" -> "baseline:onnx#2", so the pair is still (name, BASELINE_PREFIX + name).
FRESH_SUFFIX = "#2"


def level_after(rounds: int, planned: int) -> float:
    """The interval level of a ratio against its baseline after `rounds` rounds of `planned`: the planned level
    at the planned look, the stricter one at every added look."""
    return PLANNED_LEVEL if rounds <= planned else ADDED_LEVEL


def fresh_name(name: str) -> str:
    """The runner name of a fresh worker of `name` (the confirming process pair)."""
    return name + FRESH_SUFFIX


def is_fresh(name: str) -> bool:
    return name.endswith(FRESH_SUFFIX)


def round_orders(names: Sequence[str], rounds: int) -> list[list[str]]:
    """The order runners are timed in, per round: rotated each round, reversed every other one (for more than
    two: for two the reversal would undo the rotation), so no runner always follows the same neighbour or sits
    at the same place; a pair alone alternates which of the two goes first."""
    names = list(names)
    orders = []
    for r in range(rounds):
        k = r % len(names) if names else 0
        order = names[k:] + names[:k]
        orders.append(order[::-1] if r % 2 and len(names) > 2 else order)
    return orders


def pooled_medians(rounds: Sequence[np.ndarray], counts: np.ndarray, cap: int = SUBSAMPLE) -> np.ndarray:
    """Median of the pooled samples for each bootstrap resample of the rounds.

    counts: (resamples, rounds) how often each round was drawn. Each round is thinned to at most `cap`
    evenly spaced order statistics (its distribution kept, each weighted by the samples it stands for),
    so a thousand resamples cost one weighted cumulative sum.
    """
    values, owner, weight = [], [], []
    for k, r in enumerate(rounds):
        kept = np.sort(np.asarray(r, np.float64))[np.linspace(0, len(r) - 1, min(len(r), cap)).astype(int)]
        values.append(kept)
        owner.append(np.full(len(kept), k))
        weight.append(np.full(len(kept), len(r) / len(kept)))
    v, o, w = np.concatenate(values), np.concatenate(owner), np.concatenate(weight)
    order = np.argsort(v, kind="stable")
    v, o, w = v[order], o[order], w[order]
    cum = np.cumsum(counts[:, o] * w, axis=1)  # (resamples, elements)
    at = (cum >= cum[:, -1:] / 2).argmax(axis=1)
    return v[at]


def all_ratios(samples: Mapping[str, Sequence[np.ndarray]], batch, seed: int = 0) -> list[Ratio]:
    """Every pair of runners at one batch size: the ratio of the slower's pooled p50 to the faster's, with a
    95% interval from a bootstrap that resamples whole rounds, the same rounds for every runner, so each
    round's pair stays together and noise both saw in a round cancels in the ratio.

    samples: runner -> its samples per round (rounds in the same order for every runner).
    """
    names = sorted(samples)
    n_rounds = {len(samples[n]) for n in names}
    if len(n_rounds) != 1 or not next(iter(n_rounds)):
        raise ValueError(f"ratios: got rounds {sorted(n_rounds)}, expected the same number >= 1 for every runner")
    rounds = n_rounds.pop()
    picks = np.random.default_rng(seed).integers(0, rounds, size=(BOOTSTRAP, rounds))
    counts = np.stack([np.bincount(row, minlength=rounds) for row in picks]).astype(np.float64)
    point = {n: float(np.median(np.concatenate(samples[n]))) for n in names}
    boot = {n: pooled_medians(samples[n], counts) for n in names}
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            faster, slower = (a, b) if point[a] <= point[b] else (b, a)
            ratio = boot[slower] / boot[faster]
            low, high = (float(x) for x in np.percentile(ratio, [2.5, 97.5]))
            out.append(Ratio(batch=batch, faster=faster, slower=slower, ratio=point[slower] / point[faster],
                             ci95_low=low, ci95_high=high, significant=bool(low > 1.0)))
    return out


def signed_rank_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(Hodges-Lehmann estimate, interval low, high) of the centre of `values`: the median of the Walsh
    averages (every pairwise mean, each value with itself too), and the order statistics of those averages
    that the exact null distribution of Wilcoxon's signed-rank statistic gives for `level` (two-sided).
    With too few values for that level (n < 6 at 95%) the interval is the whole range of the averages."""
    x = np.asarray(values, np.float64)
    n = len(x)
    if n == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"signed-rank interval: got {n} values (finite: {int(np.isfinite(x).sum())}), expected >= 1 finite")
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    k = max(_signed_rank_critical(n, (1 - level) / 2), 0)
    return float(np.median(walsh)), float(walsh[k]), float(walsh[len(walsh) - 1 - k])


def _signed_rank_critical(n: int, tail: float) -> int:
    """The largest k with P(T <= k) <= tail for Wilcoxon's signed-rank statistic T of n values under the null
    (every sign equally likely: the count of each sum of a subset of 1..n, over 2^n); -1 when there is none."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    cdf = np.cumsum(counts) / 2.0**n
    return int(np.searchsorted(cdf, tail, side="right")) - 1


def paired_ratio(new: Sequence[np.ndarray], base: Sequence[np.ndarray], batch, new_name: str, base_name: str,
                 level: float = PLANNED_LEVEL) -> Ratio:
    """A new runner against its baseline at one batch size, from the rounds both were timed in (in the same
    order): per round the ratio of the two slices' SLICE_QUANTILE percentiles; the Hodges-Lehmann centre of their logs and its
    signed-rank interval at `level`, back on the ratio scale. `faster`/`slower` as the estimate says."""
    if len(new) != len(base) or not new:
        raise ValueError(f"paired ratio: got {len(new)} and {len(base)} rounds, expected the same number >= 1")
    logs = [math.log(slice_level(a) / slice_level(b)) for a, b in zip(new, base)]
    centre, low, high = signed_rank_interval(logs, level)
    if centre >= 0:
        faster, slower, ratio, ci = base_name, new_name, math.exp(centre), (math.exp(low), math.exp(high))
    else:
        faster, slower, ratio, ci = new_name, base_name, math.exp(-centre), (math.exp(-high), math.exp(-low))
    return Ratio(batch=batch, faster=faster, slower=slower, ratio=ratio, ci95_low=ci[0], ci95_high=ci[1],
                 significant=bool(ci[0] > 1.0), level=level, quantile=SLICE_QUANTILE)


def slice_level(samples: np.ndarray) -> float:
    """One slice's level for the per-round ratio against a baseline: its SLICE_QUANTILE percentile."""
    return float(np.percentile(samples, SLICE_QUANTILE))


def new_over_base(r: Ratio, new_name: str) -> tuple[float, float, float]:
    """(new / baseline, its interval low, high) from a paired ratio, whichever way round it was recorded."""
    if r.slower == new_name:
        return r.ratio, r.ci95_low, r.ci95_high
    return 1 / r.ratio, 1 / r.ci95_high, 1 / r.ci95_low


def with_rounds(r: Ratio, rounds: int) -> Ratio:
    """`r` with the number of rounds it rests on (`Ratio.rounds`)."""
    return dataclasses.replace(r, rounds=rounds)


def planted(call: Callable[[], None]) -> Callable[[], None]:
    """`call`, slowed by the factor in $MULTIEXPORT_PLANTED_SLOWDOWN when set (a benchmark's planted regression:
    after each call, a spin for (FACTOR - 1) times its duration, inside the timed region); else `call` itself."""
    import os
    import time

    given = os.environ.get(PLANTED_ENV)
    if not given:
        return call
    try:
        factor = float(given.removesuffix(FIRST_ONLY))
    except ValueError:
        factor = math.nan
    if not math.isfinite(factor) or factor < 1:
        raise ValueError(f"${PLANTED_ENV} | got {given!r}, expected a factor >= 1, optionally followed by "
                         f"{FIRST_ONLY!r}")
    clock, extra = time.perf_counter_ns, factor - 1

    def slowed() -> None:
        t0 = clock()
        call()
        end = clock() + extra * (clock() - t0)
        while clock() < end:
            pass

    return slowed


def fits_in_memory(artifact_bytes: Mapping[str, int], available_bytes: int | None) -> tuple[bool, str]:
    """Whether every runner can be loaded at once: each worker's footprint (runtime + ~3x its artifact, as
    measured for weights in host and device copies), summed, within 60% of the memory available now."""
    need = sum(PER_WORKER_BYTES + 3 * int(b) for b in artifact_bytes.values())
    if available_bytes is None:
        return True, f"paired: {len(artifact_bytes)} runners (available memory unknown)"
    budget = int(0.6 * available_bytes)
    gib = 2**30
    if need > budget:
        return False, (f"sequential: loading all {len(artifact_bytes)} runners at once would need about "
                       f"{need / gib:.1f} GiB, more than 60% of the {available_bytes / gib:.1f} GiB available")
    return True, (f"paired: all {len(artifact_bytes)} runners loaded at once need about {need / gib:.1f} GiB of the "
                  f"{available_bytes / gib:.1f} GiB available")


def available_memory() -> int | None:
    """Memory available to new processes now (MemAvailable), or None when the system cannot say."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import os

        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def slice_plan(bench_time: float, min_iters: int, max_iters: int, rounds: int) -> tuple[float, int, int]:
    """(seconds, min calls, max calls) of one slice: the configured totals spread over the rounds."""
    rounds = max(1, rounds)
    return bench_time / rounds, max(3, math.ceil(min_iters / rounds)), max(3, max_iters // rounds)
