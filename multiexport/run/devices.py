"""Which device each backend can run on, and what `--device auto` means.

Probing imports each runtime and may initialise a GPU, so every backend is probed in its own worker
process (JAX told not to preallocate GPU memory there). `resolve` is the pure decision:
`auto` picks the GPU only when every selected backend sees one, and says per backend what it found;
with `gpu`, a backend that cannot use the GPU is reported, never silently run on the CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

from ..environment import TpuPresence, keep_jax_off_the_tpu, tpu_presence, tpu_variables, tpu_worker_environment
from ..errors import UsageError
from ..exporting.contract import Availability
from .messages import DeviceStatus, decode
from .workers import run_worker, start_work_dir

CHOICES = ("cpu", "gpu", "tpu", "auto")


@dataclass
class DevicePlan:
    """Where a compare runs each backend.

    requested: what was asked ("cpu", "gpu", "tpu", "auto").
    chosen: "cpu" or "gpu": where the compare's ordinary rows run (with a TPU plan, the CPU).
    found: backend -> {gpu: bool, reason: str}, each backend's own answer.
    excluded: backend -> why it cannot run on `chosen` (a no-gpu row).
    note: one line for the terminal and reports.
    tpu: whether the compare adds its TPU rows (comparison.tpu_stage: one TPU worker after the CPU rows).
    tpu_rows: what that stage found (rows, harness overhead, the TPU's arithmetic), once it ran.
    """

    requested: str
    chosen: str
    found: dict[str, dict[str, object]] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)
    note: str = ""
    tpu: bool = False
    tpu_rows: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def resolve(requested: str, gpu_status: Mapping[str, Availability], tpu_here: bool = False) -> DevicePlan:
    """Decide the device from each backend's GPU status (an empty mapping when only the CPU is wanted).

    tpu_here: this machine has a TPU JAX can use (seen without opening it). `tpu` always adds the TPU rows (no-tpu
    rows with the reason where there is none); `auto` adds them when there is one, the other rows on the CPU."""
    if requested not in CHOICES:
        raise UsageError(f"Option '--device' | got '{requested}', expected one of {', '.join(CHOICES)}")
    found = {name: {"gpu": s.ok, "reason": s.reason} for name, s in gpu_status.items()}
    if requested == "cpu":
        return DevicePlan("cpu", "cpu", found)
    if requested == "tpu" or (requested == "auto" and tpu_here):
        return DevicePlan(requested, "cpu", found, tpu=True, note="TPU rows (jax.jit, xla, its native consumer) in one "
                          "TPU worker after the CPU rows; every other row on the CPU")
    lacking = {name: s.reason for name, s in gpu_status.items() if not s.ok}
    if requested == "gpu":
        note = f"{len(lacking)} backend(s) cannot use the GPU and are reported as such" if lacking else ""
        return DevicePlan("gpu", "gpu", found, excluded=lacking, note=note)
    if gpu_status and not lacking:
        return DevicePlan("auto", "gpu", found, note="every selected backend sees a GPU")
    why = ", ".join(lacking) or "no backend selected"
    return DevicePlan("auto", "cpu", found, note=f"using the CPU: no GPU for {why}")


def probe_gpu(backends: Sequence[str], timeout: float = 300.0) -> dict[str, Availability]:
    """Each backend's real answer to "can you use a GPU here?", each from a fresh process."""
    out: dict[str, Availability] = {}
    for name in backends:
        work = start_work_dir("probe")
        try:
            result = run_worker(["devices", name, "gpu", str(work)], work, timeout,
                                env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
            status_file = work / "status.json"
            if status_file.is_file():
                status = decode(DeviceStatus, status_file.read_text(), f"device probe of '{name}'")
                out[name] = Availability(status.ok, status.reason)
            else:
                reason = result.failure[1] if result.failure else "the probe wrote no answer"
                out[name] = Availability(False, f"device probe failed: {reason}")
        finally:
            result_dir = work
            import shutil

            shutil.rmtree(result_dir, ignore_errors=True)
    return out

__all__ = ["TpuPresence", "keep_jax_off_the_tpu", "tpu_presence", "tpu_variables", "tpu_worker_environment"]
