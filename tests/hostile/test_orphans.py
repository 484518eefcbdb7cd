"""A target whose factory starts processes leaves nothing running after the compare or the sweep: each
worker's session is killed once the worker ended, and what the compare itself started, or what was
double-forked out of a session (adopted: the compare is the subreaper), is stopped when it ends."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.subprocess

FACTORY = """
import os, subprocess, sys
import numpy as np
from multiexport import Target

MARK = {mark!r}


def build():
    # a plain child, left running (in this process's session), and a daemon: setsid, fork, the parent exits
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARK + "-child"])
    subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); os.fork() and os._exit(0); "
                      "time.sleep(600)", MARK + "-daemon"])
    return Target(lambda x: x * 2, args=(np.ones((2, 3), np.float32),))
"""


def _running(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if mark.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.fixture
def target(tmp_path):
    mark = f"multiexport-orphan-{uuid.uuid4().hex[:12]}"
    (tmp_path / "spawner.py").write_text(FACTORY.format(mark=mark))
    yield mark
    for pid in _running(mark):  # the test's own cleanup when the code under test left them
        os.kill(pid, signal.SIGKILL)


def test_a_compare_leaves_no_process_its_target_started(tmp_path, target):
    proc = run_cli("compare", tmp_path / "spawner.py:build", "--backends", "xla", "--no-bench", "--trials", "1",
                   "--out-dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _running(target) == []


def test_a_sweep_leaves_no_process_its_targets_started(tmp_path, target):
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\nargs = ["--no-bench", "--trials", "1"]\n'
                    '[[target]]\ntarget = "spawner.py:build"\nname = "spawner"\n')
    proc = run_cli("sweep", spec, "--out-dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _running(target) == []
