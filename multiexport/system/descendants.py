"""The peak resident memory of the processes this one starts, sampled while they run.

An export can start processes of its own (LiteRT's prepare child, iree-compile): their memory is the
export's too, and it is what an out-of-memory killer sees on a machine sized for the weights. The kernel's
figure for waited-for children (getrusage's ru_maxrss) also counts the pages a fork copied from the parent
before its exec (a 4 GiB export worker's child would read 4 GiB), so every SAMPLE_S the live descendants are
read from /proc instead: the sum of what they hold at once (each one's Pss, its share of the pages it maps, so a
file two children map counts once; a child forked but not exec'd counts only the pages it owns alone, Private_*
of smaps_rollup, not the ones still shared with this process), and each one's own high-water mark (VmHWM)
between two samples. A child that measures itself (its VmHWM as it exits) reports
that with `report_child_peak`, which sampling alone could miss for a child living less than SAMPLE_S.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import threading
from pathlib import Path

from ..errors import InternalError

SAMPLE_S = 0.1
_open: list["DescendantPeak"] = []  # the samplers open in this process: what report_child_peak tells


def report_child_peak(peak_bytes: int | None) -> None:
    """A child process's own peak resident size in bytes as it measured it (its VmHWM at its end), for every
    DescendantPeak open in this process (none open: nothing to do). InternalError (the calling backend's bug)
    for anything but a whole number of bytes or None: a figure results.json could not hold must never reach it."""
    if peak_bytes is not None and (isinstance(peak_bytes, bool) or not isinstance(peak_bytes, numbers.Integral)):
        raise InternalError(f"report_child_peak | got {type(peak_bytes).__name__} {peak_bytes!r}, expected an int "
                            "of bytes or None")
    for sampler in list(_open):
        sampler.add(None if peak_bytes is None else int(peak_bytes))


class DescendantPeak:
    """While open, a thread samples every descendant this process started meanwhile (one already running when
    it opened, such as a server a caller keeps, is not the work watched, nor is anything it starts):
    `peak_bytes` is the most they held at once, or one of them alone at its own peak (None when none ran,
    or where /proc cannot say). A sample reads only this process's subtree (/proc/PID/task/*/children). A
    descendant that lives less than `interval` may be missed, and one is read at most `interval` before it
    exits: a lower bound, exact for a child whose peak lasts longer than that (a converter's child loading the
    weights does). A process that leaves the tree (a double fork, reparented to init) is no longer seen. Where
    no thread can start, it measures nothing and the work runs all the same."""

    def __init__(self, interval: float = SAMPLE_S) -> None:
        self.interval = interval
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own_cmdline = _read(Path("/proc/self/cmdline"))
        self._before: frozenset[tuple[int, int]] = frozenset()
        self._forked: set[tuple[int, int]] = set()  # seen forked and not exec'd at the last sample
        self._lock = threading.Lock()

    def add(self, peak_bytes: int | None) -> None:
        """Count one figure of bytes held, however it was measured (None or 0: nothing)."""
        if peak_bytes is None or peak_bytes <= 0:
            return
        with self._lock:
            if self.peak_bytes is None or peak_bytes > self.peak_bytes:
                self.peak_bytes = int(peak_bytes)

    def __enter__(self) -> "DescendantPeak":
        _open.append(self)
        self._before = frozenset(descendants(os.getpid()))
        if Path("/proc/self/status").is_file():
            thread = threading.Thread(target=self._run, name="multiexport-descendant-peak", daemon=True)
            try:
                thread.start()
                self._thread = thread
            except RuntimeError:  # no thread to be had (a thread or memory limit): the work is not the sampler's
                self._thread = None
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self in _open:
            _open.remove(self)

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval):
                return

    def _sample(self) -> None:
        held, forked = 0, set()
        for pid, started in descendants(os.getpid(), skip=self._before):
            if _read(Path(f"/proc/{pid}/cmdline")) == self._own_cmdline:
                # Forked, not (yet) exec'd. Counted from its second sample on, by the pages it alone maps: a
                # vfork'd child on its way to exec (subprocess's) shares this process's whole address space,
                # all of it "private" to the one mm, for the instant before its exec.
                forked.add((pid, started))
                if (pid, started) in self._forked:
                    held += private_bytes(pid) or 0
                continue
            # its share of what it maps (Pss: a page two children map counts half in each, so the sum is what
            # they hold together); its VmRSS where the system cannot say
            held += rollup_bytes(pid, (b"Pss:",)) or status_bytes(pid, "VmRSS") or 0
            self.add(vm_hwm(pid))  # its own peak, which may have come between two samples
        self._forked = forked
        self.add(held)


def descendants(root: int, skip: frozenset[tuple[int, int]] | set[tuple[int, int]] = frozenset()
                ) -> list[tuple[int, int]]:
    """The live processes below `root` (children, theirs, ...) as (pid, start time in clock ticks since boot: a
    reused pid is another process), leaving out each one in `skip` and everything below it; [] without /proc.
    Walks /proc/PID/task/*/children from `root` down (what it reads grows with the subtree, not with the
    machine's process count), or every /proc/*/stat on a kernel without that file."""
    found: list[tuple[int, int]] = []
    todo = [root]
    by_parent = None if _has_children_files(root) else _children_by_parent()
    while todo:
        parent = todo.pop()
        kids = by_parent.get(parent, []) if by_parent is not None else _children_of(parent)
        for pid in kids:
            started = _start_time(pid)
            if started is None or (pid, started) in skip:
                continue  # exited meanwhile, or there before: neither it nor what it started is ours
            found.append((pid, started))
            todo.append(pid)
    return found


def children_of(pid: int) -> list[int]:
    """`pid`'s living children, every thread's: /proc/PID/task/*/children, or every /proc/*/stat on a kernel
    without that file."""
    if _has_children_files(pid):
        return _children_of(pid)
    return sorted(_children_by_parent().get(pid, []))


def _has_children_files(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        task = os.listdir(f"/proc/{pid}/task")[0]
        return os.path.exists(f"/proc/{pid}/task/{task}/children")
    return False


def _children_of(pid: int) -> list[int]:
    """`pid`'s children, every thread's (a child belongs to the thread that started it)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            text = _read(Path(f"/proc/{pid}/task/{task}/children"))
            found.update(int(p) for p in (text or b"").split() if p.isdigit())
    return sorted(found)


def _children_by_parent() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from every /proc/*/stat."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _stat_fields(int(entry))
                if fields is not None and fields[1].isdigit():
                    children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 and fields[19].isdigit() else None


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (in parentheses, which may hold anything): state, ppid,
    ... (starttime is stat's 22nd field, [19] here); None when the process is gone."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    return None if stat is None else stat[stat.rfind(b")") + 2:].split()


def vm_hwm(pid: int) -> int | None:
    """The process's peak resident size in bytes (VmHWM), None if it is gone or has no address space."""
    return status_bytes(pid, "VmHWM")


def private_bytes(pid: int) -> int | None:
    """The resident bytes only `pid` maps (smaps_rollup's Private_Clean + Private_Dirty): for a forked child, what
    it wrote or allocated since the fork, not the parent's pages it still shares. None when it cannot say."""
    return rollup_bytes(pid, (b"Private_Clean:", b"Private_Dirty:"))


def rollup_bytes(pid: int, keys: tuple[bytes, ...]) -> int | None:
    """The sum of /proc/PID/smaps_rollup's `keys` fields in bytes; None when the process is gone or the system
    has no smaps_rollup."""
    rollup = _read(Path(f"/proc/{pid}/smaps_rollup"))
    if rollup is None:
        return None
    total = 0
    for line in rollup.splitlines():
        if line.startswith(keys):
            with contextlib.suppress(ValueError, IndexError):
                total += int(line.split()[1]) * 1024
    return total


def status_bytes(pid: int, key: str) -> int | None:
    """A size field of /proc/PID/status (VmRSS, VmHWM, ...) in bytes; None when the process is gone, has no
    such field (no address space) or the system cannot say."""
    status = _read(Path(f"/proc/{pid}/status"))
    prefix = key.encode() + b":"
    for line in (status or b"").splitlines():
        if line.startswith(prefix):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return None
    return None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
