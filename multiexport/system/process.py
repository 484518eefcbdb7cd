"""The one subprocess supervisor: every process multiexport starts (workers, device probes, native tools,
the screenshot browser, paired-benchmark workers) is spawned, timed out, killed and reaped here.

- Each child runs in a session of its own, so a kill reaches what it started too (also once it ended:
  what a target's factory started goes with it), and a terminal's Ctrl-C reaches only multiexport.
- Each child dies with the thread that started it (PR_SET_PDEATHSIG, SIGKILL): not even a `kill -9` of
  multiexport leaves one running; what the killed processes made the next command removes (files.temporary).
- `stop_on_signals` turns SIGINT, SIGTERM and SIGHUP into `Interrupted` in the main thread, and waits
  poll a flag, since a signal's exception raised inside a destructor is printed and dropped by Python.
- Output goes to temporary files (no pipe can fill up and hang a child); each child's CPU time is its own.
- A child killed by SIGKILL is called out of memory only with evidence: the cgroup's `oom_kill` count.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from ..errors import Interrupted
from .oom import oom_kill_count

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_S = 0.25
_OUTPUT_LIMIT = 1 << 20
_stop: int | None = None
_active = False  # a stop_on_signals block is open


@dataclass(frozen=True)
class Outcome:
    """How one child process ended.

    returncode: its exit status (negative: killed by that signal), None if it never started.
    stdout, stderr: the last MiB of each.
    timed_out: it ran past its timeout and was killed.
    start_error: why it could not be started, if it could not.
    oom_kills: out-of-memory kills in this cgroup while it ran (None when the cgroup cannot say).
    seconds: wall time; cpu_seconds: the child's own user + system time (its children included).
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    start_error: str = ""
    oom_kills: int | None = None
    seconds: float = 0.0
    cpu_seconds: float | None = None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    def how_it_ended(self) -> str:
        if self.start_error:
            return f"could not start ({self.start_error})"
        if self.timed_out:
            return "ran past its timeout and was killed"
        if self.signal:
            return f"was killed by {_signal_name(self.signal)}"
        return f"exited {self.returncode}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def run_command(cmd: Sequence[str], *, timeout: float, cwd: str | os.PathLike | None = None,
                env: Mapping[str, str] | None = None) -> Outcome:
    """Run `cmd` to completion or `timeout`; a stop request (signal) kills it and raises Interrupted."""
    raise_if_stopped()
    before = oom_kill_count()
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = start_child(cmd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd)
        except OSError as exc:
            return Outcome(None, "", "", start_error=f"{type(exc).__name__}: {exc}")
        return reap(proc, out, err, start, before, start + timeout)


def start_child(cmd: Sequence[str], *, env: Mapping[str, str] | None, stdout, stderr, stdin,
                cwd: str | os.PathLike | None = None) -> subprocess.Popen:
    """Start `cmd` in a session of its own, dying with the calling thread (every child here starts so);
    OSError when it cannot start."""
    with _stop_signals_deferred():  # a signal between fork and Popen's return would orphan the child
        argv, child_env = _dying_with_parent(cmd, env)
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=stdin, cwd=cwd, env=child_env,
                                start_new_session=True)


def reap(proc: subprocess.Popen, out, err, start: float, oom_before: int | None, deadline: float) -> Outcome:
    """Wait for `proc` (started at monotonic `start`, its output in the files `out` and `err`) until `deadline`
    (killed past it, or on a stop request, which raises), kill what it left in its session, and say how it
    ended (`oom_before`: the cgroup's OOM kills when it started)."""
    timed_out, cpu = False, None
    try:
        code, cpu = _wait(proc, deadline)
        kill_child(proc)  # ended: what it started and left running in its session (a factory's child) goes too
    except TimeoutError:
        timed_out = True
        code = kill_child(proc)
    except BaseException:
        kill_child(proc)
        raise
    after = oom_kill_count()
    return Outcome(code, output_tail(out), output_tail(err), timed_out=timed_out,
                   oom_kills=None if oom_before is None or after is None else after - oom_before,
                   seconds=time.monotonic() - start, cpu_seconds=cpu)


PARENT_ENV = "MULTIEXPORT_PARENT_PID"  # a multiexport worker: die with this pid (run.worker does it first thing)
_WORKER_PREFIX = ("-m", "multiexport.run.worker")
# Any other program starts behind this stub: it asks the kernel to kill it when its parent (thread) ends,
# makes sure that parent is still there, and becomes the program (the death signal survives exec). The
# child cannot be set up between fork and exec instead (preexec_fn): that forks a multithreaded process
# (JAX warns of deadlocks, rightly), and the stub costs one bare interpreter start (~20 ms) per program.
_STUB = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0); "  # PR_SET_PDEATHSIG, SIGKILL
         "os.getppid() == int(sys.argv[1]) or os._exit(137); os.execv(sys.argv[2], sys.argv[2:])")


