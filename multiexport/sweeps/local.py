"""The local executor: a pool of compares on this machine, their timing phases one at a time.

Each compare exports and checks parity beside the others, then takes the machine's timing lock
(`system.timing_lock`) for its timed rounds, so no latency is measured under another compare's load. The
pool is sized to the cores and memory (a compare of six backends peaks at a few GiB).
"""

from __future__ import annotations

import contextlib
import glob
import platform
import shlex
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Sequence

from ..exporting.contract import usable_cpus
from .spec import SweepTask
from .state import DIED, UNSCHEDULABLE, RowOutcome, SweepDir
from .task import command, run_task

GIB_PER_COMPARE = 4.0


def default_jobs() -> int:
    """Compares at once: one per two usable cores (each compare runs its own workers), at most one per
    4 GiB of available memory, at least one."""

    by_memory = int(_available_gib() // GIB_PER_COMPARE)
    return max(1, min(usable_cpus() // 2, by_memory))


def _available_gib() -> float:
    available = _meminfo_gib("MemAvailable")
    return GIB_PER_COMPARE if available is None else available  # cannot say: one compare


def run_local(tasks: Sequence[SweepTask], sweep: SweepDir, cwd: Path, jobs: int,
              on_end: Callable[[RowOutcome], None], say: Callable[[str], None]) -> None:
    """Run every task (each re-run once if its compare died), calling `on_end` as each row ends."""
    if not tasks:
        return
    runnable = []
    for task in tasks:  # resources this machine cannot give: a row saying so, never a compare reported ok
        why = cannot_honour(task)
        if why:
            on_end(RowOutcome(task.name, UNSCHEDULABLE, None, 0.0, 0, why, platform.node(), task.fingerprint()))
        else:
            runnable.append(task)
    if not runnable:
        return
    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="sweep")
    gpu = threading.Semaphore(1)  # one GPU task at a time: each JAX process would take most of the device
    futures = [pool.submit(_one, task, sweep, cwd, say, gpu) for task in runnable]
    reported = set()
    try:
        for future in as_completed(futures):
            reported.add(future)
            on_end(future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:  # rows that finished while the loop was stopping are kept, not re-run later
            if future not in reported and future.done() and not future.cancelled() and future.exception() is None:
                on_end(future.result())


def cannot_honour(task: SweepTask) -> str:
    """Why this machine cannot give `task` its resources (empty: it can): another architecture, more cores,
    memory or GPUs than it has. The local executor runs each compare here, so it cannot place one elsewhere."""

    r, missing = task.resources, []
    if r.arch and r.arch != platform.machine():
        missing.append(f"arch {r.arch!r} (this machine is {platform.machine()})")
    if r.cpus > usable_cpus():
        missing.append(f"{r.cpus:g} cpus (this machine has {usable_cpus()})")
    total = _total_gib()
    if total is not None and r.memory_gib > total:
        missing.append(f"{r.memory_gib:g} GiB of memory (this machine has {total:.1f})")
    gpus = len(glob.glob("/dev/nvidia[0-9]*"))
    if r.gpus > gpus:
        missing.append(f"{r.gpus:g} gpus (this machine has {gpus})")
    return ("the local executor cannot honour resources " + "; ".join(missing) + ": run it where they are "
            "(--executor ray) or change the spec") if missing else ""


def _total_gib() -> float | None:
    return _meminfo_gib("MemTotal")


def _meminfo_gib(key: str) -> float | None:
    """A /proc/meminfo figure (`MemAvailable`, `MemTotal`) in GiB; None where the kernel does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / (1 << 20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _one(task: SweepTask, sweep: SweepDir, cwd: Path, say: Callable[[str], None],
         gpu: threading.Semaphore) -> RowOutcome:
    attempt = 0
    with gpu if task.resources.gpus else contextlib.nullcontext():
        while True:
            attempt += 1
            sweep.clear_row(task.name)
            sweep.record_start(task, attempt)
            sweep.start_log(task.name, shlex.join(command(task, sweep.row_dir(task.name))))
            say(f"{task.name}: compare started (attempt {attempt})")
            result = run_task(task, sweep.row_dir(task.name), cwd)
            sweep.write_log(task.name, result.log)
            if result.state != DIED or attempt >= 2:
                break
            say(f"{task.name}: {result.reason}; running it once more")
    return RowOutcome(task.name, result.state, result.exit, result.seconds, attempt, result.reason, result.host,
                      task.fingerprint())
