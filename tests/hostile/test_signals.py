"""Signals to compare and its workers (issue 16, items 5, 7, 8), in the phases tests/run/test_signals.py does
not reach: the export phase, a SIGKILL sent from outside to a worker, and a SIGKILL to compare itself.

tests/run/test_signals.py covers SIGINT/SIGTERM/SIGHUP during a run worker (rows kept, worker reaped, temp
cleaned, exit 128+N) and ctrl-c during the reference phase (no stale results); tests/compare/test_compare.py
covers a worker that kills itself (`xla_killed` -> `killed`).
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time

import pytest

from ..fault_backends import ALL
from ..run.test_signals import _alive, _finish, _start

pytestmark = pytest.mark.subprocess


def _wait_file(path, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def hanging_export_target(sandbox):
    """A target that hangs when imported by a worker (the export worker), writing its pid first."""
    path = sandbox.root / "xhang.py"
    path.write_text(textwrap.dedent("""
        import os, time
        from multiexport.examples import seed
        if os.environ.setdefault("HOSTILE_PARENT", str(os.getpid())) != str(os.getpid()):
            with open(os.environ["HOSTILE_PID_FILE"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(3600)
        target = seed
    """))
    return path


def test_sigterm_during_an_export_worker_stops_it_writes_results_and_cleans_up(sandbox, hanging_export_target):
    pid_file = sandbox.root.parent / "worker.pid"
    out = sandbox.root / "o"
    proc = _start(["compare", f"{hanging_export_target}:target", "--backends", "xla", "--no-bench", "--out-dir", out],
                  {"TMPDIR": str(sandbox.tmp), "HOSTILE_PID_FILE": str(pid_file)})
    worker = _wait_file(pid_file)
    proc.send_signal(signal.SIGTERM)
    _, err = _finish(proc)
    try:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err
        assert not _alive(worker), "the export worker was orphaned"
        data = json.loads((out / "results.json").read_text())
        assert data["interrupted"] is True and data["backends"]["xla"]["status"] == "interrupted"
    finally:
        _kill(worker)
    assert not sandbox.tmp_left(), sandbox.tmp_left()


def test_a_worker_killed_from_outside_with_sigkill_is_killed_not_out_of_memory(sandbox):
    target = sandbox.root / "with_hang.py"
    target.write_text(textwrap.dedent(f"""
        from multiexport.exporting.registry import register
        from multiexport.examples import seed
        register("xla_hang", {ALL['xla_hang']!r})
        target = seed
    """))
    pid_file = sandbox.root.parent / "worker.pid"
    out = sandbox.root / "o"
    proc = _start(["compare", f"{target}:target", "--backends", "xla_hang", "--no-bench", "--out-dir", out],
                  {"TMPDIR": str(sandbox.tmp), "MULTIEXPORT_TEST_PID_FILE": str(pid_file)})
    worker = _wait_file(pid_file)
    os.kill(worker, signal.SIGKILL)
    _, err = _finish(proc)
    assert proc.returncode == 3, err
    row = json.loads((out / "results.json").read_text())["backends"]["xla_hang"]
    oom = row["status"] == "out-of-memory"
    assert row["status"] == "killed" or (oom and "out-of-memory killer" in row["reason"]), row
    assert "SIGKILL" in row["reason"]
    assert not sandbox.tmp_left()


def _sigkill_compare_during_an_export(sandbox, out, keep=()) -> None:
    """compare into `out` with an export that hangs; SIGKILL compare; its worker dies with it (the kernel's
    PR_SET_PDEATHSIG), and the next command removes the temporaries (everything in TMPDIR but `keep`)."""
    target = sandbox.root / "with_hang.py"
    target.write_text(textwrap.dedent(f"""
        from multiexport.exporting.registry import register
        from multiexport.examples import seed
        register("xla_hang", {ALL['xla_hang']!r})
        target = seed
    """))
    pid_file = sandbox.root.parent / "worker.pid"
    proc = _start(["compare", f"{target}:target", "--backends", "xla_hang", "--no-bench", "--out-dir", out],
                  {"TMPDIR": str(sandbox.tmp), "MULTIEXPORT_TEST_PID_FILE": str(pid_file)})
    worker = _wait_file(pid_file)
    proc.kill()
    _finish(proc)
    try:
        deadline = time.monotonic() + 5
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived the compare that started it"
        assert sandbox.cli("backends").returncode == 0  # any later command: it removes what the killed run left
        assert sandbox.tmp_left() == sorted(keep), f"the killed run's temporaries are left: {sandbox.tmp_left()}"
    finally:
        _kill(worker)


def test_a_sigkill_to_compare_does_not_leave_its_worker_running(sandbox):
    _sigkill_compare_during_an_export(sandbox, sandbox.root / "o")


def test_a_killed_runs_temporaries_are_removed_and_never_the_users_output_directory(sandbox):
    """`--out $TMPDIR/multiexport-mine` puts the export worker's argument ($TMPDIR/multiexport-mine/xla_hang)
    exactly where a temporary's would be; the orphaned worker removed the whole directory, with the
    user's file and the earlier run's results in it. Now only directories multiexport marked are removed."""
    out = sandbox.tmp / "multiexport-mine"
    out.mkdir(parents=True)
    (out / ".multiexport-run").write_text('{"state": "done"}\n')  # an earlier compare's output, which it may reuse
    (out / "notes.txt").write_text("the user's own words\n")
    _sigkill_compare_during_an_export(sandbox, out, keep=["multiexport-mine"])
    assert (out / "notes.txt").read_text() == "the user's own words\n"
