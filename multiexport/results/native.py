"""A backend's run in its native, Python-free consumer (`compare --native`) as data."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..status import Status
from .bench import LatencyStats, Ratio
from .parity import ParityVerdict

NATIVE_SUFFIX = " native"  # a native consumer's name in a paired Ratio: "<backend> native"


@dataclass
class NativeSize:
    """Per-call latency measured inside the native program at one batch size, beside the Python runner's.

    batch: the symbolic batch's size (None for a static target without a named batch).
    status: ok, or size-unsupported (no module for this size), or bench-failed.
    reason: why, when not ok.
    calls: timed calls after the warm-up ones.
    min_ms, median_ms, p90_ms, max_ms, mean_ms: the program's own figures (wall time of each call, inputs
        already on the device, outputs freed outside the timed region).
    python_p50_ms: the Python runner's p50 at the same size in the same compare, for the ratio.
    latency: the same statistic as the Python runner's (`LatencyStats`: p50 with its 95 % interval, from every
        timed call's own time), pooled over the runs that measured it.
    measured: "paired" (timed in the compare's interleaved rounds, a slice per round beside the Python
        runner's) or "alone" (one run after the Python runner was timed: sequential mode, or no paired worker).
    ratio: the paired ratio between the native consumer and the Python runner at this size, with its interval
        (None unless measured paired). Its names are "<backend>" and "<backend> native".
    """

    batch: int | None
    status: Status = Status.OK
    reason: str = ""
    calls: int | None = None
    min_ms: float | None = None
    median_ms: float | None = None
    p90_ms: float | None = None
    max_ms: float | None = None
    mean_ms: float | None = None
    python_p50_ms: float | None = None
    latency: LatencyStats | None = None
    measured: str = ""
    ratio: Ratio | None = None

    @property
    def speedup(self) -> float | None:
        """How many times faster the native call is than the Python one (> 1: native is faster): the paired
        ratio when measured paired, else the two p50s."""
        if self.ratio is not None:
            return self.ratio.ratio if self.ratio.faster.endswith(NATIVE_SUFFIX) else 1 / self.ratio.ratio
        p50 = self.latency.p50_ms if self.latency is not None else self.median_ms
        if p50 and self.python_p50_ms:
            return self.python_p50_ms / p50
        return None


@dataclass
class NativeResult:
    """The artifact run from disk by its native consumer, on the same trials as the Python runner.

    consumer: pjrt_c_api (XLA), tf_c_api (SavedModel) or iree_tools (IREE).
    status: ok, parity-failed, run-failed, unavailable (no compiler, plugin or tool here), size-unsupported.
    reason: why, when not ok.
    command: one shell line that repeats the run on the artifact's example inputs under `env -i`.
    parity: the verdict of its outputs against jax.jit over the trials it ran.
    sizes: its latency per batch size.
    """

    consumer: str
    status: Status
    reason: str = ""
    command: str = ""
    parity: ParityVerdict | None = None
    sizes: list[NativeSize] = field(default_factory=list)
