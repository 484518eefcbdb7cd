"""What a target started is stopped with the command that built it: no process is left behind (parent 1).

A target's factory may start a process (a tokenizer server, a data loader, a stray `sleep`) and never stop
it. Every worker's leftovers go with its session (`process.run_command` kills the session once the worker
ended); what this process itself started (the compare builds the target too) and what was double-forked out
of a session (adopted here: this process is the children's subreaper) is stopped by `stop_leftovers` when
the command ends. Linux only; elsewhere both are no-ops.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Iterator

from .descendants import children_of

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class Adopted:
    """What `adopt_orphans` found, for `stop_leftovers` to leave as it was.

    spared: the children this process had already (not the command's to stop: a test's fixtures when the
    CLI runs in-process). was_subreaper: whether it was a subreaper before (else it stops being one after).
    """

    spared: frozenset[int] = frozenset()
    was_subreaper: bool = True


def adopt_orphans() -> Adopted:
    """Make this process the subreaper of its descendants: one whose parent ends (a double fork, a daemon)
    becomes this process's child instead of init's, so `stop_leftovers` can stop it."""
    if not sys.platform.startswith("linux"):
        return Adopted()
    import ctypes

    try:
        libc, flag = ctypes.CDLL(None), ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        return Adopted()
    return Adopted(frozenset(children()), bool(flag.value))


def children() -> list[int]:
    """The process ids of this process's living children (every thread's), from /proc."""
    return children_of(os.getpid())


def stop_leftovers(adopted: Adopted = Adopted(), wait_s: float = 2.0) -> list[int]:
    """Kill every child this process still has but `adopted.spared` (and, for one that leads a process
    group, the group) and reap them, then stop being a subreaper if it was not one before; returns their
    ids. Call when the command's own children have all been reaped: whatever is left was started by the
    target, or adopted."""
    if not sys.platform.startswith("linux"):
        return []
    spared = adopted.spared
    stopped = []
    for _ in range(8):  # a child killed may hand its own children to us (subreaper): take those too
        pids = [pid for pid in children() if pid not in spared]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
        _reap(pids, wait_s)
    if not adopted.was_subreaper:  # in-process callers (tests) get their process back as it was
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    return stopped


def _reap(pids: list[int], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    left = set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                left.discard(pid)
        if left:
            time.sleep(0.01)


@contextlib.contextmanager
def leaving_nothing_behind() -> Iterator[None]:
    """For a command's block: orphans adopted while it runs, every leftover child stopped when it ends."""
    spared = adopt_orphans()
    try:
        yield
    finally:
        stop_leftovers(spared)
