"""Temporary directories multiexport makes for its workers, marked as its own.

A worker whose supervisor was killed removes the temporaries it was given, since nobody else will. It
must never take a user's directory for one: a compare's `--out` may well be `$TMPDIR/multiexport-run`,
and a worker's argument (the backend's directory inside it) then sits exactly where a temporary would.
So what a worker may remove is decided by a mark that only `make_temporary` writes, not by a path's name.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

MARK = ".multiexport-temporary"  # an empty file in each directory make_temporary creates


def make_temporary(prefix: str) -> Path:
    """A new directory `$TMPDIR/multiexport-PREFIX-XXXXXXXX`, marked as multiexport's temporary."""
    path = Path(tempfile.mkdtemp(prefix=f"multiexport-{prefix}-"))
    (path / MARK).touch()
    return path


def is_temporary(path: Path) -> bool:
    """True only for a directory make_temporary created: a real directory directly in $TMPDIR, with the mark."""
    tmp = Path(tempfile.gettempdir()).resolve()
    return (path.parent.resolve() == tmp and path.name.startswith("multiexport-") and not path.is_symlink()
            and path.is_dir() and (path / MARK).is_file())
