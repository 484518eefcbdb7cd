"""A sweep's directory: what it was asked to do, what has finished, and each row's compare output.

    OUT/sweep.json        the tasks (with their fingerprints), the spec's hash, shard, commit, when
    OUT/progress.jsonl    one line per start and end of a task, flushed and fsync'd as it happens
    OUT/rows/NAME/        that task's compare output (results.json, report.md, report.html, artifacts)
    OUT/rows/NAME.log     the command, how it ended, its output
    OUT/summary.json, OUT/matrix.md, OUT/matrix.html   rewritten after every row

A resumed sweep keeps every row whose end is recorded and re-runs the rest: a killed sweep loses no
finished row and repeats none. The journal is append-only; a line cut short by the kill is ignored.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence, TypeVar

from ..errors import InputError, UsageError
from ..files import confined, write_text_atomic
from ..files.bounded import TooDeep, loads, read_bytes, read_json
from ..results.schema import from_data, to_data
from .records import DIED, DONE, FAILED, SCHEMA, STATES, TIMEOUT, UNSCHEDULABLE, EndEvent, StartEvent, SweepMeta
from .spec import SweepSpec, SweepTask

SWEEP_FILE = "sweep.json"
JOURNAL = "progress.jsonl"
LOCK = ".sweep.lock"  # held by the running sweep (files.lock): one sweep per directory

# How a task ended (the `state` of its row), defined in sweeps.records: DONE, FAILED, DIED, TIMEOUT, UNSCHEDULABLE.
__all__ = ["DIED", "DONE", "FAILED", "JOURNAL", "LOCK", "SCHEMA", "STATES", "SWEEP_FILE", "TIMEOUT", "UNSCHEDULABLE",
           "RowOutcome", "SweepDir", "now"]

E = TypeVar("E", EndEvent, StartEvent)
META_LIMIT = 64 << 20      # sweep.json: ~100 bytes a task; 20 000 tasks are ~2 MiB
JOURNAL_LIMIT = 64 << 20   # progress.jsonl: ~400 bytes a start and end; far more than any real sweep appends


@dataclass(frozen=True)
class RowOutcome:
    """How one task ended.

    name: the task. state: DONE, FAILED, DIED, TIMEOUT or UNSCHEDULABLE. exit: compare's exit code (None
    when it never exited by itself). seconds: wall time of its last attempt. attempts: how many times it ran.
    reason: for any state but DONE, why (one line). host: the machine that ran it. fingerprint: the task's
    (a resumed sweep re-runs a row whose task changed).
    """

    name: str
    state: str
    exit: int | None
    seconds: float
    attempts: int
    reason: str = ""
    host: str = ""
    fingerprint: str = ""


class SweepDir:
    """The directory of one sweep, opened for a run (new) or for `--resume`."""

    def __init__(self, root: Path, meta: dict[str, Any]):
        self.root, self.meta = root, meta

    # -- opening -----------------------------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path, spec: SweepSpec, tasks: Sequence[SweepTask], shard: str, resume: bool,
             executor: str) -> "SweepDir":
        """A new sweep directory at `root` (new or empty), or the existing one to resume.

        Raises:
            UsageError: `root` holds something else, is a sweep already (without `resume`), or (with it)
                is not a sweep of the same tasks.
        """
        cls.check_usable(root, resume)
        marker = root / SWEEP_FILE
        if resume:
            meta = cls._read_meta(marker)
            asked = [t.name for t in tasks]
            if meta.get("tasks") != asked:
                raise UsageError(f"Sweep '{root}' | was started with tasks {meta.get('tasks')}, now asked for "
                                 f"{asked}, expected the same spec, --only and --shard to resume it")
            return cls(root, meta)
        confined.make_dirs(root, "rows", f"Sweep '{root}'")
        meta = {"schema": SCHEMA, "uid": uuid.uuid4().hex, "name": spec.name, "spec": str(spec.path),
                "spec_sha256": spec.sha256, "shard": shard or None, "executor": executor,
                "commit": _commit(spec.directory), "created": now(), "tasks": [t.name for t in tasks],
                "fingerprints": {t.name: t.fingerprint() for t in tasks}}

        write_text_atomic(confined.under(root, SWEEP_FILE, f"Sweep '{root}'"), json.dumps(meta, indent=1) + "\n")
        return cls(root, meta)

    @staticmethod
    def check_usable(root: Path, resume: bool) -> None:
        """Refuse `root` unless it is new or empty (a new sweep) or a sweep's directory (`resume`), before
        anything is written there."""
        marker = root / SWEEP_FILE
        if resume:
            for name in (SWEEP_FILE, JOURNAL, "rows", "history.sqlite"):  # refused before anything is touched
                confined.under(root, name, f"Sweep '{root}'")
            if not marker.is_file():
                raise UsageError(f"Sweep '{root}' | has no {SWEEP_FILE}, expected the directory of a sweep to "
                                 "resume (drop --resume to start one)")
            return
        if root.is_symlink() or (root.exists() and not root.is_dir()):
            raise UsageError(f"Sweep '{root}' | is a file or a link, expected a new or empty directory")
        if root.is_dir() and any(p.name != LOCK for p in root.iterdir()):
            if marker.is_file():
                raise UsageError(f"Sweep '{root}' | is a sweep already, expected a new or empty directory (add "
                                 "--resume to continue it)")
            raise UsageError(f"Sweep '{root}' | is not empty and not a sweep, expected a new or empty directory")

    @staticmethod
    def _read_meta(marker: Path) -> dict[str, Any]:
        """sweep.json, read bounded: a regular file (no link, FIFO or device), at most META_LIMIT bytes, JSON
        nested at most JSON_DEPTH deep, then through the codec as a `SweepMeta` (every field typed, task names
        plain file names), else one line naming the field. Returned as the JSON object of the fields it has."""
        meta = read_json(marker, "Sweep", META_LIMIT, UsageError, f"expected a {SWEEP_FILE} written by "
                         "`multiexport sweep`", follow=False)
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
            raise UsageError(f"Sweep '{marker}' | got schema {meta.get('schema') if isinstance(meta, dict) else None!r}, "
                             f"expected {SCHEMA!r}")
        typed = from_data(SweepMeta, meta, f"Sweep '{marker}' | sweep.json", UsageError)
        return {k: v for k, v in to_data(typed).items() if k in meta}

    @classmethod
    def read(cls, root: Path) -> "SweepDir":
        """An existing sweep directory, to read (diff, history, matrix)."""
        return cls(root, cls._read_meta(root / SWEEP_FILE))

    # -- the journal --------------------------------------------------------------------------------------

    def ended(self) -> dict[str, RowOutcome]:
        """The rows whose end is recorded (the last end of each), in the journal's order."""
        out: dict[str, RowOutcome] = {}
        for event in self._events():
            end = _typed(EndEvent, "end", event)
            if end is not None:
                out[end.name] = RowOutcome(**{k: getattr(end, k) for k in RowOutcome.__dataclass_fields__})
        return out

    def starts(self) -> dict[str, int]:
        """How many times each task was started, over every run of this sweep."""
        counts: dict[str, int] = {}
        for event in self._events():
            start = _typed(StartEvent, "start", event)
            if start is not None:
                counts[start.name] = counts.get(start.name, 0) + 1
        return counts

    def to_run(self, tasks: Sequence[SweepTask]) -> list[SweepTask]:
        """The tasks a resumed run must still run: not ended, ended unschedulable, or changed since."""
        ended = self.ended()
        return [t for t in tasks if t.name not in ended or ended[t.name].state == UNSCHEDULABLE
                or ended[t.name].fingerprint != t.fingerprint()]

    def record_start(self, task: SweepTask, attempt: int) -> None:
        self._append({"event": "start", "name": task.name, "attempt": attempt, "at": now()})

    def record_end(self, outcome: RowOutcome) -> None:
        self._append({"event": "end", **asdict(outcome), "at": now()})

    def _append(self, event: dict[str, Any]) -> None:
        line = json.dumps(event) + "\n"
        fd = confined.open_new_file(self.root, JOURNAL, self.what, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            _write_all(fd, line.encode(), self.root / JOURNAL)
            os.fsync(fd)
        except OSError as exc:  # a full disk: the path named, so the command says which (one line, exit 2)
            raise OSError(exc.errno, exc.strerror, str(self.root / JOURNAL)) from None
        finally:
            os.close(fd)

    def _events(self) -> Iterable[dict[str, Any]]:
        path = confined.under(self.root, JOURNAL, self.what)
        if not os.path.lexists(path):
            return []
        text = read_bytes(path, f"Sweep '{self.root}' journal", JOURNAL_LIMIT, UsageError,
                          "expected the journal `multiexport sweep` writes (a regular file)",
                          follow=False).decode("utf-8", errors="replace")
        events = []
        for line in text.splitlines():
            try:
                event = loads(line)
            except (TooDeep, ValueError, RecursionError):
                continue  # cut short by a kill while it was written (or nested past any line we write)
            if isinstance(event, dict):
                events.append(event)
        return events

    # -- rows ---------------------------------------------------------------------------------------------

    @property
    def what(self) -> str:
        return f"Sweep '{self.root}'"

    def row_dir(self, name: str) -> Path:
        """rows/NAME, refused (one line) if rows/ or rows/NAME is a link: nothing is read or written through one."""
        return confined.under(self.root, f"rows/{name}", self.what)

    def row_file(self, name: str, file_name: str) -> Path:
        """rows/NAME/FILE (results.json, a report), no component of it a link."""
        return confined.under(self.root, f"rows/{name}/{file_name}", self.what)

    def log_path(self, name: str) -> Path:
        return confined.under(self.root, f"rows/{name}.log", self.what)

    def write_log(self, name: str, text: str) -> None:
        """rows/NAME.log, in UTF-8, replacing whatever is there (never written through a link). Written whole
        or not at all beside the head `start_log` wrote: on a full disk the log keeps the command it ran."""
        relative = f"rows/{name}.log"
        path = self.log_path(name)
        data = text.encode("utf-8", errors="replace")
        fresh = f"rows/.{name}.log.new"
        confined.remove_tree(self.root, fresh, self.what)
        fd = confined.open_new_file(self.root, fresh, self.what, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                _write_all(fd, data, path)
            finally:
                os.close(fd)
            if os.path.islink(path):  # a link planted there is removed, never written through
                os.unlink(path)
            os.replace(self.root / fresh, confined.under(self.root, relative, self.what))
        except OSError as exc:
            confined.remove_tree(self.root, fresh, self.what)
            raise OSError(exc.errno, exc.strerror, str(path)) from None

    def start_log(self, name: str, command: str) -> None:
        """rows/NAME.log's head, written as the task starts (while there is room): the command it runs."""
        self.write_log(name, f"$ {command}\n# started {now()}; this line is replaced when it ends\n")

    def clear_row(self, name: str) -> None:
        """Remove what an unfinished attempt of `name` left (this sweep's own row directory, nothing else;
        a link there is removed itself, never followed)."""
        confined.make_dirs(self.root, "rows", self.what)
        confined.remove_tree(self.root, f"rows/{name}", self.what)


def _typed(record: type[E], kind: str, event: dict[str, Any]) -> E | None:
    """A journal line as `record` (an end or a start event as this module writes it), or None: a journal edited by
    hand is read, never trusted, and a line that is not that event (or is malformed) is no event."""
    if event.get("event") != kind:
        return None
    try:
        return from_data(record, event, "journal line")
    except InputError:
        return None


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """Write every byte (os.write may write fewer), the path named in the error."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def now() -> str:
    """UTC, to the second, as every sweep file writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _commit(directory: Path) -> str | None:
    """The commit the spec's directory is at ($MULTIEXPORT_COMMIT first, for CI checkouts without .git)."""
    if os.environ.get("MULTIEXPORT_COMMIT"):
        return os.environ["MULTIEXPORT_COMMIT"]
    import subprocess

    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None
