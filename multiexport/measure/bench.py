"""Latency measurement: warm-up, timed synchronous calls, order statistics, cold start and memory.

The harness times `Runner.run_prepared` on inputs already moved into the runtime's own tensors, so
what it measures is the call a server would make. Cold start (load, compile, first call) and memory
are separate figures, never mixed into the steady-state percentiles.
"""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import UsageError
from ..exporting.feed import check_feed
from ..results.bench import LatencyStats, SizeResult
from ..status import Status


@dataclass(frozen=True)
class BenchConfig:
    """How long to measure: both `min_iters` calls and `bench_time` seconds, after warm-up.

    max_iters caps very fast functions so a run stays bounded in memory and time. By default the timed
    call runs on inputs already on the device and leaves outputs there (synchronised);
    include_transfers times the host-to-host path instead.
    """

    warmup_iters: int = 5
    warmup_time: float = 0.1
    min_iters: int = 20
    bench_time: float = 1.0
    max_iters: int = 100_000
    include_transfers: bool = False  # time host->device copies and device->host outputs too

    def __post_init__(self):
        for name, low in (("warmup_iters", 0), ("min_iters", 1), ("max_iters", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"Option '{name}' | got {value!r}, expected an integer >= {low}")
        for name in ("warmup_time", "bench_time"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise UsageError(f"Option '{name}' | got {value!r}, expected a finite number of seconds >= 0")
        if self.max_iters < self.min_iters:
            raise UsageError(f"Option 'max_iters' | got {self.max_iters}, expected >= min_iters ({self.min_iters})")
        if not isinstance(self.include_transfers, bool):
            raise UsageError(f"Option 'include_transfers' | got {self.include_transfers!r}, expected true or false")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def time_calls(call: Callable[[], None], config: BenchConfig) -> tuple[np.ndarray, str]:
    """Warm up, then time `call` until both min_iters and bench_time are reached.

    Returns nanoseconds per call and what stopped the loop ("time", or "max_iters" when the cap came
    first: then fewer seconds were timed than asked, and the report says so).
    """
    clock = time.perf_counter_ns
    start = clock()
    done = 0
    while done < config.warmup_iters or (clock() - start) < config.warmup_time * 1e9:
        call()
        done += 1
        if done >= config.max_iters:
            break
    times: list[int] = []
    start = clock()
    while len(times) < config.max_iters and (len(times) < config.min_iters or clock() - start < config.bench_time * 1e9):
        t0 = clock()
        call()
        times.append(clock() - t0)
    stopped = "max_iters" if len(times) >= config.max_iters and clock() - start < config.bench_time * 1e9 else "time"
    return np.asarray(times, dtype=np.int64), stopped


def time_runner(runner: Any, prepared: Any, config: BenchConfig,
                call: Callable[[], None] | None = None) -> tuple[np.ndarray, str]:
    """Time a runner's calls: by the runtime's own clock where the runner keeps one (`time_own_calls`: the
    browser page), else `call` (default: `run_prepared(prepared)`) by the harness's. Returns as `time_calls`."""
    own = getattr(runner, "time_own_calls", None)
    times = own(prepared, config.warmup_iters, config.min_iters, config.max_iters, config.bench_time) if own else None
    if times is None:
        return time_calls(call or (lambda: runner.run_prepared(prepared)), config)
    times = np.asarray(times, dtype=np.int64)
    return times, "max_iters" if times.size >= config.max_iters else "time"


def median_ci95(sorted_values: np.ndarray) -> tuple[float, float]:
    """Distribution-free 95% confidence interval of the median from order statistics.

    The number of samples below the median is Binomial(n, 1/2); ranks n/2 -+ 1.96*sqrt(n)/2 bracket
    it with ~95% coverage (normal approximation, fine for n >= 20; smaller n widens to min/max).
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan, math.nan
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return float(sorted_values[lo]), float(sorted_values[hi])


def summarize(times_ns: np.ndarray, stopped_by: str = "time") -> LatencyStats:
    ms = np.sort(np.asarray(times_ns, dtype=np.float64)) / 1e6
    lo, hi = median_ci95(ms)
    return LatencyStats(
        n=int(ms.size),
        min_ms=float(ms[0]),
        p50_ms=float(np.percentile(ms, 50)),
        p90_ms=float(np.percentile(ms, 90)),
        p99_ms=float(np.percentile(ms, 99)),
        max_ms=float(ms[-1]),
        mean_ms=float(ms.mean()),
        std_ms=float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        ci95_low_ms=lo,
        ci95_high_ms=hi,
        quantiles_ms=[float(q) for q in np.percentile(ms, np.arange(0, 101, 5))],
        stopped_by=stopped_by,
    )


def bench_sizes(
    runner: Any, feeds: list[tuple[int | None, dict[str, np.ndarray] | None]], config: BenchConfig,
    on_first_output=None, unsupported: dict[int | None, str] | None = None,
) -> list[SizeResult]:
    """Benchmark `runner` on each (batch, feed): prepare, compile (if the runner can), first call, steady state.

    unsupported: batch sizes the artifact does not support, with the reason; they get a `size-unsupported`
    entry and are never fed.
    """
    unsupported = unsupported or {}
    out = []
    for batch, feed in feeds:
        if batch in unsupported or feed is None:
            out.append(SizeResult(batch=batch, status=Status.SIZE_UNSUPPORTED, reason=unsupported.get(batch, "")))
            continue
        prepared, size = cold_start(runner, feed, batch)
        if on_first_output is not None:
            on_first_output()
            on_first_output = None
        if config.include_transfers:
            arrays, _ = check_feed(runner.manifest.inputs, feed)
            stats = summarize(*time_calls(lambda: runner.run_with_transfers(arrays), config))
        else:
            stats = summarize(*time_runner(runner, prepared, config))
        items = batch if batch is not None else 1
        size.latency = stats
        size.throughput_per_s = items / (stats.p50_ms / 1e3) if stats.p50_ms > 0 else math.inf
        out.append(size)
    return out


def cold_start(runner: Any, feed: dict[str, np.ndarray], batch: int | None) -> tuple[Any, SizeResult]:
    """Prepare `feed` on the device, compile for it (if the runner compiles lazily) and make the first call:
    the prepared inputs, and a SizeResult holding those three times and whether this size compiled anew."""
    before = runner.compile_count()
    t0 = time.perf_counter()
    prepared = runner.prepare(feed)
    prepare_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = runner.compile(prepared)
    compile_s = time.perf_counter() - t0 if compiled else None
    t0 = time.perf_counter()
    runner.run_prepared(prepared)
    first_call_s = time.perf_counter() - t0
    after = runner.compile_count()
    return prepared, SizeResult(batch=batch, prepare_s=prepare_s, compile_s=compile_s, first_call_s=first_call_s,
                                recompiled=None if before is None or after is None else after > before,
                                items="items" if batch is not None else "calls")


def memory_now() -> dict[str, int]:
    """Resident set size now and at its peak for this process, in bytes (Linux /proc, else getrusage)."""
    fields = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    peak = fields.get("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"rss_bytes": fields.get("VmRSS", peak), "peak_rss_bytes": peak}


def directory_bytes(directory: str | os.PathLike) -> int:
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
