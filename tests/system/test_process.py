"""The one subprocess supervisor: timeouts, kills that reach a child's children, signals, CPU time."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from multiexport.run.workers import classify
from multiexport.system.oom import oom_kill_count
from multiexport.system.process import run_command


def test_output_exit_code_and_the_childs_own_cpu_time(tmp_path):
    out = run_command([sys.executable, "-c", "import sys; s=sum(range(3_000_000)); print('hi'); "
                                             "print('err', file=sys.stderr); sys.exit(4)"], timeout=60)
    assert out.returncode == 4 and out.stdout.strip() == "hi" and out.stderr.strip() == "err"
    assert out.cpu_seconds is not None and 0 < out.cpu_seconds < out.seconds + 1


def test_a_timeout_kills_the_child_and_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    t0 = time.monotonic()
    out = run_command([sys.executable, "-c", code], timeout=3)
    assert out.timed_out and time.monotonic() - t0 < 30
    deadline = time.monotonic() + 10
    while _alive(int(pid_file.read_text())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(pid_file.read_text())), "the grandchild outlived the kill"


def test_a_program_that_cannot_start_is_reported_not_raised():
    out = run_command(["/nonexistent/program"], timeout=5)
    assert out.returncode is None and "FileNotFoundError" in out.start_error


def test_a_sigkill_without_oom_evidence_is_killed_and_a_segfault_crashed(tmp_path):
    killed = run_command([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout=30)
    category, reason = classify(killed, tmp_path, 30)
    assert category == ("out-of-memory" if killed.oom_kills else "killed") and "SIGKILL" in reason
    crashed = run_command([sys.executable, "-c", "import ctypes; ctypes.string_at(0)"], timeout=30)
    assert classify(crashed, tmp_path, 30)[0] == "crashed" and "SIGSEGV" in classify(crashed, tmp_path, 30)[1]
    count = oom_kill_count()
    assert count is None or count >= 0


# The two tests below send signals to their own process. They run in a fresh interpreter: in the pytest process,
# after OpenVINO has run in-process (tests/backends/test_openvino.py), a self-sent SIGINT during run_command ended
# pytest with SIGSEGV (reproduced twice in the full suite and with those two files alone; not reproduced in a
# minimal script). The CLI never loads a runtime in its supervising process; multiexport.compare() called from
# Python with no target spec exports in the caller's process, where the same may happen (an open question).
DESTRUCTOR = """
import os, signal, sys
from multiexport import Interrupted
from multiexport.system.process import run_command, stop_on_signals
swallowed = []
sys.unraisablehook = lambda info: swallowed.append(info.exc_type)

class InterruptedWhileCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))  # Python code, where the handler runs and raises

pid_file = sys.argv[1]
worker = [sys.executable, "-c", f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background runner starts with SIGINT ignored
with stop_on_signals():
    InterruptedWhileCollected()  # collected at once: the signal arrives inside __del__
    try:
        run_command(worker, timeout=60)
        print("not interrupted")
    except Interrupted as exc:
        print("interrupted", exc.exit_code, [t.__name__ for t in swallowed])
"""


def _python(code: str, *args: str) -> str:
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_a_ctrl_c_swallowed_by_a_destructor_still_stops_the_wait(tmp_path):
    """CI once hung here: the KeyboardInterrupt landed in a ZipFile.__del__, was printed and dropped."""
    pid_file = tmp_path / "pid"
    assert _python(DESTRUCTOR, str(pid_file)) == "interrupted 130 ['Interrupted']"  # the fault was real
    assert not pid_file.exists() or not _alive(int(pid_file.read_text()))


SIGNALS = """
import os, signal, sys, time
from multiexport import Interrupted
from multiexport.system.process import raise_if_stopped, stop_on_signals
signum = int(sys.argv[1])
signal.signal(signum, signal.SIG_DFL)  # started under nohup, SIGHUP is ignored, and stays ignored by design
with stop_on_signals():
    try:
        os.kill(os.getpid(), signum)
        time.sleep(5)
        print("not interrupted")
    except Interrupted as exc:
        code = exc.exit_code
    try:
        raise_if_stopped()  # remembered for waits that a destructor's swallowing would fool
        print("not remembered")
    except Interrupted:
        pass
raise_if_stopped()  # cleared once the block ends
print("stopped", code)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_like_ctrl_c(signum):
    assert _python(SIGNALS, str(int(signum))) == f"stopped {128 + signum}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_a_pending_child_runs_before_its_input_then_to_completion_with_it(tmp_path):
    """`Pending`: the child starts at once (it writes a file before reading anything), then gets its one line
    and ends as `run_command`'s children do; its timeout counts from `finish`."""
    from multiexport.system.piped import Pending

    started = tmp_path / "started"
    code = (f"import sys; open({str(started)!r}, 'w').write('yes'); line = sys.stdin.readline(); "
            "print('got', line.strip()); sys.exit(3)")
    pending = Pending([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.read_text() == "yes"  # before any input was given
    out = pending.finish('["a", "b"]', timeout=60)
    assert out.returncode == 3 and out.stdout.strip() == 'got ["a", "b"]' and out.cpu_seconds is not None


def test_a_pending_child_past_its_timeout_is_killed_and_one_cancelled_is_gone(tmp_path):
    from multiexport.system.piped import Pending

    pid_file = tmp_path / "pid"
    sleeper = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)")
    out = Pending([sys.executable, "-c", sleeper]).finish("ignored", timeout=3)
    assert out.timed_out and not _alive(int(pid_file.read_text()))
    pid_file.unlink()
    pending = Pending([sys.executable, "-c", sleeper])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pending.cancel()
    assert not _alive(int(pid_file.read_text()))
    missing = Pending(["/nonexistent/program"])
    assert "FileNotFoundError" in missing.finish("x", timeout=5).start_error