def _dying_with_parent(cmd: Sequence[str], env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str] | None]:
    """(argv, environment) that make the child die with this process, however it ends (even by SIGKILL,
    which no handler of ours can forward): a worker is told to, any other program starts behind `_STUB`."""
    cmd = [str(c) for c in cmd]
    if not sys.platform.startswith("linux"):
        return cmd, dict(env) if env is not None else None
    if _WORKER_PREFIX in (tuple(cmd[1:3]), tuple(cmd[2:4])):  # python [-P] -m multiexport.run.worker
        return cmd, {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}
    program = shutil.which(cmd[0], path=(os.environ if env is None else env).get("PATH", os.defpath))
    if program is None:  # not to be found: Popen says so as it always did (an Outcome's start_error)
        return cmd, dict(env) if env is not None else None
    return [sys.executable, "-I", "-S", "-c", _STUB, str(os.getpid()), program, *cmd[1:]], (
        dict(env) if env is not None else None)


def die_with_parent() -> None:
    """In a worker, first thing: be killed when the process that started it ends (PARENT_ENV), or end now
    if it already has. The kernel does it, so a worker busy in a C call that holds the GIL goes too."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGKILL)


def _wait(proc: subprocess.Popen, deadline: float) -> tuple[int, float | None]:
    """Wait for `proc` in slices (checking for a stop request), reap it, return (exit code, CPU seconds)."""
    fd = None
    try:
        fd = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else None
    except OSError:
        fd = None
    try:
        while True:
            raise_if_stopped()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if fd is not None:
                ready, _, _ = select.select([fd], [], [], min(POLL_S, remaining))
                if not ready:
                    continue
                pid, status, usage = os.wait4(proc.pid, 0)
            else:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid == 0:
                    time.sleep(min(0.02, remaining))
                    continue
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code  # reaped here: Popen must not wait for it again
            return code, usage.ru_utime + usage.ru_stime
    finally:
        if fd is not None:
            os.close(fd)


def kill_child(proc: subprocess.Popen) -> int:
    """Kill the child's whole session (its process group: the child leads it, so its id is not reused
    while a member lives) and reap the child; returns its exit code."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        try:
            _, status, _ = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            proc.returncode = -signal.SIGKILL
    return proc.returncode


def output_tail(fh) -> str:
    """The last MiB of a child's output file."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - _OUTPUT_LIMIT))
    return fh.read().decode(errors="replace")


# -- stopping on signals ---------------------------------------------------------------------------------

def raise_if_stopped() -> None:
    """Raise Interrupted if a stop signal arrived (even one whose exception a destructor swallowed)."""
    if _stop is not None:
        raise Interrupted(_stop)


def stop_requested() -> int | None:
    return _stop


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """For the block: SIGINT, SIGTERM and SIGHUP raise Interrupted and are remembered for `raise_if_stopped`.

    Signals the caller ignores (a background job's SIGINT, nohup's SIGHUP) stay ignored; outside the main
    thread nothing changes.
    """
    global _stop, _active
    if threading.current_thread() is not threading.main_thread() or _active:
        yield  # inside another one (the CLI's around compare's): that one is in charge
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def handler(signum, frame):
        global _stop
        first = _stop is None
        _stop = signum
        if first:
            raise Interrupted(signum)

    _stop, _active = None, True
    try:
        with _handling(previous, handler):
            yield
    finally:
        _stop, _active = None, False


@contextlib.contextmanager
def stop_signals_polled() -> Iterator[None]:
    """For the block: a stop signal is only remembered, for `raise_if_stopped` to raise where the caller polls.
    For loops inside a library's C code that cannot take an exception from a signal handler (Ray's wait:
    `SystemError: ... returned a result with an exception set`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def remember(signum, frame):
        global _stop
        _stop = signum if _stop is None else _stop

    with _handling(previous, remember):
        yield


@contextlib.contextmanager
def stop_handlers_kept() -> Iterator[None]:
    """For the block: whatever a library installs for the stop signals (Ray's make SIGTERM a sys.exit) is
    undone after it, the handlers present before restored."""
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, old in previous.items():
            if old is not None:  # None: a handler Python did not install, left as it is
                signal.signal(s, old)


@contextlib.contextmanager
def _handling(previous: dict, handler) -> Iterator[None]:
    """`handler` for every stop signal the caller does not ignore (`previous`: the handlers now), for the block."""
    with stop_handlers_kept():
        for s, old in previous.items():
            if old is not signal.SIG_IGN:
                signal.signal(s, handler)
        yield


@contextlib.contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """Stop signals held back for the block (delivered when it ends), where the main thread can do so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))
