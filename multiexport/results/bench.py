"""Latency results as data: order statistics per batch size, cold start, memory, the runner's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .status import Status


@dataclass(frozen=True)
class LatencyStats:
    """Per-call latency in milliseconds; ci95 brackets the median (order statistics, distribution-free).

    n: timed calls.
    min_ms .. max_ms: order statistics; mean_ms, std_ms: moments.
    ci95_low_ms, ci95_high_ms: a 95% confidence interval of the median.
    quantiles_ms: the 0th..100th percentiles in steps of 5, for plots.
    stopped_by: what ended the timed loop: "time" (bench_time reached), "max_iters" (the cap), "min_iters".
    """

    n: int
    min_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    std_ms: float
    ci95_low_ms: float
    ci95_high_ms: float
    quantiles_ms: list[float] = field(default_factory=list)
    stopped_by: str = "time"


@dataclass
class SizeResult:
    """One batch size: its steady-state latency and what it took to get there, or why it was not measured.

    batch: the symbolic batch's size (None for a static target without a named batch).
    status: ok, or size-unsupported (the artifact was built for other sizes), or bench-failed.
    reason: why, when not ok.
    latency: the timed calls (None when not measured).
    prepare_s: moving the inputs into the runtime's tensors.
    compile_s: compiling for this size ahead of the first call (None when the runtime compiled at load).
    first_call_s: the first call, after compile.
    recompiled: whether this size made the runtime compile again (None when it cannot say).
    throughput_per_s: items (or calls) per second at the median.
    items: "items" when the batch size is known, else "calls".
    flops: FLOPs of one call from XLA's cost analysis; gflops_per_s at the median.
    """

    batch: int | None
    status: Status = Status.OK
    reason: str = ""
    latency: LatencyStats | None = None
    prepare_s: float | None = None
    compile_s: float | None = None
    first_call_s: float | None = None
    recompiled: bool | None = None
    throughput_per_s: float | None = None
    items: str = "calls"
    flops: float | None = None
    gflops_per_s: float | None = None


@dataclass
class BenchResult:
    """One backend's (or the reference's) figures: cold start, memory and latency per batch size.

    load_s: loading the artifact in a fresh process (the runtime's own load, compile where it compiles).
    sizes: one entry per batch size asked for.
    memory: RSS of the worker at start, after load, now, and its peak, in bytes.
    artifact_bytes: size of the artifact directory.
    runner: how the runner calls its runtime (calling path, device, threads as the runtime reports them).
    config: the BenchConfig used.
    process: "worker" (its own fresh process) or "parent".
    extra: other figures (process start to first output, bench seconds).
    """

    load_s: float
    sizes: list[SizeResult]
    memory: dict[str, int]
    artifact_bytes: int | None
    runner: dict[str, Any]
    config: dict[str, Any]
    process: str = "worker"
    extra: dict[str, Any] = field(default_factory=dict)

    def measured(self) -> list[SizeResult]:
        """The sizes with a latency."""
        return [s for s in self.sizes if s.latency is not None and s.status is Status.OK]
