"""Client side of the worker protocol: start `python -m multiexport.run.worker`, turn how it ended into data.

A worker writes its results into a directory the parent gives it (outputs as .npz, bench.json,
export.json) or error.json ({category, message}) and exits 3 on a clean error. Anything else is read
from how the process ended: a signal is `crashed` (SIGSEGV, SIGABRT) or `killed` (SIGKILL without
evidence), `out-of-memory` only with the kernel's word (the cgroup's oom_kill count), `timeout` past
the deadline; a worker that exits 0 without its results is `internal-error`.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import InputError
from ..exporting.registry import runtime_registered
from ..files.temporary import ROOT_ENV, make_temporary, root
from ..results import BenchResult
from ..system.process import Outcome, run_command
from .messages import Loaded, WorkerFailure, decode

WORKER_MODULE = "multiexport.run.worker"


@dataclass(frozen=True)
class WorkerResult:
    """What a worker left: its output directory (removed by `close`), or why it failed.

    failure: (category, reason) when it did not finish cleanly.
    work: the directory it wrote to.
    run: its run.json (`messages.Loaded`), if it wrote one. bench: its bench.json, if any.
    cpu_seconds, seconds: the worker's own CPU time and wall time.
    """

    failure: tuple[str, str] | None
    work: Path
    run: Loaded | None = None
    bench: BenchResult | None = None
    cpu_seconds: float | None = None
    seconds: float = 0.0

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


# `worker export AHEAD TARGET`: an export worker that builds TARGET, then reads its command line on stdin
# (run.export_pool.AheadWorker)
AHEAD = "--ahead"


def worker_command(*args: str) -> list[str]:
    # -P: the working directory (a sweep's spec folder, the user's) is not first on the module path, so no
    # `multiexport/` there runs instead of ours; a target module there still imports (leaves.target appends it)
    return [sys.executable, "-P", "-m", WORKER_MODULE, *args, *register_args()]


def register_args() -> list[str]:
    """A --register NAME=module:Class for each backend this process has registered at run time, as they are now."""
    return [a for name, locator in runtime_registered().items() for a in ("--register", f"{name}={locator}")]


def start_work_dir(prefix: str) -> Path:
    return make_temporary(prefix)


def worker_environment(tmp: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: this process's, then `extra`, with `tmp` as its $TMPDIR.

    `tmp` is a directory this process removes once the worker has ended, however it ended: the frameworks a
    worker runs write their own temporaries there (TensorFlow's `__autograph_generated_file*.py`, removed by a
    clean exit only), and a worker killed in native code cannot remove them itself. The user's temporary
    directory, where marked temporaries live, is passed on (`files.temporary.root`).
    """
    return {**os.environ, **(extra or {}), **_module_path_head(), "TMPDIR": str(tmp), ROOT_ENV: str(root())}


def _module_path_head() -> dict[str, str]:
    """The worker's module path starts as this process's does: with the working directory when this process
    has it (`python -m multiexport` from there: its modules, a `--register`ed backend, import in the
    worker as here), without it when started with -P (a sweep's compare: nothing in the spec's folder
    can replace multiexport in a worker either, though leaves.target may append it to find a target)."""
    cwd = os.getcwd()
    if sys.flags.safe_path or not ({"", cwd} & set(sys.path)):
        return {}
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": cwd + (os.pathsep + old if old else "")}


@contextmanager
def private_tmp() -> Iterator[Path]:
    """A marked temporary to be one worker's $TMPDIR (`worker_environment`), removed when the block ends."""
    path = make_temporary("tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_worker(args: Sequence[str], work: Path, timeout: float, expect: str | None = None,
               env: dict[str, str] | None = None) -> WorkerResult:
    """Run one worker with `args` (its out directory among them: `work`), and read what it left.

    expect: the result file a successful worker must leave (e.g. "export.json"); its absence is a bug.
    """
    try:
        with private_tmp() as tmp:
            outcome = run_command(worker_command(*args), timeout=timeout, env=worker_environment(tmp, env))
    except BaseException:  # a signal stopped the wait: the worker is gone, and so is its directory
        shutil.rmtree(work, ignore_errors=True)
        raise
    failure = classify(outcome, work, timeout)
    found: dict[str, Any] = {}
    for name, cls in (("bench.json", BenchResult), ("run.json", Loaded)):
        path = work / name
        if path.is_file():
            try:
                found[name] = decode(cls, path.read_text(), f"worker {name}")
            except (OSError, InputError) as exc:
                failure = failure or ("internal-error", f"worker wrote an unreadable {name}: {exc}")
    if failure is None and expect and expect not in found:
        failure = ("crashed", f"the worker exited with code 0 before reporting (no {expect}; something in the process "
                              f"ended it early): {_tail(outcome)}")
    return WorkerResult(failure, work, found.get("run.json"), found.get("bench.json"), outcome.cpu_seconds,
                        outcome.seconds)


def classify(outcome: Outcome, work: Path, timeout: float) -> tuple[str, str] | None:
    """(category, reason) for a worker that did not finish cleanly, else None."""
    error = work / "error.json"
    if error.is_file():
        try:
            err = decode(WorkerFailure, error.read_text(), "worker error.json")
            return (err.category, err.message)
        except (OSError, InputError) as exc:
            return ("internal-error", f"worker wrote an unreadable error.json ({exc}): {_tail(outcome)}")
    return classify_outcome(outcome, timeout)


def classify_outcome(outcome: Outcome, timeout: float) -> tuple[str, str] | None:
    """(category, reason) from how a worker process ended alone (no error report of its own)."""
    if outcome.start_error:
        return ("internal-error", f"cannot start a worker: {outcome.start_error}")
    if outcome.timed_out:
        return ("timeout", f"worker did not finish within {timeout:g} s and was killed")
    if outcome.returncode == 0:
        return None
    tail = _tail(outcome)
    if outcome.signal == signal.SIGKILL:
        if outcome.oom_kills:
            return ("out-of-memory", f"worker killed by the kernel's out-of-memory killer (the cgroup counted "
                                     f"{outcome.oom_kills} OOM kill(s) while it ran): {tail}")
        return ("killed", f"worker killed by SIGKILL, with no sign of running out of memory (the cgroup counted "
                          f"{'no' if outcome.oom_kills == 0 else 'unknown'} OOM kills): {tail}")
    if outcome.signal:
        return ("crashed", f"worker {outcome.how_it_ended()} (native code in the runtime crashed): {tail}")
    if outcome.returncode == 70:
        return ("internal-error", f"worker hit a bug in multiexport: {tail}")
    return ("crashed", f"worker {outcome.how_it_ended()} without an error report: {tail}")


def _tail(outcome: Outcome) -> str:
    lines = [line for line in (outcome.stderr or outcome.stdout).strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no output"
