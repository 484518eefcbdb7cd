"""One timing phase per machine, and nothing else running beside it: compares started side by side (a
sweep's pool, or Ray tasks on one node) export and check parity at once, but time alone.

A readers-writer lock on a file named by `$MULTIEXPORT_TIMING_LOCK` (a sweep sets it for the compares it
starts; unset, a compare takes none): every compare holds it shared from its start, and exclusive for its
timed rounds, so a timing phase begins only once no other compare is exporting, loading or checking, and
none starts while it runs. It is an `flock`, so the kernel releases it when its holder dies (a killed
compare never leaves the machine locked), and converting shared to exclusive drops the shared lock first,
so two compares asking at once cannot deadlock. A compare waiting for it is idle, but its wait counts
against the sweep's per-task timeout.
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


class MachineLock:
    """The machine's lock as this compare holds it (shared until `exclusive`); `fd` None when none is used."""

    def __init__(self, fd: int | None, path: str, say: Callable[[str], None]):
        self.fd, self.path, self.say = fd, path, say

    def _take(self, mode: int, what: str) -> float:
        import fcntl

        if self.fd is None:
            return 0.0
        t0 = time.perf_counter()
        try:
            fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            self.say(f"waiting for the machine's timing lock ({self.path}): {what}")
            fcntl.flock(self.fd, mode)
        waited = time.perf_counter() - t0
        if waited > 0.05:
            self.say(f"timing lock taken after {waited:.1f} s")
        return waited

    @contextlib.contextmanager
    def exclusive(self, wanted: bool = True) -> Iterator[float]:
        """Hold the lock alone for the block (the timed rounds); yields the seconds waited. Shared again after."""
        if self.fd is None or not wanted:
            yield 0.0
            return
        import fcntl

        waited = self._take(fcntl.LOCK_EX, "another compare is running beside this one")
        try:
            yield waited
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_SH)  # a downgrade never waits


@contextlib.contextmanager
def machine_share(say: Callable[[str], None]) -> Iterator[MachineLock]:
    """Hold the machine's lock shared for the block (a whole compare), when `$MULTIEXPORT_TIMING_LOCK` names one."""
    path = os.environ.get(ENV)
    if not path:
        yield MachineLock(None, "", say)
        return
    try:  # never through a link planted at the name (the file lives in a shared temporary directory)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        say(f"running without the machine's timing lock: {path}: {exc.strerror or exc}")
        yield MachineLock(None, path, say)
        return
    lock = MachineLock(fd, path, say)
    try:
        import fcntl

        lock._take(fcntl.LOCK_SH, "another compare is timing")
        yield lock
    finally:
        os.close(fd)
