"""benchmarks/llm.py's pieces that decide a row: a child stopped past its timeout says so, its peak RSS is its
own (wait4), and the latency interval brackets the median."""

from __future__ import annotations

import sys

from benchmarks import llm as driver


def test_a_child_past_its_timeout_is_stopped_with_the_reason(tmp_path):
    got = driver.child([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                       tmp_path / "log", timeout=2)
    assert got["rc"] != 0 and got["stopped"] == "stopped after 2 s" and got["seconds"] < 30
    assert "started" in got["stdout"]


def test_a_childs_peak_rss_is_its_own(tmp_path):
    # this test process is hundreds of MiB: a figure that counted the fork's copy of it (wait4's ru_maxrss)
    # would give both children about the same peak
    hold = "import time; b = bytearray({} << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1)"
    small = driver.child([sys.executable, "-c", hold.format(1)], tmp_path / "a", timeout=60)
    big = driver.child([sys.executable, "-c", hold.format(300)], tmp_path / "b", timeout=60)
    assert small["rc"] == 0 and big["rc"] == 0
    assert big["peak_rss_bytes"] - small["peak_rss_bytes"] > 250 << 20
    assert small["peak_rss_bytes"] < 200 << 20


def test_the_latency_interval_brackets_the_median():
    times = [5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.5, 2.5, 1.5, 4.5]
    got = driver._latency(times)
    assert got["n"] == 10 and got["ci_low_ms"] <= got["p50_ms"] <= got["ci_high_ms"]
    assert got["ci_high_ms"] < 100.0  # one outlier does not become the interval
