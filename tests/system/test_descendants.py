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
