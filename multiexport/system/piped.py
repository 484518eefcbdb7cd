"""Children that read their input on stdin, started by `process.start_child` as every child is.

- `Served`: a long-lived child answering one JSON line per request (a paired-benchmark worker).
- `Pending`: a child started before its input is known, then given one line and run to completion as
  `process.run_command` runs one (the export worker a compare starts to build the target while it plans).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import tempfile
import time
from typing import Mapping, Sequence

from ..errors import present
from .oom import oom_kill_count
from .process import POLL_S, Outcome, kill_child, output_tail, raise_if_stopped, reap, start_child, stop_requested


class Pending:
    """A child started before its input is known, then given one line on stdin and run to completion
    (`finish`), as `run_command` runs one: an export worker that builds the target while the compare is
    still deciding what it will export. `cancel` ends it unused. Started from the thread that will keep
    running (the child dies with it, as every child here)."""

    def __init__(self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None):
        raise_if_stopped()
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self._before, self._start = oom_kill_count(), time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.start_error = ""
        try:
            self.proc = start_child(cmd, env=env, stdout=self._out, stderr=self._err, stdin=subprocess.PIPE)
        except OSError as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"

    def finish(self, line: str, timeout: float) -> Outcome:
        """Send `line` (then end of input) and wait for the child to end, up to `timeout` seconds from now."""
        try:
            if self.proc is None:
                return Outcome(None, "", "", start_error=self.start_error)
            stdin = present(self.proc.stdin, "the child is started with stdin=PIPE")
            with contextlib.suppress(OSError):  # it ended already (BrokenPipe): its outcome says how
                stdin.write((line.rstrip("\n") + "\n").encode())
            with contextlib.suppress(OSError):
                stdin.close()
            return reap(self.proc, self._out, self._err, self._start, self._before, time.monotonic() + timeout)
        finally:
            self._close_files()

    def cancel(self) -> None:
        """End the child unused (killed with what it started) and reap it."""
        if self.proc is not None:
            kill_child(self.proc)
            with contextlib.suppress(OSError):
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
        self._close_files()

    def _close_files(self) -> None:
        for fh in (self._out, self._err):
            fh.close()


class Served:
    """A long-lived child that answers one JSON line per request on its stdout (a paired-benchmark worker).

    It runs in its own session like every child; a request waits in slices for its answer, so a stop
    signal or a timeout kills the child (and what it started) instead of hanging; a child that dies
    mid-request ends the request with its `outcome()`. `close()` asks it to quit and reaps it.
    """

    def __init__(self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None):
        raise_if_stopped()
        self._err = tempfile.TemporaryFile()
        self._buffer = b""
        self.timed_out = False
        self._oom_before = oom_kill_count()
        self.proc = start_child(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)

    def request(self, line: str, timeout: float) -> dict:
        """Send one JSON line (the caller's codec made it), return the child's one-line JSON answer; raises
        ServedExit if the child is gone."""
        raise_if_stopped()
        try:
            stdin = present(self.proc.stdin, "the worker is started with stdin=PIPE")
            stdin.write((line.rstrip("\n") + "\n").encode())
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise ServedExit(self.outcome()) from None
        return self.read_answer(timeout)

    def read_answer(self, timeout: float) -> dict:
        """The child's next JSON line (e.g. the one it writes when it is ready)."""
        deadline = time.monotonic() + timeout
        fd = present(self.proc.stdout, "the worker is started with stdout=PIPE").fileno()
        while b"\n" not in self._buffer:
            raise_if_stopped()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                self.kill()
                raise ServedExit(self.outcome())
            ready, _, _ = select.select([fd], [], [], min(POLL_S, remaining))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise ServedExit(self.outcome())
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            self.kill()
            raise ServedExit(self.outcome(f"answered {line[:200]!r}, expected one JSON line")) from None

    def outcome(self, note: str = "") -> Outcome:
        """How the child ended (reaped here; killed first if it is still running)."""
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._err.seek(0)
        after = oom_kill_count()
        return Outcome(self.proc.returncode, note, output_tail(self._err), timed_out=self.timed_out,
                       oom_kills=None if self._oom_before is None or after is None else after - self._oom_before)

    def kill(self) -> None:
        kill_child(self.proc)

    def ask_to_quit(self) -> None:
        """Send the quit request without waiting (`close` then waits): several children can end at once."""
        if self.proc.poll() is None and self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b'{"cmd": "quit"}\n')
                self.proc.stdin.close()  # end of input is a quit request too

    def close(self, timeout: float = 10.0) -> None:
        """Ask the child to quit; kill it if it does not within `timeout` (at once when stopping on a signal)."""
        if self.proc.poll() is None and stop_requested() is not None:
            self.kill()
        if self.proc.poll() is None:
            self.ask_to_quit()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        kill_child(self.proc)  # ended: its session's leftovers too
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self._err.close()


class ServedExit(Exception):
    """A served child ended (crashed, was killed, timed out) while a request was open."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.how_it_ended())
        self.outcome = outcome
