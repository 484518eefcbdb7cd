"""A backend's run in its native, Python-free consumer (`compare --native`) as data."""

from __future__ import annotations

from dataclasses import dataclass, field

from .parity import ParityVerdict
from .status import Status


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

    @property
    def speedup(self) -> float | None:
        """How many times faster the native call is than the Python one (> 1: native is faster)."""
        if self.median_ms and self.python_p50_ms:
            return self.python_p50_ms / self.median_ms
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
