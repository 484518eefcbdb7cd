"""Lock files: one writer at a time for a directory, refused rather than made to wait.

The lock is the kernel's (`flock`), so it ends with its holder however that ends, `kill -9` included: a
lock file left by a dead process is simply taken over. The file is opened without following a link and
must be a regular file: a link planted at a lock's name never makes multiexport create or write a file
where it points. The holder writes its pid into the file, so a refusal can name it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


@dataclass(frozen=True)
class Held:
    """A lock another process holds.

    path: the lock file. pid: the holder's pid as it wrote it (None when it has not written it yet).
    """

    path: Path
    pid: int | None


class LockHeld(Exception):
    """The lock is held by another process (`held` says which)."""

    def __init__(self, held: Held):
        super().__init__(f"{held.path} is held by pid {held.pid}")
        self.held = held


class NotALockFile(Exception):
    """Something other than a regular file (a link, a FIFO, a directory) sits at the lock's name."""

    def __init__(self, path: Path, what: str):
        super().__init__(f"{path} is {what}")
        self.path, self.what = path, what


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold the lock at `path` for the block (created if absent, removed on release).

    Raises LockHeld when another process holds it, NotALockFile when `path` is not a regular file, and
    OSError when it cannot be created (a full or read-only file system).
    """
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotALockFile(path, "a symbolic link") from None
            if exc.errno == errno.EISDIR:
                raise NotALockFile(path, "a directory") from None
            raise
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise NotALockFile(path, "not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LockHeld(Held(path, _pid_in(fd))) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # the holder before us may have removed the file after we opened it: lock the one at `path`
            same = os.lstat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass  # the pid is only for a refusal's message
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _pid_in(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None
