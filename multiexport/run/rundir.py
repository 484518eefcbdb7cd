"""A compare's output directory: claimed before any work, stale results removed, the run's state marked.

The directory must be new, empty, or one a previous compare wrote (its `.multiexport-run` marker):
multiexport never writes into, or deletes from, a directory of the user's. The previous
run's results.json and reports are removed before the new run starts, so nothing stale can be read as
this run's; while the run works the marker says "running", and an interrupted run's results say so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import ArtifactError
from ..export.outdir import disk_error
from ..files import write_text_atomic
from ..versions import utc_now

MARKER = ".multiexport-run"
OUTPUTS = ("results.json", "report.md", "report.html")


def claim_run_dir(out: Path) -> None:
    """Refuse a directory that is not multiexport's; clear a previous run's results; mark this run."""
    if out.exists() and not out.is_dir():
        raise ArtifactError(f"Output '{out}' | is a file, expected a directory for the compare's artifacts and reports")
    # The marker alone proves the directory is a compare's: a results.json proves nothing (one downloaded
    # next to the user's own report.md would have that report replaced).
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ArtifactError(f"Output '{out}' | exists and was not written by `multiexport compare` (no {MARKER}; "
                            "the output of a multiexport older than 0.2 has none either); nothing was changed: choose "
                            "a new or empty directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
        mark(out, "running")
    except OSError as exc:
        raise disk_error(exc, out) from exc


def mark(out: Path, state: str) -> None:
    write_text_atomic(out / MARKER, json.dumps({"state": state, "pid": os.getpid(), "at": utc_now()}) + "\n")

