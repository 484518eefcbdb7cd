"""A sweep's own files as typed records, read through the one codec (results.schema.from_data): sweep.json
(`SweepMeta`) and the lines of progress.jsonl (`StartEvent`, `EndEvent`).

Why: these files are read back by resume, merge, diff and history, and may have been edited by hand or by
someone else; the codec checks every field against its type with the field's path in the error, and each
record's `check_loaded` checks what a type cannot say (a task name that is a plain file name, a wall time that
is finite and not negative, bounded text). A malformed sweep.json is one UsageError line; a malformed journal
line is no event (the journal is append-only and a line cut short by a kill is expected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..errors import InputError
from .names import valid_name

SCHEMA = "multiexport.sweep/1"

# How a task ended (the `state` of its row):
DONE = "done"                    # compare ran to its end and wrote results.json (its verdicts are in there)
FAILED = "failed"                # compare exited without results.json (e.g. the target cannot be imported)
DIED = "died"                    # its process was killed or crashed, twice (re-run once)
TIMEOUT = "timeout"              # it ran past the task's timeout
UNSCHEDULABLE = "unschedulable"  # no machine of the cluster offers what it needs (re-tried on --resume)
STATES = (DONE, FAILED, DIED, TIMEOUT, UNSCHEDULABLE)

MAX_SECONDS = 10 * 365 * 86400.0  # a row's wall time: finite, not negative, not past ten years
MAX_TEXT = 100_000                 # a reason, host or fingerprint: one line of a log, not a file
MAX_ATTEMPTS = 1000


@dataclass(frozen=True)
class MergedFrom:
    """One sweep a merged sweep came from (`merged_from[i]`).

    directory: its directory, absolute. uid: its uid. shard: its shard ("i/n"), or None.
    """

    directory: str
    uid: str | None = None
    shard: str | None = None


@dataclass(frozen=True)
class SweepMeta:
    """sweep.json: what a sweep was asked to do.

    schema: "multiexport.sweep/1". uid: the sweep's unique id (its rows' key in a history). tasks: the task
    names, in order (each a plain file name: a directory under rows/). name: the spec's name. spec: the spec's
    path. spec_sha256: the spec's digest. shard: "i/n", or None. executor: local, ray, or merged. commit: the
    commit the spec's directory was at. created: when it started (UTC). fingerprints: task -> fingerprint (a
    resumed sweep re-runs a task whose fingerprint changed). merged_from: for a merged sweep, its sources.
    """

    schema: Literal["multiexport.sweep/1"]
    uid: str
    tasks: list[str]
    name: str | None = None
    spec: str | None = None
    spec_sha256: str | None = None
    shard: str | None = None
    executor: str | None = None
    commit: str | None = None
    created: str | None = None
    fingerprints: dict[str, str] | None = None
    merged_from: list[MergedFrom] | None = None

    def check_loaded(self, where: str) -> None:
        """Each task name is a plain file name (it becomes rows/NAME)."""
        bad = next((t for t in self.tasks if not valid_name(t)), None)
        if bad is not None:
            raise InputError(f"{where}.tasks | got {ascii(bad)[:80]}, expected task names that are plain file names")


@dataclass(frozen=True)
class StartEvent:
    """A line of progress.jsonl recording that a task started.

    event: "start". name: the task.
    """

    event: Literal["start"]
    name: str


@dataclass(frozen=True)
class EndEvent:
    """A line of progress.jsonl recording how a task ended (state.RowOutcome's fields, with `event`).

    event: "end". name: the task. state: one of STATES. exit: compare's exit code, or None. seconds: wall time
    of its last attempt. attempts: how many times it ran. reason: why, for any state but done. host: the machine
    that ran it. fingerprint: the task's. at: when it was written (UTC).
    """

    event: Literal["end"]
    name: str
    state: str
    exit: int | None
    seconds: float
    attempts: int
    reason: str
    host: str
    fingerprint: str
    at: str | None = None

    def check_loaded(self, where: str) -> None:
        """What the journal's writer writes: a plain task name, a known state, figures that can be (a negative,
        infinite or ten-year `seconds` is no wall time), an exit code a process has, bounded text."""
        if not valid_name(self.name):  # a name is a directory under rows/
            raise InputError(f"{where}.name | got {ascii(self.name)[:80]}, expected a plain file name")
        if self.state not in STATES:
            raise InputError(f"{where}.state | got {ascii(self.state)[:80]}, expected one of {', '.join(STATES)}")
        if not math.isfinite(self.seconds) or not 0 <= self.seconds <= MAX_SECONDS:
            raise InputError(f"{where}.seconds | got {self.seconds!r}, expected 0 to {MAX_SECONDS:.0f}")
        if not 0 <= self.attempts <= MAX_ATTEMPTS:
            raise InputError(f"{where}.attempts | got {self.attempts!r}, expected 0 to {MAX_ATTEMPTS}")
        if self.exit is not None and not -255 <= self.exit <= 255:
            raise InputError(f"{where}.exit | got {self.exit!r}, expected an exit code (-255 to 255) or null")
        for field in ("reason", "host", "fingerprint"):
            if len(getattr(self, field)) > MAX_TEXT:
                raise InputError(f"{where}.{field} | is {len(getattr(self, field))} characters, expected at most "
                                 f"{MAX_TEXT}")


@dataclass(frozen=True)
class ResultsEnd:
    """How a compare's results.json says its run ended: all a sweep reads of it before the matrix reads it whole.

    state: "interrupted" when the compare was stopped part-way, or None. interrupted: the older spelling (true).
    """

    state: str | None = None
    interrupted: bool | None = None

    @property
    def stopped(self) -> bool:
        return self.state == "interrupted" or self.interrupted is True
