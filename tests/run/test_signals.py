"""Signals to a running compare: nothing orphaned, nothing stale, finished rows kept, exit 128+signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ..conftest import REPO
from ..fault_backends import ALL

pytestmark = pytest.mark.subprocess


def _start(args, env=None, cwd=REPO):
    # As from a terminal: a runner started in the background (`cmd &`) has SIGINT ignored, and one started
    # under nohup SIGHUP; children inherit that, and multiexport rightly leaves an ignored signal ignored.
    # The compare under test starts with both at their defaults. (preexec_fn would fork a JAX process.)
    ignored = [s for s in (signal.SIGINT, signal.SIGHUP) if signal.getsignal(s) == signal.SIG_IGN]
    for s in ignored:
        signal.signal(s, signal.SIG_DFL)
    try:
        return subprocess.Popen([sys.executable, "-m", "multiexport", *map(str, args)], cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **(env or {})})
    finally:
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)


def _wait_for(proc, text: str) -> None:
    for line in proc.stderr:
        if text in line:
            return
    raise AssertionError(f"compare ended before printing {text!r}")


def _finish(proc, timeout=90):
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # stop it here, so a failure here does not leak into later tests
        proc.kill()
        proc.communicate()
        raise


def _hang_target(tmp_path):
    path = tmp_path / "with_hang.py"
    path.write_text(textwrap.dedent(f"""
        from multiexport.exporting.registry import register
        from multiexport.examples import seed
        register("xla_hang", {ALL['xla_hang']!r})
        target = seed
    """))
    return f"{path}:target"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_the_worker_keeps_finished_rows_and_cleans_up(tmp_path, signum):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pid_file = tmp_path / "worker.pid"
    proc = _start(["compare", _hang_target(tmp_path), "--backends", "xla,xla_hang", "--out-dir", tmp_path / "o",
                   "--no-bench"], env={"TMPDIR": str(tmp), "MULTIEXPORT_TEST_PID_FILE": str(pid_file)})
    _wait_for(proc, "xla_hang: run")
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signum)
    _, err = _finish(proc)
    assert proc.returncode == 128 + signum, err
    assert "finished results (if any) were written" in err and "Traceback" not in err
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert data["interrupted"] is True and data["state"] == "interrupted"
    assert data["backends"]["xla"]["status"] == "ok"
    assert data["backends"]["xla_hang"]["status"] == "interrupted"
    assert (tmp_path / "o" / "report.md").is_file()
    assert not list((tmp_path / "o").glob(".*tmp"))  # nothing half-written
    assert not _alive(int(pid_file.read_text())), "the worker was orphaned"
    assert not [p for p in tmp.iterdir() if p.name.startswith("multiexport-")], list(tmp.iterdir())


def test_ctrl_c_before_any_backend_leaves_no_stale_results_of_an_earlier_run(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / ".multiexport-run").write_text("{}")
    (out / "results.json").write_text(json.dumps({"schema": "multiexport.results/2", "target": "old"}))
    (out / "report.md").write_text("# an earlier run")
    slow = tmp_path / "slow.py"
    slow.write_text(textwrap.dedent("""
        import sys, time
        import jax, jax.numpy as jnp, numpy as np
        from multiexport import Target

        def slow(x):
            y = jax.pure_callback(lambda v: (time.sleep(60), v)[1], jax.ShapeDtypeStruct(x.shape, x.dtype), x)
            return y + 1

        target = Target(slow, args=(np.ones(3, np.float32),), name="slow")
    """))
    proc = _start(["compare", f"{slow}:target", "--backends", "xla", "--out-dir", out, "--no-bench"])
    _wait_for(proc, "reference outputs")
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, err = _finish(proc)
    assert proc.returncode == 130, err
    assert not (out / "report.md").exists() or "an earlier run" not in (out / "report.md").read_text()
    if (out / "results.json").exists():  # what was written is this run's, and says it did not finish
        data = json.loads((out / "results.json").read_text())
        assert data["target"] == "slow" and data["interrupted"] is True
        assert data["backends"]["xla"]["status"] == "interrupted"
