"""`multiexport sweep`: every task of a spec compared, rows journaled, the matrix and history kept current."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import MultiexportError, UsageError
from ..files import confined
from ..files.lock import LockHeld, NotALockFile, exclusive
from . import matrix
from .history import History
from .local import default_jobs, run_local
from .ray_exec import run_ray
from .spec import SweepSpec, SweepTask
from .state import DONE, LOCK, RowOutcome, SweepDir

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class SweepConfig:
    """How to run a sweep.

    out: the sweep's directory. executor: "local" or "ray". jobs: compares at once (local; None: sized to
    the cores and memory). resume: continue the sweep in `out`. only: task names or tags (comma-separated).
    shard: "i/n", this run's share. history: the SQLite file rows are recorded into (None: OUT/history.sqlite).
    ray_address: the cluster to join (None: $RAY_ADDRESS, else a local one).
    """

    out: Path
    executor: str = "local"
    jobs: int | None = None
    resume: bool = False
    only: str = ""
    shard: str = ""
    history: Path | None = None
    ray_address: str | None = None

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise UsageError(f"Option '--executor' | got {self.executor!r}, expected one of {', '.join(EXECUTORS)}")
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1):
            raise UsageError(f"Option '--jobs' | got {self.jobs!r}, expected an integer >= 1")


@dataclass(frozen=True)
class SweepResult:
    """A finished (or stopped) sweep.

    directory: its directory. rows: every ended task's row, in the spec's order. ran: the tasks this run
    ran (a resumed run skips the rows already ended). seconds: this run's wall time. markdown: the matrix.
    """

    directory: Path
    rows: tuple[matrix.Row, ...]
    ran: tuple[str, ...]
    seconds: float
    markdown: str

    @property
    def exit_code(self) -> int:
        """0 when every task wrote its results (their verdicts are in the matrix), 3 when one did not."""
        return 0 if all(r.outcome.state == DONE for r in self.rows) else 3


def run_sweep(spec: SweepSpec, tasks: Sequence[SweepTask], config: SweepConfig,
              say: Callable[[str], None] = lambda _: None) -> SweepResult:
    """Run (or resume) a sweep of `tasks` into `config.out`.

    Args:
        spec: the parsed spec (its directory is where each compare runs).
        tasks: the tasks of this run (`spec.select`ed by --only and --shard).
        config: where and how.
        say: progress, one line per event.
    Returns:
        the rows, once every task has ended.
    Raises:
        UsageError: `config.out` is not a new directory (nor, with resume, this sweep's), or another
            sweep is running in it.
    """
    if not tasks:
        raise UsageError(f"Sweep spec '{spec.path}' | no task selected (--only {config.only!r}, --shard "
                         f"{config.shard!r}), expected at least one")
    # Absolute now: each compare runs from the spec's directory, not from ours
    config = dataclasses.replace(config, out=Path(os.path.abspath(config.out)))
    SweepDir.check_usable(config.out, config.resume)  # again under the lock, in SweepDir.open
    config.out.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive(config.out / LOCK):
            return _run(spec, tasks, config, say)
    except LockHeld as exc:
        raise UsageError(f"Sweep '{config.out}' | another sweep (pid {exc.held.pid}) is running in it, expected "
                         "one sweep per directory") from None
    except NotALockFile as exc:
        raise UsageError(f"Sweep '{config.out}' | {exc.path} is {exc.what}, expected a lock file or nothing") from None


def _run(spec: SweepSpec, tasks: Sequence[SweepTask], config: SweepConfig, say: Callable[[str], None]) -> SweepResult:
    started = time.perf_counter()
    if config.history is not None:  # someone's file: refused before the sweep directory is made
        History(config.history).check()
    sweep = SweepDir.open(config.out, spec, tasks, config.shard, config.resume, config.executor)
    todo = sweep.to_run(tasks) if config.resume else list(tasks)
    kept = len(tasks) - len(todo)
    say(f"sweep '{spec.name}': {len(tasks)} task(s), {len(todo)} to run"
        + (f", {kept} kept from before" if kept else "") + f", executor {config.executor}")
    order = [t.name for t in tasks]
    # OUT/history.sqlite: a link planted there is refused, not followed to create a database elsewhere
    history = History(config.history or confined.under(config.out, "history.sqlite", f"Sweep '{config.out}'"))
    lock = threading.Lock()
    outcomes = sweep.ended()

    def on_end(outcome: RowOutcome) -> None:
        with lock:
            sweep.record_end(outcome)  # the journal first: a row it holds is never run again
            outcomes[outcome.name] = outcome
            try:  # the views are rewritten at the end too: a full disk or a locked history must not stop the sweep
                rows = matrix.rows_of(config.out, outcomes, order)
                matrix.write(config.out, rows, f"sweep {spec.name}")
                history.record_row(sweep, next(r for r in rows if r.outcome.name == outcome.name))
            except (OSError, MultiexportError) as exc:
                say(f"warning: the matrix or history was not updated after {outcome.name}: {exc}")
            say(f"{outcome.name}: {outcome.state}{' (' + outcome.reason + ')' if outcome.reason else ''} in "
                f"{outcome.seconds:.0f} s [{sum(n in outcomes for n in order)}/{len(order)}]")

    history.record_sweep(sweep)
    if config.executor == "ray":
        run_ray(todo, sweep, spec.directory, config.ray_address, on_end, say)
    else:
        jobs = config.jobs or default_jobs()
        say(f"local: {jobs} compare(s) at once, timing phases one at a time")
        run_local(todo, sweep, spec.directory, jobs, on_end, say)
    rows = matrix.rows_of(config.out, outcomes, order)
    text = matrix.write(config.out, rows, f"sweep {spec.name}")
    history.finish_sweep(sweep)
    return SweepResult(config.out, tuple(rows), tuple(t.name for t in todo), time.perf_counter() - started, text)
