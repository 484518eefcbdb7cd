"""One timing phase per machine: compares started side by side (a sweep's pool) export and check parity at
once, but time one after another, so no latency is measured under another compare's load.

The lock is an advisory `flock` on a file named by `$MULTIEXPORT_TIMING_LOCK` (a sweep sets it for the
compares it starts; unset, a compare takes no lock). The kernel releases it when the holder dies, so a
killed compare never leaves the machine locked.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

ENV = "MULTIEXPORT_TIMING_LOCK"


def machine_lock_path() -> Path:
    """The lock file every sweep on this machine shares (in the system's temporary directory, per user)."""
    return Path(tempfile.gettempdir()) / f"multiexport-timing-{os.getuid()}.lock"


@contextlib.contextmanager
def timing_phase(say: Callable[[str], None], wanted: bool = True) -> Iterator[float]:
    """Hold the machine's timing lock (when `$MULTIEXPORT_TIMING_LOCK` names one and `wanted`) for the
    block; yields the seconds spent waiting for it (0.0 when no lock is taken)."""
    path = os.environ.get(ENV)
    if not path or not wanted:
        yield 0.0
        return
    import fcntl

    try:  # never through a link planted at the name (the file lives in a shared temporary directory)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        say(f"timing without the machine's timing lock: {path}: {exc.strerror or exc}")
        yield 0.0
        return
    try:
        t0 = time.perf_counter()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for the machine's timing lock ({path}): another compare is timing")
            fcntl.flock(fd, fcntl.LOCK_EX)
        waited = time.perf_counter() - t0
        if waited > 0.05:
            say(f"timing lock taken after {waited:.1f} s")
        try:
            yield waited
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
