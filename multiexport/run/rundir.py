"""A compare's output directory: claimed before any work, stale results removed, the run's state marked.

The directory must be new, empty, or one a previous compare wrote (its `.multiexport-run` marker):
multiexport never writes into, or deletes from, a directory of the user's. The previous
run's results.json and reports are removed before the new run starts, so nothing stale can be read as
this run's; while the run works the marker says "running", and an interrupted run's results say so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ArtifactError
from ..exporting.outdir import disk_error, remove_stale
from ..files import write_text_atomic
from ..files.lock import LockHeld, NotALockFile, exclusive
from ..files.owned import is_stamped
from ..versions import utc_now

MARKER = ".multiexport-run"
LOCK = ".multiexport-lock"  # held (flock) by the compare running in the directory
OUTPUTS = ("results.json", "report.md", "report.html")
SYNTHETIC_CALIBRATION = "calibration.npz"  # int8's synthetic samples (comparison/prepare.py), removed only if ours


@dataclass
class Claim:
    """A compare's hold on its output directory, from `claim_run_dir` until `release`.

    out: the directory. created: this compare made it (a run that fails before writing anything removes it).
    """

    out: Path
    created: bool
    _lock: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    def release(self, wrote_nothing: bool = False) -> None:
        """Let the directory go; with `wrote_nothing`, a directory this compare created is removed again
        when it still holds only the run's own marker (a usage error found after the claim)."""
        self._lock.close()
        if wrote_nothing and self.created:
            with contextlib.suppress(OSError):
                if {p.name for p in self.out.iterdir()} <= {MARKER}:
                    shutil.rmtree(self.out)


def claim_run_dir(out: Path) -> Claim:
    """Refuse a directory that is not multiexport's, or one another compare works in now; clear a previous
    run's results and what its killed exports left; mark this run. Hold the returned claim until the end."""
    if out.exists() and not out.is_dir():
        raise ArtifactError(f"Output '{out}' | is a file, expected a directory for the compare's artifacts and reports")
    # The marker alone proves the directory is a compare's: a results.json proves nothing (one downloaded
    # next to the user's own report.md would have that report replaced).
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ArtifactError(f"Output '{out}' | exists and was not written by `multiexport compare` (no {MARKER}; "
                            "the output of a multiexport older than 0.2 has none either); nothing was changed: choose "
                            "a new or empty directory")
    claim = Claim(out, created=not out.exists())
    try:
        out.mkdir(parents=True, exist_ok=True)
        # The kernel's lock, for the whole run: two compares into one directory would measure each other's
        # artifacts and mix their results. One whose holder died (even by kill -9) is free again.
        claim._lock.enter_context(exclusive(out / LOCK))
    except LockHeld as exc:
        who = f"pid {exc.held.pid}" if exc.held.pid else "another process"
        raise ArtifactError(f"Output '{out}' | another multiexport compare ({who}) is running in it now, expected one "
                            "compare per output directory: wait for it to finish, or choose another --out") from None
    except NotALockFile as exc:
        raise ArtifactError(f"Output '{out}' | its lock '{exc.path}' is {exc.what}, expected multiexport's own lock "
                            "file: nothing was written there; remove it") from None
    except OSError as exc:
        raise disk_error(exc, out) from exc
    try:
        remove_stale(out)
        probe = out / f".write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
        if is_stamped(out / SYNTHETIC_CALIBRATION):  # a user's own file of that name (--calibration) stays
            (out / SYNTHETIC_CALIBRATION).unlink()
        mark(out, "running")
    except OSError as exc:
        claim.release()
        raise disk_error(exc, out) from exc
    except BaseException:
        claim.release()
        raise
    return claim


def mark(out: Path, state: str) -> None:
    write_text_atomic(out / MARKER, json.dumps({"state": state, "pid": os.getpid(), "at": utc_now()}) + "\n")



def mark_in_place(out: Path, state: str) -> None:
    """Mark the run's state when the disk may be full: the marker is overwritten in place, within the bytes it
    already has (no new block, no temporary file), padded with spaces (still JSON). Best effort: a marker
    that cannot be written stays as it was."""
    text = json.dumps({"state": state, "pid": os.getpid(), "at": utc_now()})
    try:
        with open(out / MARKER, "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = text.encode()
            if len(data) < size:
                fh.write(data.ljust(size - 1) + b"\n")
    except OSError:
        pass
