"""Load generation and its statistics, runtime-agnostic: a Poisson schedule, a Server and an Offline driver over
"lanes" (one synchronous call each, every lane on its own thread with its own prepared inputs), and the figures.

Following MLPerf Inference's LoadGen: in the Server scenario requests arrive as a Poisson process at a target rate
(the schedule drawn from a seed, so every format gets the same arrival pattern), a request waits in a queue until a
lane is free, and its latency is measured from its *scheduled* arrival to its completion, so queueing counts and a
dispatcher that wakes late cannot hide it. In the Offline scenario every lane calls back to back and the figure is
items per second. In the MultiStream scenario a query of K samples is issued when the previous one completed, its
samples spread over the lanes, and the figure is the p99 of the queries' latencies. The drivers hold the GIL only
between calls: the runtimes release it while they compute. The same loops in C (native/csrc/common/mx_load.h) run
in a native consumer that has them (`--driver native`, run.load_native).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import UsageError
from ..results.load import MultiStreamResult, RatePoint, ServerResult

SCENARIOS = ("server", "offline", "multistream", "both", "all")  # both: server and offline; all: the three
DRIVERS = ("auto", "python", "native")
SAMPLES_PER_QUERY = 8  # MultiStream's default K (LoadGen's multi-stream samples per query)
# The automatic ladder: fractions of the format's own offline batch-1 peak (its lanes busy back to back).
LADDER = (0.1, 0.25, 0.5, 0.7, 0.85, 1.0, 1.2)
MIN_REQUESTS = 100  # per rate and round: fewer leave the p99 to one or two requests


@dataclass(frozen=True)
class LoadConfig:
    """How a load run measures.

    scenario: "server", "offline" or "both". p99_ms: the Server scenario's latency bound. rates: target rates in
    requests/s (empty: a ladder of fractions of each format's offline batch-1 peak, `LADDER`). batch_sizes: the
    Offline scenario's sizes (empty: the artifact's own example). lanes: requests in flight at once (0: the
    runtime's own suggestion, else the threads given). seconds: per rate (at least `min_requests` requests) and per
    offline size, per round. min_requests: the fewest requests per rate and round (a p99 from fewer is the maximum of
    a handful). rounds: repeats, the formats' order rotating each round. seed: the arrival schedule's.
    threads: cores given to each format (its runtime's threads, all lanes together). samples_per_query: the
    MultiStream scenario's K. driver: who issues the requests, per format; each row says which
    (`throughput_config["driver"]`, and where the C loop was not used under auto or native, `native_refused`: why).
    "auto": the native consumer's C loop where it has one that runs the artifact's sizes on this device and builds
    here, else the Python lanes; where both can run, a short Offline probe in each picks the faster for the rounds
    (`throughput_config["driver_probe"]`: both rates, run.load); "native": the same, but a consumer that fails to build or run is that row's
    failure, not a fallback; "python": the serve worker's lanes (Python threads) for every format.
    """

    scenario: str = "both"
    p99_ms: float = 10.0
    rates: tuple[float, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    lanes: int = 0
    seconds: float = 2.0
    rounds: int = 3
    seed: int = 0
    threads: int = 1
    min_requests: int = MIN_REQUESTS
    samples_per_query: int = SAMPLES_PER_QUERY
    driver: str = "auto"

    def __post_init__(self):
        if self.scenario not in SCENARIOS:
            raise UsageError(f"Option '--scenario' | got {self.scenario!r}, expected one of {', '.join(SCENARIOS)}")
        if self.driver not in DRIVERS:
            raise UsageError(f"Option '--driver' | got {self.driver!r}, expected one of {', '.join(DRIVERS)}")
        if not (isinstance(self.p99_ms, (int, float)) and math.isfinite(self.p99_ms) and self.p99_ms > 0):
            raise UsageError(f"Option '--p99-ms' | got {self.p99_ms!r}, expected a number of milliseconds > 0")
        for rate in self.rates:
            if not (math.isfinite(rate) and rate > 0):
                raise UsageError(f"Option '--rates' | got {rate!r}, expected requests per second > 0")
        for size in self.batch_sizes:
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise UsageError(f"Option '--batch-sizes' | got {size!r}, expected integers >= 1")
        for name, low in (("lanes", 0), ("rounds", 1), ("threads", 1), ("min_requests", 10),
                          ("samples_per_query", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"Option '--{name.replace('_', '-')}' | got {value!r}, expected an integer >= {low}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise UsageError(f"Option '--seconds' | got {self.seconds!r}, expected seconds > 0")

    @property
    def server(self) -> bool:
        return self.scenario in ("server", "both", "all")

    @property
    def offline(self) -> bool:
        return self.scenario in ("offline", "both", "all")

    @property
    def multistream(self) -> bool:
        return self.scenario in ("multistream", "all")


def poisson_schedule(rate: float, seconds: float, seed: int, minimum: int = MIN_REQUESTS) -> np.ndarray:
    """Arrival offsets in seconds from the start: a Poisson process at `rate` per second (exponential gaps),
    max(rate x seconds, minimum) requests, the same for the same (rate, seed)."""
    if not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"Option 'rate' | got {rate!r}, expected requests per second > 0")
    count = max(int(math.ceil(rate * seconds)), minimum)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    return np.cumsum(gaps) - gaps[0]  # the first request at the start


@dataclass(frozen=True)
class ServerRun:
    """One rate in one round. latencies_ns: per request, completion minus scheduled arrival (float; +inf for a
    request never issued because the run passed its deadline: the runtime fell far behind). span_s: from the first
    scheduled arrival to the last completion."""

    latencies_ns: np.ndarray
    span_s: float

    @property
    def achieved_per_s(self) -> float:
        completed = int(np.isfinite(self.latencies_ns).sum())
        return completed / self.span_s if self.span_s > 0 else math.inf


def run_server(lanes: Sequence[Callable[[], None]], arrivals_s: np.ndarray, slack: float = 2.0) -> ServerRun:
    """Issue one request per arrival at its scheduled time to whichever lane is free (a FIFO queue in front of the
    lanes), and time each from its schedule to its completion. Past `slack` x the schedule's length (+1 s) the lanes run no
    more requests (those count as +inf: a rate far over capacity must not run for minutes). A lane's exception
    ends the run and is raised."""
    clock = time.perf_counter_ns
    pending: queue.SimpleQueue = queue.SimpleQueue()
    done = np.zeros(arrivals_s.size, dtype=np.int64)
    failures: list[BaseException] = []
    scheduled = (arrivals_s * 1e9).astype(np.int64)
    start = clock() + 5_000_000  # 5 ms ahead, while the lanes start: the first arrival is not already late
    deadline = start + int(slack * (scheduled[-1] if scheduled.size else 0) + 1e9)

    def serve(call: Callable[[], None]) -> None:
        while True:
            index = pending.get()
            if index is None:
                return
            if failures or clock() > deadline:
                continue  # drain: the run is lost already, or far behind (the request counts as +inf)
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the dispatcher below
                failures.append(exc)
            done[index] = clock()

    threads = [threading.Thread(target=serve, args=(call,), daemon=True) for call in lanes]
    for thread in threads:
        thread.start()
    for index, offset in enumerate(scheduled):
        wait = (start + offset - clock()) / 1e9
        if wait > 0:
            time.sleep(wait)
        pending.put(index)
    _finish(pending, threads, failures)
    latencies = (done - (start + scheduled)).astype(np.float64)
    latencies[done == 0] = math.inf  # never run: past the deadline
    return ServerRun(latencies, (int(done.max(initial=start)) - start) / 1e9)


def _finish(pending: queue.SimpleQueue, threads: Sequence[threading.Thread], failures: list[BaseException]) -> None:
    """End the lanes serving `pending` (one None each), wait for them, and raise the first lane's failure."""
    for _ in threads:
        pending.put(None)
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def run_offline(lanes: Sequence[Callable[[], None]], seconds: float) -> tuple[int, float]:
    """Every lane calls back to back until `seconds` have passed: (calls completed, seconds from the start to the
    last completion)."""
    clock = time.perf_counter
    counts = [0] * len(lanes)
    last = [0.0] * len(lanes)
    failures: list[BaseException] = []
    start = clock()
    deadline = start + seconds

    def loop(i: int, call: Callable[[], None]) -> None:
        try:
            while clock() < deadline and not failures:
                call()
                counts[i] += 1
                last[i] = clock()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            failures.append(exc)

    threads = [threading.Thread(target=loop, args=(i, call), daemon=True) for i, call in enumerate(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return sum(counts), max(last) - start if any(counts) else seconds


def run_multistream(lanes: Sequence[Callable[[], None]], samples_per_query: int, seconds: float,
                    min_queries: int = MIN_REQUESTS) -> tuple[np.ndarray, float]:
    """Issue queries of `samples_per_query` samples, each when the previous one completed, its samples queued to the
    lanes (a FIFO in front of them), for `seconds` and at least `min_queries` queries: (each query's latency in ns,
    from its issue to its last sample's completion; seconds from the first issue to the last completion). A
    lane's exception ends the run and is raised."""
    clock = time.perf_counter_ns
    pending: queue.SimpleQueue = queue.SimpleQueue()
    finished = threading.Semaphore(0)
    failures: list[BaseException] = []

    def serve(call: Callable[[], None]) -> None:
        while pending.get() is not None:
            if not failures:
                try:
                    call()
                except BaseException as exc:  # noqa: BLE001 - re-raised by the dispatcher below
                    failures.append(exc)
            finished.release()

    threads = [threading.Thread(target=serve, args=(call,), daemon=True) for call in lanes]
    for thread in threads:
        thread.start()
    latencies: list[int] = []
    start = clock()
    until = start + int(seconds * 1e9)
    end = start
    while (end < until or len(latencies) < min_queries) and not failures:
        issued = clock()
        for _ in range(samples_per_query):
            pending.put(True)
        for _ in range(samples_per_query):
            finished.acquire()
        end = clock()
        latencies.append(end - issued)
    _finish(pending, threads, failures)
    return np.asarray(latencies, dtype=np.float64), (end - start) / 1e9


def multistream_result(runs: Sequence[tuple[np.ndarray, float]], samples_per_query: int) -> MultiStreamResult:
    """The MultiStream figures from every round's query latencies (pooled; the p99's spread from the rounds')."""
    pooled = np.concatenate([r[0] for r in runs])
    seconds = sum(r[1] for r in runs)
    per_round = [percentile_ms(r[0], 99) for r in runs]
    return MultiStreamResult(samples_per_query=samples_per_query, queries=int(pooled.size), rounds=len(runs),
                             p50_ms=percentile_ms(pooled, 50), p90_ms=percentile_ms(pooled, 90),
                             p99_ms=percentile_ms(pooled, 99), p99_low_ms=min(per_round), p99_high_ms=max(per_round),
                             samples_per_s=pooled.size * samples_per_query / seconds if seconds > 0 else math.inf)


def percentile_ms(latencies_ns: np.ndarray, q: float) -> float:
    """The q-th percentile in ms; with requests never issued (+inf) present, the order statistic at or above it
    (interpolating towards +inf is meaningless)."""
    if not latencies_ns.size:
        return math.nan
    if np.isfinite(latencies_ns).all():
        return float(np.percentile(latencies_ns, q)) / 1e6
    return float(np.percentile(latencies_ns, q, method="higher")) / 1e6


def rate_point(rate: float, runs: Sequence[ServerRun], bound_ms: float) -> RatePoint:
    """One rate's figures, its rounds' requests pooled; the p99's spread from the per-round p99s."""
    pooled = np.concatenate([r.latencies_ns for r in runs])
    per_round = [percentile_ms(r.latencies_ns, 99) for r in runs]
    span = sum(r.span_s for r in runs)
    completed = int(np.isfinite(pooled).sum())
    p99 = percentile_ms(pooled, 99)
    return RatePoint(rate_per_s=rate, achieved_per_s=completed / span if span > 0 else math.inf, n=int(pooled.size),
                     rounds=len(runs), p50_ms=percentile_ms(pooled, 50), p90_ms=percentile_ms(pooled, 90), p99_ms=p99,
                     p99_low_ms=min(per_round), p99_high_ms=max(per_round), meets_bound=bool(p99 <= bound_ms))


def _held(rates_ok: Sequence[tuple[float, bool]]) -> float | None:
    """The highest rate such that it and every lower rate measured met the bound (None: the lowest did not)."""
    best = None
    for rate, ok in sorted(rates_ok):
        if not ok:
            break
        best = rate
    return best


def server_result(runs: dict[float, list[ServerRun]], bound_ms: float, search: str) -> ServerResult:
    """The Server scenario's result from every rate's rounds: the highest rate that, with every lower rate measured,
    kept its pooled p99 within the bound (on the ladder: no interpolation; a lower rate that missed it, noise or not,
    caps the figure below it), and the range of the rounds' own such maxima (0 for a round whose lowest rate
    missed)."""
    points = [rate_point(rate, runs[rate], bound_ms) for rate in sorted(runs)]
    rounds = max((len(r) for r in runs.values()), default=0)
    per_round = []
    for i in range(rounds):
        measured = [(rate, percentile_ms(rs[i].latencies_ns, 99) <= bound_ms) for rate, rs in runs.items()
                    if i < len(rs)]
        per_round.append(_held(measured) or 0.0)
    return ServerResult(p99_bound_ms=bound_ms, search=search, points=points,
                        max_rate_per_s=_held([(p.rate_per_s, p.meets_bound) for p in points]),
                        max_rate_low=min(per_round) if per_round else None,
                        max_rate_high=max(per_round) if per_round else None)


def ladder(peak_per_s: float, fractions: Sequence[float] = LADDER) -> tuple[float, ...]:
    """Target rates from a format's offline batch-1 peak (requests/s), rounded to 3 significant digits."""
    if not (math.isfinite(peak_per_s) and peak_per_s > 0):
        raise UsageError(f"Offline peak | got {peak_per_s!r}, expected requests per second > 0 to build the ladder")
    return tuple(float(f"{f * peak_per_s:.3g}") for f in fractions)


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of per-round figures."""
    array = np.asarray(values, dtype=np.float64)
    return float(np.median(array)), float(array.min()), float(array.max())
