"""The paired workers of a compare: one `serve` worker per runner (run.serve's protocol), all alive for the
timed phase, and a fresh copy of any of them on request (the process pair that confirms a flagged ratio); the
reference's worker, which builds the target as it starts, also makes the exports that need it (`ReferenceExports`)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence, TypeVar

from ..errors import InputError, InternalError
from ..measure.pairing import FIRST_ONLY, PLANTED_ENV, fresh_name, is_fresh
from ..results.bench import BASELINE_PREFIX
from ..system.piped import Served, ServedExit
from ..system.process import Outcome
from .messages import (
    ColdStart,
    Export,
    ExportsDone,
    Imported,
    Load,
    Loaded,
    Prepare,
    WorkerFailure,
    decode_answer,
    encode_request,
)
from .worker import thread_env
from .workers import classify_outcome, register_args, start_work_dir, worker_command, worker_environment

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
        self.imported: dict[str, Imported] = {}  # each worker's first answer, once read

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
        if self.wait_imported(name) is None:
            return
        self.loaded_from[name] = artifact
        answer = self.ask(name, Load(artifact), Loaded, self.timeout)
        if answer is not None:
            self.ready[name] = answer

    def reference_of(self, spec: str) -> bool:
        """Whether the reference's worker ("jax") is alive and builds `spec`."""
        name = ReferenceExports.NAME
        return name in self.alive and self.started.get(name, ((), None))[0] == ("reference", spec)

    def wait_imported(self, name: str) -> Imported | None:
        """The worker's answer once its runtime is imported (for the reference's, the target built): read once,
        then kept; None when it failed (`failures` says why)."""
        if name not in self.imported:
            answer = self.ask(name, None, Imported, self.timeout)
            if answer is None:
                return None
            self.imported[name] = answer
        return self.imported[name]

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
        self.imported.pop(name, None)

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

    def close(self, kill: bool = False) -> None:
        """End every worker: asked to quit, all at once (each one's interpreter shutdown overlaps the others');
        `kill`: killed instead, for workers nothing was asked of (a worker still importing its runtime reads
        no request until it is done: a target that fails to load would wait seconds for TensorFlow's import)."""
        if kill:
            for server in self.alive.values():
                server.kill()
        for server in self.alive.values():
            server.ask_to_quit()
        for server in self.alive.values():
            server.close()
        self.alive.clear()
        shutil.rmtree(self.work, ignore_errors=True)


class ReferenceExports:
    """The reference's paired worker as the export worker that needs the built target: it builds the target as
    it starts (run.serve), so the exports that need it are made there (an `Export` request before its load)
    instead of in a process that builds it once more. As `export_pool.AheadWorker` is run: `run` once.

    A worker that dies or fails while it exports is that export's end as a worker's death would be (its
    `Outcome`); the reference then gets a fresh worker, started by `restore` from the compare's own thread (a
    worker dies with the thread that started it, and `run` runs in the export pool's).

    spec: the TARGET the worker built. pid: None (its memory is counted among the early workers'). role: as said.
    """

    NAME = "jax"
    role = "the exports that need the built target made in the reference's paired worker, which has it"
    own_environment = True  # the timed runtimes' thread count (run.worker.thread_env)

    def __init__(self, servers: Servers, spec: str):
        self.servers, self.spec = servers, spec
        self.pid: int | None = None
        self.lost = False
        self.changed = False  # an export there changed the target it would time
        self._ran = False

    def run(self, args: Sequence[str], timeout: float) -> Outcome | None:
        """Export with `args` (an export worker's command line) in the reference's worker, waiting up to `timeout`
        from the end of its build; None when it has no built target to export with (gone, or its build failed:
        the export then runs in a worker of its own, as without it)."""
        if self._ran:
            raise InternalError("the reference's worker is run as an export worker once")
        self._ran = True
        if self.servers.wait_imported(self.NAME) is None:
            return None
        server = self.servers.alive.get(self.NAME)
        if server is None:
            return None
        # the compare's registrations as they are now: the worker was started before the target's module loaded
        try:
            answer = decode_answer(server.request(encode_request(Export((*args, *register_args()))), timeout), ExportsDone,
                                   "the reference worker's answer to an export")
        except ServedExit as exc:
            self._lose()
            return exc.outcome
        except InputError as exc:
            self._lose()
            return Outcome(70, "", str(exc))
        if isinstance(answer, WorkerFailure):  # it raised, answered so, and exited
            self._lose()
            return Outcome(70 if answer.category == "internal-error" else 1, "", answer.message)
        if answer.target_changed:  # its exports stand (each is judged against the reference); its timing would not
            self.changed = True
            self._lose()
        return Outcome(answer.returncode, "", "")

    def _lose(self) -> None:
        self.lost = True
        self.servers.discard(self.NAME)

    def restore(self) -> str | None:
        """After the exports, in the compare's thread: a fresh reference worker where this one was lost (it died
        or failed exporting, or an export changed the target it would time). Returns why, when it started one."""
        if self.lost and self.NAME not in self.servers.alive and self.NAME not in self.servers.failures:
            self.servers.spawn(self.NAME, ["reference", self.spec], None)
            self.lost = False
            return ("an export there changed the target it would time (the program it traces to, or the constants "
                    "it bakes in)" if self.changed else "it was lost while it exported")
        return None

    def close(self) -> None:
        """Nothing to end: the worker stays, the reference's for the timed phase."""
