"""The paired workers of a compare: one `serve` worker per runner (run.serve's protocol), all alive for the
timed phase, and a fresh copy of any of them on request (the process pair that confirms a flagged ratio)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence, TypeVar

from ..errors import InputError
from ..measure.pairing import FIRST_ONLY, PLANTED_ENV, fresh_name, is_fresh
from ..results.bench import BASELINE_PREFIX
from ..system.piped import Served, ServedExit
from .messages import ColdStart, Imported, Load, Loaded, Prepare, WorkerFailure, decode_answer, encode_request
from .worker import thread_env
from .workers import classify_outcome, start_work_dir, worker_command, worker_environment

M = TypeVar("M")


class Servers:
    """One `serve` worker per runner, all alive for the compare's timed phase (run.serve's protocol).

    A runner whose worker fails (at load, parity, prepare or a slice) is recorded in `failures` with its
    category and reason, its worker is gone, and every other runner goes on.
    """

    def __init__(self, device: str, threads: int, timeout: float):
        self.device, self.threads, self.timeout = device, threads, timeout
        self.work = start_work_dir("paired")
        self.alive: dict[str, Served] = {}
        self.failures: dict[str, tuple[str, str]] = {}
        self.ready: dict[str, Loaded] = {}
        self.dirs: dict[str, Path] = {}
        # how each worker was started, loaded and prepared: what a fresh copy of it repeats (`fresh`)
        self.started: dict[str, tuple[tuple[str, ...], str | None]] = {}
        self.loaded_from: dict[str, str | None] = {}
        self.prepared: dict[str, Prepare] = {}

    def spawn(self, name: str, source: Sequence[str], runtime: str | None) -> None:
        """Start the runner's worker; it imports its runtime and waits (no timed work until `load`).

        source: ["reference", TARGET], or ["run", ARTIFACT_DIR], or ["run", "-"] when the artifact is not
        written yet (its directory then comes with `load`)."""
        out = Path(tempfile.mkdtemp(prefix="runner-", dir=self.work))
        self.dirs[name] = out
        self.started[name] = (tuple(source), runtime)
        cmd = worker_command("serve", *source, str(out), "--device", self.device, "--threads", str(self.threads),
                             *(["--runtime", runtime] if runtime else []))
        # its own $TMPDIR inside ours: what its frameworks leave there goes with `close`, even after a crash
        tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=self.work))
        env = worker_environment(tmp, thread_env(self.threads))
        # a benchmark's planted slowdown slows the new runners, never the baseline; FACTOR:first, the first workers only
        if name.startswith(BASELINE_PREFIX) or (is_fresh(name) and env.get(PLANTED_ENV, "").endswith(FIRST_ONLY)):
            env.pop(PLANTED_ENV, None)
        self.alive[name] = Served(cmd, env=env)

    def load(self, name: str, artifact: str | None = None) -> None:
        """Wait for the spawned worker's import, then have it load its runner (the timed load) from
        `artifact` (for a worker started before it was written)."""
        # --timeout for each step, as a sequential worker's whole run
        if self.ask(name, None, Imported, self.timeout) is None:
            return
        self.loaded_from[name] = artifact
        answer = self.ask(name, Load(artifact), Loaded, self.timeout)
        if answer is not None:
            self.ready[name] = answer

    def fresh(self, name: str) -> str | None:
        """A second worker of runner `name`, started, loaded and prepared as it was (a process of its own: what
        the first one's process did to its timing, it does not share); its name (`fresh_name`), or None when
        `name` was never prepared or the fresh worker failed (then `failures` says why)."""
        copy = fresh_name(name)
        if copy in self.alive:
            return copy
        if name not in self.prepared or name not in self.started or copy in self.failures:
            return None
        source, runtime = self.started[name]
        self.spawn(copy, source, runtime)
        self.load(copy, self.loaded_from.get(name))
        if copy not in self.ready or self.ask(copy, self.prepared[name], ColdStart, self.timeout) is None:
            self.failures.setdefault(copy, ("internal-error", "the fresh worker did not load"))
            self.discard(copy)
            return None
        return copy

    def discard(self, name: str) -> None:
        """Stop a worker that will not be needed (its export failed), without counting it as a failure."""
        server = self.alive.pop(name, None)
        if server is not None:
            server.close()
        self.dirs.pop(name, None)

    def ask(self, name: str, request: Any, reply: type[M], timeout: float) -> M | None:
        """The runner's answer to `request` (a `messages` request; None: wait for the next answer), read as
        `reply`; None when its worker failed (then `failures[name]` says why)."""

        server = self.alive.get(name)
        if server is None:
            return None
        try:
            answer = (server.read_answer(timeout) if request is None
                      else server.request(encode_request(request), timeout))
            parsed = decode_answer(answer, reply, f"the {name} worker's answer")
        except ServedExit as exc:
            self.failures[name] = classify_outcome(exc.outcome, timeout) or (
                "internal-error", f"the worker exited while a request was open: {exc.outcome.stderr[-500:]}")
            self.alive.pop(name).close()
            return None
        except InputError as exc:  # a worker that answers out of protocol is a bug, and that runner's failure
            parsed = WorkerFailure("internal-error", str(exc))
        if isinstance(parsed, WorkerFailure):
            self.failures[name] = (parsed.category, parsed.message)
            self.alive.pop(name).close()
            return None
        return parsed

    def close(self) -> None:
        for server in self.alive.values():  # all at once: each one's interpreter shutdown overlaps the others'
            server.ask_to_quit()
        for server in self.alive.values():
            server.close()
        self.alive.clear()
        shutil.rmtree(self.work, ignore_errors=True)
