"""The rest of the reference computed in the compare's process while the export workers work.

The exports need only the signature, the trials and the first trial's reference (with its determinism
check); jax.jit on the other trials and the rounding floor (three more runs of the model, a compile of
its own) are for the checks after them. The compare's process only waits on its export workers, so on a
machine whose cores the workers leave idle (a converter's start-up, a phase with one worker left) those
seconds cost nothing. They run beside the exports only where memory holds both (the rounding floor
holds a moved copy of the weights beside the reference's own), and only with export workers (without a
TARGET string the exports run in this process, one after another, and the reference first as before).
Nothing is skipped: a failure of the reference is raised as it would have been, after the exports.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Mapping

from .exports import export_all
from .prepare import finish_reference, rounding_leaves

if TYPE_CHECKING:
    from ..run.export_pool import BuildingWorker
    from .memory_plan import MemoryPlan
    from .outcomes import Exported, Failure
    from .stages import Context, Prepared

# Copies of the weights the reference's rest holds in this process beyond the target's own: the rounding
# floor's moved copy, and its device copy while it runs.
MEANWHILE_WEIGHTS = 2.0
# How much lower the thread doing the reference's rest runs than the export workers (nice increment).
MEANWHILE_NICE = 10


def reference_meanwhile(ctx: Context, memory: MemoryPlan) -> bool:
    """Whether the rest of the reference runs beside the exports: only with export workers (a TARGET string),
    and where the memory available holds the exports the plan runs at once and MEANWHILE_WEIGHTS copies of the
    weights more (memory unknown: as the plan, nothing limited); never when the plan refused a backend or
    closed the early workers, so tight memory is never tighter."""
    if ctx.spec is None:
        return False
    if memory.available is None:
        return True
    if memory.refused or memory.close_early:
        return False
    exports = memory.exports_at_once * max(memory.export_need.values(), default=0)
    return memory.available - exports >= MEANWHILE_WEIGHTS * memory.weights


def yield_to_exports() -> None:
    """Lower the calling thread's CPU priority (Linux, where a thread has a nice value of its own): the exports
    are what the compare waits on, this work only has to be done after them. What runs in this thread yields
    the cores to the export workers: tracing and XLA's compiles of the other trials' sizes (keras_hub_gpt2:
    b=1 and b=5, most of this work); the computations themselves run on XLA's own thread pool, created at the
    process's priority, and do not. Nothing timed runs in this process; the thread ends with its work.
    Elsewhere (a thread id is no process id) it does nothing."""
    if sys.platform != "linux":
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + MEANWHILE_NICE))
    except OSError:  # a sandbox refusing it: the work runs as before
        pass


def exports_beside_reference(ctx: Context, prep: Prepared, memory: MemoryPlan, ahead: BuildingWorker | None = None
                             ) -> tuple[Mapping[str, Exported | Failure], Prepared]:
    """`export_all` in this thread (with `ahead`, the worker building the target since the signature),
    `finish_reference` in another meanwhile (announced, not marked: the export step holds its seconds and
    says so); (the exports' outcomes, the finished Prepared). What the reference raised is raised here once
    the exports are done; should it still run then, that wait is a step of its own."""
    box: dict = {}

    def work() -> None:
        try:
            yield_to_exports()
            box["prep"] = finish_reference(ctx, prep, ctx.say)
        except BaseException as exc:  # raised in the compare's thread, below
            box["error"] = exc

    thread = threading.Thread(target=work, name="multiexport-reference", daemon=True)
    others = len(prep.trials) - 1
    thread.start()
    work_said = [f"runs jax.jit on the other {others} trial(s)"] if others else []
    if prep.nondeterministic is None and rounding_leaves(ctx, prep.sig):
        work_said.append("measures how far rounding moves its outputs")
    # (worded apart from the other steps' words: benchmarks/compare_time.py sorts steps by them)
    exports = export_all(ctx, prep, memory, meanwhile=(
        f"meanwhile this process {' and '.join(work_said)}" if work_said else ""), ahead=ahead)
    if thread.is_alive():
        ctx.progress("reference outputs of the other trials and how far rounding moves them (begun beside the "
                     "exports) finish")
    thread.join()
    if "error" in box:
        raise box["error"]
    return exports, box["prep"]
