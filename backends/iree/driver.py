"""Which IREE runtime driver runs llvm-cpu code: chosen at export by timing both on the example inputs.

`local-sync` runs the module on the calling thread; `local-task` hands each call to a worker pool, which
costs tens of microseconds per call (iree-benchmark-module on the example CNN: 12 us on local-sync, 91 us on
local-task) and pays off only when the pool's threads share enough work. Where that line falls depends on
the model, the threads and the machine's load (measured here: a ResNet-like net at 64x64 ran 7 ms on
local-sync vs 11 ms on local-task, at 112x112 140 vs 74 ms), so it is measured, not guessed: both drivers,
interleaved, within a time budget, and local-task is kept only when it is at least TASK_MARGIN faster
(a tie goes to the driver that occupies one core). The choice is recorded in the manifest
(format.drivers, format.driver_choice) and used by both the Python runner and the native tools' argv.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .fixups import FUNCTION
from .parameters import parameters_module

CPU_DRIVERS = ("local-sync", "local-task")
TASK_MARGIN = 0.05  # local-task must beat local-sync by 5% to be kept
BUDGET_S = 2.0  # time spent measuring, at most about this (one call of each driver always runs)
BLOCK_S = 0.005  # a timed block is at least this long (many calls for a small model)
ROUNDS = 5
UNTIMED_BYTES = 256 << 20  # weights past this: no driver opened at export (each loads them again)
ONE_THREAD_RULE = "one thread: local-task's pool would add a hand-off and no parallelism"
THREADS_SET: list[int] = []  # iree.runtime reads its task-topology flag once per process


def set_threads(rt, threads: int) -> None:
    """Size the local-task driver's worker pool before its first device exists (a process-wide flag)."""
    if not THREADS_SET:
        rt.flags.parse_flags(f"--task_topology_max_group_count={threads}")
        THREADS_SET.append(threads)


def open_call(rt, driver: str, module_path: Path, weights_path: Path | None,
              arrays: Sequence[np.ndarray], n_outputs: int) -> Callable[[], None]:
    """One synchronous call of the module's `main` on `driver`, its arguments uploaded once."""
    from iree.runtime.array_interop import map_dtype_to_element_type

    config = rt.Config(driver)
    modules = []
    if weights_path is not None:
        parameters, index = parameters_module(rt, config.vm_instance, weights_path)
        modules.append(parameters)
    module = rt.VmModule.mmap(config.vm_instance, str(module_path))
    context = rt.SystemContext(vm_modules=[*modules, module], config=config)
    function = module.lookup_function(FUNCTION)
    args = rt.VmVariantList(len(arrays))
    views = []
    for array in arrays:
        array = np.asarray(array, order="C")
        view = config.device.allocator.allocate_buffer_copy(
            memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=config.device,
            buffer=array, element_type=map_dtype_to_element_type(array.dtype))
        views.append(view)
        args.push_ref(view.ref)
    invoke = context.vm_context.invoke
    keep = (config, index if weights_path is not None else None, context, views)  # alive as long as the call

    def call(_keep: Any = keep) -> None:
        invoke(function, args, rt.VmVariantList(n_outputs))

    call()  # the first call (allocations, pool start-up) is not timed
    return call


def _per_call(call: Callable[[], None], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n


def choose_driver(module_path: Path, weights_path: Path | None, arrays: Sequence[np.ndarray], n_outputs: int,
                  threads: int, untimed_bytes: int = UNTIMED_BYTES) -> dict[str, Any]:
    """Time local-sync and local-task on `arrays` (interleaved blocks) and say which to use and why.

    Past `untimed_bytes` of weights the drivers are not timed: an open driver holds the parameters again (2.3x
    their size measured, beside the export worker's own copy of the target), and a call over that many weights
    is long enough that local-task's hand-off (tens of microseconds) is lost in it, so local-task is chosen."""
    import iree.runtime as rt

    if threads <= 1:
        return {"driver": "local-sync", "rule": ONE_THREAD_RULE, "threads": threads}
    size = weights_path.stat().st_size if weights_path is not None else 0
    if size > untimed_bytes:
        return {"driver": "local-task", "threads": threads,
                "rule": (f"not timed: {size / (1 << 30):.1f} GiB of weights (past {untimed_bytes >> 20} MiB) would be "
                         "loaded again in the export worker; a call over that many weights is long enough that "
                         "local-task's hand-off to its pool is lost in it")}
    set_threads(rt, threads)
    calls = {d: open_call(rt, d, module_path, weights_path, arrays, n_outputs) for d in CPU_DRIVERS}
    first = max(_per_call(calls[d], 1) for d in CPU_DRIVERS)
    block = max(1, min(1000, int(BLOCK_S / max(first, 1e-7))))
    rounds = max(1, min(ROUNDS, int(BUDGET_S / (2 * block * max(first, 1e-7)))))
    times: dict[str, list[float]] = {d: [] for d in CPU_DRIVERS}
    for _ in range(rounds):
        for d in CPU_DRIVERS:
            times[d].append(_per_call(calls[d], block))
    median = {d: statistics.median(t) * 1e6 for d, t in times.items()}
    task = median["local-task"] < median["local-sync"] * (1 - TASK_MARGIN)
    return {"driver": "local-task" if task else "local-sync",
            "rule": (f"measured at export on the example inputs ({rounds} interleaved rounds of {block} calls per "
                     f"driver, {threads} threads): local-task kept only when >= {TASK_MARGIN:.0%} faster than "
                     "local-sync"),
            "median_us": {d: round(v, 2) for d, v in median.items()}, "threads": threads}
