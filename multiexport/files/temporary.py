"""Temporary directories multiexport makes for its workers, marked as its own and by their owner.

A worker whose supervisor was killed removes the temporaries it was given, since nobody else will. It
must never take a user's directory for one: a compare's `--out` may well be `$TMPDIR/multiexport-run`,
and a worker's argument (the backend's directory inside it) then sits exactly where a temporary would.
So what a worker may remove is decided by a mark that only `make_temporary` writes, not by a path's name.

The mark names the process that made the directory (its pid and start time, so a reused pid is not taken
for it): a process killed outright (`kill -9`) cannot remove what it made, so every multiexport command
starts by removing the marked temporaries whose owner is gone (`remove_orphaned`).

A worker runs with a $TMPDIR of its own (`run.workers.worker_environment`), so what its frameworks write there
goes when its parent removes that directory, even after a crash in native code. Marked temporaries are still
made in, and looked for in, the user's temporary directory (`root`): the worker is told where it is.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

MARK = ".multiexport-temporary"  # a file in each directory make_temporary creates: {"pid", "start"}
PREFIX = "multiexport-"
ROOT_ENV = "MULTIEXPORT_TEMPORARY_ROOT"  # a worker's $TMPDIR is its own: this names the user's, where marks live


def root() -> Path:
    """Where marked temporaries are made and looked for: the user's temporary directory, which a worker (whose
    $TMPDIR is a private directory its parent removes) is told in $MULTIEXPORT_TEMPORARY_ROOT."""
    given = os.environ.get(ROOT_ENV)
    if given and os.path.isdir(given):
        return Path(given)
    return Path(tempfile.gettempdir())


def make_temporary(prefix: str) -> Path:
    """A new directory `ROOT/multiexport-PREFIX-XXXXXXXX` (ROOT: `root()`), marked as this process's temporary."""
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{prefix}-", dir=root()))
    pid = os.getpid()
    (path / MARK).write_text(json.dumps({"pid": pid, "start": process_start(pid)}))
    return path


def is_temporary(path: Path) -> bool:
    """True only for a directory make_temporary created: a real directory directly in `root()`, with the mark."""
    tmp = root().resolve()
    return (path.parent.resolve() == tmp and path.name.startswith(PREFIX) and not path.is_symlink()
            and path.is_dir() and (path / MARK).is_file())


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: fields count from the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        return None if fields[0] == "Z" else int(fields[19])
    except (ValueError, IndexError):
        return None


def owner_alive(path: Path) -> bool:
    """Whether the process that made temporary `path` still runs; True when the mark does not say who
    made it (a multiexport older than the owner mark): only a proven orphan is removed."""
    try:
        owner = json.loads((path / MARK).read_text() or "{}")
        pid, start = int(owner["pid"]), owner["start"]
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return process_start(pid) == start if start is not None else Path(f"/proc/{pid}").exists()


def remove_orphaned() -> list[str]:
    """Remove the temporaries in `root()` whose owner is gone (killed before it could); their names."""
    tmp = root()
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(tmp) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        path = Path(entry.path)
        if is_temporary(path) and not owner_alive(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(entry.name)
    return removed
