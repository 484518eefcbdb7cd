"""The export's children's memory: each live descendant's own peak (VmHWM), sampled while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from multiexport.system.descendants import DescendantPeak, descendants, report_child_peak, vm_hwm

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# holds `MiB` of touched memory for a while: long enough to be sampled more than once
HOLD = "import time; b = bytearray({} << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.6)"


def _run(*argv: str) -> None:
    subprocess.run([sys.executable, *argv], check=True, timeout=120)


def test_a_child_holding_300_mib_is_read_at_its_own_peak_not_this_processes():
    # this test process holds hundreds of MiB: a figure that counted the fork's copy (wait4's ru_maxrss) would
    # give the 1 MiB child about this process's size
    with DescendantPeak() as small:
        _run("-c", HOLD.format(1))
    with DescendantPeak() as big:
        _run("-c", HOLD.format(300))
    assert small.peak_bytes is not None and big.peak_bytes is not None
    assert big.peak_bytes - small.peak_bytes > 250 << 20
    assert small.peak_bytes < 200 << 20


def test_a_grandchild_counts_and_nothing_started_is_none():
    with DescendantPeak() as nested:
        _run("-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOLD.format(300)!r}], check=True)")
    assert nested.peak_bytes is not None and nested.peak_bytes > 290 << 20
    with DescendantPeak() as idle:
        pass
    assert idle.peak_bytes is None


def test_a_child_running_before_it_opened_is_not_counted():
    """Only what starts while it is open is the work watched: a process the caller already keeps (a server, a
    test fixture's) is not, however large."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(300).replace("0.6", "30")])
    try:
        deadline = time.monotonic() + 60
        while (vm_hwm(proc.pid) or 0) < 300 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)  # until it holds its 300 MiB
        assert (vm_hwm(proc.pid) or 0) >= 300 << 20  # else the check below would prove nothing
        with DescendantPeak() as watched:
            _run("-c", HOLD.format(1))
        assert watched.peak_bytes is not None and watched.peak_bytes < 200 << 20
    finally:
        proc.kill()
        proc.wait()


def test_descendants_and_vm_hwm_read_a_live_child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert proc.pid in [pid for pid, _ in descendants(os.getpid())]
        assert vm_hwm(proc.pid) is not None and vm_hwm(proc.pid) > 0
    finally:
        proc.kill()
        proc.wait()
    assert vm_hwm(proc.pid) is None  # reaped: gone


def test_a_childs_own_report_counts_in_every_open_sampler_and_only_there():
    with DescendantPeak() as outer:
        with DescendantPeak() as inner:
            report_child_peak(5 << 30)  # as a child that measured itself at 5 GiB says it
        report_child_peak(None)  # a child that could not say changes nothing
    report_child_peak(7 << 30)  # none open: nothing keeps it
    assert inner.peak_bytes == 5 << 30 and outer.peak_bytes == 5 << 30


def test_a_float_or_bool_peak_is_the_calling_backends_bug_and_an_integer_of_any_kind_counts():
    """A figure results.json cannot hold must never reach it: a float made the export's reply undecodable, and a
    working export read as a worker that died early."""
    import numpy as np

    from multiexport.errors import InternalError

    with DescendantPeak() as watched:
        for bad in (1.5e9, True, "300"):
            with pytest.raises(InternalError, match=r"report_child_peak \| got (float|bool|str) .*expected an int"):
                report_child_peak(bad)  # type: ignore[arg-type]
        report_child_peak(np.int64(3 << 30))
    assert watched.peak_bytes == 3 << 30 and type(watched.peak_bytes) is int


def test_what_a_process_running_before_it_opened_starts_is_not_counted_either():
    """A kept server that starts a 300 MiB process of its own while the sampler is open: not the work watched."""
    go = f"/tmp/multiexport-test-go-{os.getpid()}"
    server = ("import os, subprocess, sys, time\n"
              f"while not os.path.exists({go!r}): time.sleep(0.02)\n"
              f"subprocess.run([sys.executable, '-c', {HOLD.format(300)!r}], check=True)\n"
              "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", server])
    try:
        time.sleep(0.3)
        with DescendantPeak() as watched:
            open(go, "w").close()
            time.sleep(2.5)  # the server's child starts, holds 300 MiB for 0.6 s, ends
            _run("-c", HOLD.format(1))
        assert watched.peak_bytes is not None and watched.peak_bytes < 200 << 20
    finally:
        proc.kill()
        proc.wait()
        os.unlink(go)


def test_children_holding_memory_at_once_count_together():
    """Three children of 150 MiB alive at the same time: an out-of-memory killer sees 450 MiB, not 150."""
    three = ("import subprocess, sys\n"
             f"ps = [subprocess.Popen([sys.executable, '-c', {HOLD.format(150).replace('0.6', '1.5')!r}]) "
             "for _ in range(3)]\n"
             "assert all(p.wait() == 0 for p in ps)\n")
    with DescendantPeak() as watched:
        _run("-c", three)
    assert watched.peak_bytes is not None and watched.peak_bytes > 400 << 20


def test_a_forked_child_counts_what_it_allocates_not_the_pages_it_shares():
    """A child forked without exec shares the parent's pages: it counts what it owns alone (300 MiB here), not the
    parent's 400 MiB it still shares, and not nothing (it was skipped altogether)."""
    script = ("import os, time, sys\n"
              "from multiexport.system.descendants import DescendantPeak\n"
              "ballast = bytearray(400 << 20); ballast[::4096] = b'x' * len(ballast[::4096])\n"
              "with DescendantPeak() as watched:\n"
              "    pid = os.fork()\n"
              "    if pid == 0:\n"
              "        b = bytearray({mib} << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.8); os._exit(0)\n"
              "    os.waitpid(pid, 0)\n"
              "print(watched.peak_bytes)\n")
    figures = {}
    for mib in (1, 300):
        out = subprocess.run([sys.executable, "-c", script.replace("{mib}", str(mib))], check=True, timeout=120,
                             capture_output=True, text=True).stdout.split()
        figures[mib] = int(out[-1]) if out[-1] != "None" else 0
    assert figures[300] > 280 << 20 and figures[300] < 380 << 20, figures
    assert figures[1] < 100 << 20, figures  # not the parent's 400 MiB


def test_no_thread_to_be_had_measures_nothing_and_the_work_runs(monkeypatch):
    import threading

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    ran = []
    with DescendantPeak() as watched:
        ran.append(True)
    assert ran == [True] and watched.peak_bytes is None
    from multiexport.system import descendants as module

    assert watched not in module._open


def test_a_file_children_map_together_counts_once(tmp_path):
    """Three children mapping the same 200 MiB file hold ~200 MiB together, not 600 (each one's VmRSS counts the
    shared pages again: the figure is the sum of their shares, Pss)."""
    path = tmp_path / "shared.bin"
    with open(path, "wb") as fh:
        fh.truncate(200 << 20)
    reader = ("import mmap, time\n"
              f"f = open({str(path)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
              "s = sum(m[i] for i in range(0, len(m), 4096)); time.sleep(1.5)\n")
    three = ("import subprocess, sys\n"
             f"ps = [subprocess.Popen([sys.executable, '-c', {reader!r}]) for _ in range(3)]\n"
             "assert all(p.wait() == 0 for p in ps)\n")
    with DescendantPeak() as watched:
        _run("-c", three)
    assert watched.peak_bytes is not None and 190 << 20 < watched.peak_bytes < 400 << 20, watched.peak_bytes >> 20
