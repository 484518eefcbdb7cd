"""One task of a sweep: `multiexport compare` in a process of its own, and how it ended.

Used where the task runs: by the local executor in the sweep's own process, by the Ray executor inside a
Ray task on whichever node took it. The compare process dies with the one that started it (the
supervisor's rule), so a killed sweep leaves no compare writing into its directory.
"""

from __future__ import annotations

import os
import platform
import shlex
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..files.bounded import read_json
from ..results.schema import from_data
from ..system.process import Outcome, run_command
from ..system.timing_lock import ENV as TIMING_LOCK_ENV, machine_lock_path
from .records import ResultsEnd
from .spec import SweepTask
from .state import DIED, DONE, FAILED, TIMEOUT

EXIT_MEANING = {0: "every backend faithful", 1: "a parity failure", 2: "a user error", 3: "a backend failed",
                70: "a bug in multiexport"}


@dataclass(frozen=True)
class Attempt:
    """One run of a task's compare.

    state: DONE (results.json written), FAILED, DIED (killed or crashed: worth one more try) or TIMEOUT.
    exit: compare's exit code (None if it did not exit by itself). seconds: its wall time. reason: for
    any state but DONE, one line saying why. log: the command, how it ended and its output. host: where.
    """

    state: str
    exit: int | None
    seconds: float
    reason: str
    log: str
    host: str


def command(task: SweepTask, out_dir: Path) -> list[str]:
    """The compare's command line. `-P`: the working directory (the spec's folder) is not put first on the
    module path, so a `multiexport.py` or `multiexport/` beside a spec cannot run instead of multiexport; a
    `package.module` target there still imports (compare appends the working directory, never shadowing)."""
    return [sys.executable, "-P", "-m", "multiexport", *task.compare_args(out_dir)]


def run_task(task: SweepTask, out_dir: Path, cwd: Path) -> Attempt:
    """Run `task`'s compare into `out_dir` (from `cwd`, where its relative target resolves), holding the
    machine's timing lock around its timing phase."""
    cmd = command(task, out_dir)
    env = {**os.environ, TIMING_LOCK_ENV: str(machine_lock_path())}
    outcome = run_command(cmd, timeout=task.timeout, cwd=cwd, env=env)
    wrote = (out_dir / "results.json").is_file() and not (out_dir / "results.json").is_symlink()
    state, reason = _verdict(outcome, wrote, task.timeout, out_dir)
    log = (f"$ {shlex.join(cmd)}\n# {outcome.how_it_ended()} in {outcome.seconds:.1f} s"
           f"{' (' + EXIT_MEANING[outcome.returncode] + ')' if outcome.returncode in EXIT_MEANING else ''}\n"
           f"{outcome.stdout}\n--- stderr ---\n{outcome.stderr}")
    return Attempt(state, outcome.returncode if outcome.returncode is not None and outcome.returncode >= 0 else None,
                   round(outcome.seconds, 2), reason, log, platform.node())


# A compare stopped by a signal exits 128+N after writing what finished (state "interrupted"): not a result
_STOPPED = {128 + signal.SIGINT: "SIGINT", 128 + signal.SIGTERM: "SIGTERM", 128 + signal.SIGHUP: "SIGHUP"}


def _interrupted(path: Path) -> bool:
    """results.json of a compare that was stopped part-way (its `state`), read without trusting it."""

    try:  # bounded, no FIFO, no link: what a target left there is not trusted
        data = read_json(path, "Results", 1 << 26, InputError, "expected a compare's results", follow=False)
        return bool(from_data(ResultsEnd, data, f"Results '{path}'").stopped)
    except InputError:  # not a compare's results (or its state of another type): not one that was stopped
        return False


def _verdict(outcome: Outcome, wrote: bool, timeout: float, out_dir: Path) -> tuple[str, str]:
    if outcome.timed_out:
        return TIMEOUT, f"compare ran past the task's timeout ({timeout:g} s) and was killed"
    if outcome.start_error:
        return FAILED, f"compare could not start: {outcome.start_error}"
    if outcome.signal is not None:
        oom = " (out of memory: the cgroup's oom_kill count rose)" if outcome.oom_kills else ""
        return DIED, f"compare {outcome.how_it_ended()}{oom}"
    if outcome.returncode in _STOPPED or (wrote and _interrupted(out_dir / "results.json")):
        name = _STOPPED.get(outcome.returncode or 0, "a signal")
        return DIED, f"compare was stopped by {name} before it finished (its partial results are not a row)"
    if wrote:  # whatever its verdicts (a backend that failed, a bug in one row): they are in results.json
        return DONE, ""
    last = [line for line in outcome.stderr.strip().splitlines() if line.strip()]
    why = last[-1].strip() if last else "no output"
    meaning = EXIT_MEANING.get(outcome.returncode or 0, "")
    return FAILED, f"compare exited {outcome.returncode}{' (' + meaning + ')' if meaning else ''} " \
                   f"without results.json: {why[:400]}"
