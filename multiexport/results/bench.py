"""Latency results as data: order statistics per batch size, cold start, memory, the runner's settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..status import Status


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

    def check_loaded(self, where: str) -> None:
        """Refuse figures no timing produces (read from a results.json: a crafted NaN p50 would otherwise be
        "the fastest", a negative one faster than anything real)."""
        if self.n < 0:
            raise _impossible(f"{where}.n", self.n, "a count of calls >= 0")
        for name in ("min_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "std_ms", "ci95_low_ms",
                     "ci95_high_ms"):
            _non_negative(f"{where}.{name}", getattr(self, name), "a finite latency >= 0 ms")
        for i, value in enumerate(self.quantiles_ms):
            _non_negative(f"{where}.quantiles_ms[{i}]", value, "a finite latency >= 0 ms")
        if not self.min_ms <= self.p50_ms <= self.max_ms:
            raise _impossible(f"{where}.p50_ms", self.p50_ms, f"a median between min_ms {self.min_ms} and max_ms "
                              f"{self.max_ms}")


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
    fraction_of_peak: gflops_per_s over the machine's float32 matmul peak measured in the same run.
    measured: "paired" (timed in interleaved rounds with every other runner loaded) or "sequential".
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
    fraction_of_peak: float | None = None
    measured: str = "sequential"

    def check_loaded(self, where: str) -> None:
        for name in ("prepare_s", "compile_s", "first_call_s", "throughput_per_s"):
            value = getattr(self, name)
            if value is not None:
                _non_negative(f"{where}.{name}", value, "a finite figure >= 0")


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

    def check_loaded(self, where: str) -> None:
        _non_negative(f"{where}.load_s", self.load_s, "a finite time >= 0 s")

    def measured(self) -> list[SizeResult]:
        """The sizes with a latency."""
        return [s for s in self.sizes if s.latency is not None and s.status is Status.OK]


@dataclass
class Ratio:
    """How much slower one runner is than another at one batch size, measured over the same rounds.

    batch: the batch size. faster, slower: the two runners ("jax" is the reference).
    ratio: slower's p50 over faster's (>= 1), from the medians of the interleaved rounds.
    ci95_low, ci95_high: an interval of the ratio at `level` (95% unless said: bootstrap over rounds, pairs kept
        together; a new artifact against its baseline: the signed-rank interval of the per-round ratios).
    significant: the interval excludes 1: a lead beyond the noise of this machine, else a tie.
    rounds: the interleaved rounds the ratio rests on when they differ from the pairing's (a new artifact
        against its baseline gets more rounds until the gate's verdict is decided); 0: the pairing's rounds.
    level: the interval's confidence level: 0.95, or 0.99 for a ratio against its baseline that rests on rounds
        past the planned ones (each added look at the data is held to the stricter level).
    base_ms: for a ratio against a baseline, the baseline's p50 over these rounds (ms): the call size the gate's
        threshold is chosen by, as the rounds chose it; None where not recorded.
    quantile: for a ratio against a baseline, the percentile of each round's slice the per-round ratio is taken
        of (10: interference under load only adds time, so a low quantile reads the calls run through); None:
        the slices' medians (recorded before it was chosen).
    """

    batch: int | None
    faster: str
    slower: str
    ratio: float
    ci95_low: float
    ci95_high: float
    significant: bool
    rounds: int = 0
    level: float = 0.95
    base_ms: float | None = None
    quantile: int | None = None

    def check_loaded(self, where: str) -> None:
        for name in ("ratio", "ci95_low", "ci95_high"):
            _non_negative(f"{where}.{name}", getattr(self, name), "a finite ratio > 0")
            if getattr(self, name) == 0:
                raise _impossible(f"{where}.{name}", 0.0, "a finite ratio > 0")


BASELINE_PREFIX = "baseline:"  # a baseline artifact's runner in the rounds: "baseline:onnx" beside "onnx"


@dataclass
class Pairing:
    """How latency was measured across runners, and the machine's peak for scale.

    mode: "paired" (every runner loaded at once, one worker each, timed in interleaved rounds so a ratio
        is measured over the same seconds of machine noise) or "sequential" (one worker after another).
    reason: why this mode (the memory estimate, or the fallback).
    rounds: interleaved rounds per batch size; slice_s: timed seconds per runner per round.
    ratios: every pair of runners that were timed, per batch size.
    peak_gflops: float32 matmul GFLOP/s through XLA in this run (None if not measured); peak_how: what ran.
    failures: runner -> why its paired worker failed (its sizes are then bench-failed).
    floors: runner -> p50 ms of the per-call floor (one add on 8 floats through the same runtime and calling
        path, timed the same way in this run), when asked for (compare --floor).
    baseline: the baseline artifacts' directory whose artifacts were timed in these rounds beside the new
        ones (compare --baseline-artifacts, or a --baseline whose artifacts still exist), else "".
    baseline_ratios: per backend and batch size, the ratio between the new artifact and its baseline
        (named BASELINE_PREFIX + backend), measured in the same rounds: what a paired A/B gate rests on.
    baseline_failures: backend -> why its baseline was not timed beside it (no artifact there, a manifest
        refused, its worker failed): its gate is then cross-run.
    confirmations: per backend and batch size whose ratio against its baseline passed the gate's threshold, the
        same ratio measured again by a fresh pair of processes (a new worker and a baseline worker started for
        it, named like the first pair): a regression must show in both pairs, so one process that ran slow
        for the whole run (seen under load) is read as that, not as the artifact's.
    confirmation_failures: backend -> why its fresh pair gave no ratio (a worker failed).
    """

    mode: str
    reason: str = ""
    rounds: int = 0
    slice_s: float = 0.0
    ratios: list[Ratio] = field(default_factory=list)
    peak_gflops: float | None = None
    peak_how: str = ""
    failures: dict[str, str] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)
    baseline: str = ""
    baseline_ratios: list[Ratio] = field(default_factory=list)
    baseline_failures: dict[str, str] = field(default_factory=dict)
    confirmations: list[Ratio] = field(default_factory=list)
    confirmation_failures: dict[str, str] = field(default_factory=dict)

    def ratio(self, batch, a: str, b: str) -> Ratio | None:
        """The measured ratio between runners a and b at `batch`, either way round."""
        return next((r for r in self.ratios if r.batch == batch and {r.faster, r.slower} == {a, b}), None)

    def against_baseline(self, batch, name: str) -> tuple[float, float, float] | None:
        """(new / baseline, its interval low, high) for backend `name` at `batch`, when its baseline was
        timed in the same rounds; else None."""
        r = self.baseline_ratio(batch, name)
        return None if r is None else new_over_baseline(r, name)

    def baseline_ratio(self, batch, name: str) -> Ratio | None:
        """The recorded ratio of backend `name` against its baseline at `batch` (first process pair), or None."""
        return _find_pair(self.baseline_ratios, batch, name)

    def confirmation(self, batch, name: str) -> Ratio | None:
        """The same ratio from the fresh process pair (`confirmations`), or None when none was measured."""
        return _find_pair(self.confirmations, batch, name)


def new_over_baseline(r: Ratio, name: str) -> tuple[float, float, float]:
    """(new / baseline, its interval low, high) from a ratio of backend `name` against its baseline, whichever
    way round it was recorded."""
    if r.slower == name:
        return r.ratio, r.ci95_low, r.ci95_high
    return 1 / r.ratio, 1 / r.ci95_high, 1 / r.ci95_low


def _find_pair(ratios: list[Ratio], batch, name: str) -> Ratio | None:
    pair = {name, BASELINE_PREFIX + name}
    return next((r for r in ratios if r.batch == batch and {r.faster, r.slower} == pair), None)


def _impossible(where: str, value: object, expected: str) -> Exception:
    return InputError(f"{where} | got {value}, expected {expected} (no measurement gives that)")


def _non_negative(where: str, value: float, expected: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise _impossible(where, value, expected)
