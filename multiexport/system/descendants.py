"""The peak resident memory of the processes this one starts, sampled while they run.

An export can start processes of its own (LiteRT's prepare child, iree-compile): their memory is the
export's too, and it is what an out-of-memory killer sees on a machine sized for the weights. The kernel's
figure for waited-for children (getrusage's ru_maxrss) also counts the pages a fork copied from the parent
before its exec (a 4 GiB export worker's child would read 4 GiB), so each live descendant's own VmHWM (the
high-water mark of its own address space) is read every SAMPLE_S instead, once it has exec'd; a child that
measures itself (its VmHWM as it exits) reports that with `report_child_peak`, which sampling alone could miss
for a child living less than SAMPLE_S.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

SAMPLE_S = 0.1
_open: list["DescendantPeak"] = []  # the samplers open in this process: what report_child_peak tells


def report_child_peak(peak_bytes: int | None) -> None:
    """A child process's own peak resident size as it measured it (its VmHWM at its end), for every
    DescendantPeak open in this process (none open: nothing to do)."""
    for sampler in list(_open):
        sampler.add(peak_bytes)


class DescendantPeak:
    """While open, a thread samples every descendant this process started meanwhile (one already running when
    it opened, such as a server a caller keeps, is not the work watched): `peak_bytes` is the largest VmHWM one
    reached (None when none ran, or where /proc cannot say). A descendant that lives less than `interval` may
    be missed, and one is read at most `interval` before it exits: a lower bound, exact for a child whose
    peak lasts longer than that (a converter's child loading the weights does). A sample reads /proc once:
    ~1.3 ms of CPU with 120 processes on this machine, ~1% of the export it watches."""

    def __init__(self, interval: float = SAMPLE_S) -> None:
        self.interval = interval
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own_cmdline = _read(Path("/proc/self/cmdline"))
        self._before: set[tuple[int, int]] = set()

    def add(self, peak_bytes: int | None) -> None:
        """Count one descendant's peak, however it was measured."""
        if peak_bytes is not None and peak_bytes > 0 and (self.peak_bytes is None or peak_bytes > self.peak_bytes):
            self.peak_bytes = peak_bytes

    def __enter__(self) -> "DescendantPeak":
        _open.append(self)
        self._before = set(descendants(os.getpid()))
        if Path("/proc/self/status").is_file():
            self._thread = threading.Thread(target=self._run, name="multiexport-descendant-peak", daemon=True)
            self._thread.start()
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
        for pid, started in descendants(os.getpid()):
            if (pid, started) in self._before:
                continue  # running before this opened
            if _read(Path(f"/proc/{pid}/cmdline")) == self._own_cmdline:
                continue  # forked, not yet exec'd: its pages are still this process's copy
            self.add(vm_hwm(pid))


def descendants(root: int) -> list[tuple[int, int]]:
    """The live processes below `root` (children, theirs, ...) as (pid, start time in clock ticks since boot: a
    reused pid is another process), from /proc's parent ids; [] without /proc."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        stat = _read(Path(f"/proc/{entry}/stat"))
        if stat is None:
            continue  # exited meanwhile
        # the fields after the command name, which is in parentheses and may hold anything
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 19 and fields[1].isdigit() and fields[19].isdigit():  # ppid; starttime (stat's 22nd)
            children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    found: list[tuple[int, int]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def vm_hwm(pid: int) -> int | None:
    """The process's peak resident size in bytes (VmHWM), None if it is gone or has no address space."""
    return status_bytes(pid, "VmHWM")


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
