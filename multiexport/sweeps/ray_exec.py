"""The Ray executor: each compare a Ray task, scheduled by its resources, its results shipped back.

`ray.init(address)` joins the cluster (`--ray-address`, else `$RAY_ADDRESS`, else a local one is started).
Each task asks for its `cpus`, `gpus` and `memory_gib`, and its `arch` as the custom resource `arch:NAME`
(a node offers it with `ray start --resources '{"arch:aarch64": 1000}'`). On the node the task runs
`multiexport compare` into a temporary directory with the node's timing lock, and returns results.json,
the two reports and the log; the artifacts stay on the node and are removed. A task no node can take is
a row `unschedulable` (Ray would otherwise wait for such a node for ever). Ray retries nothing itself: a
compare that died is re-run once by the sweep, as locally. Needs `pip install 'multiexport[sweep]'`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import EnvironmentProblem, Interrupted
from ..files import write_bytes_atomic
from ..files.temporary import make_temporary
from ..system.process import raise_if_stopped, stop_handlers_kept, stop_signals_polled
from .local import default_jobs
from .spec import SweepTask
from .state import DIED, DONE, FAILED, TIMEOUT, UNSCHEDULABLE, RowOutcome, SweepDir
from .task import command, run_task

SHIPPED = ("results.json", "report.md", "report.html")


def run_ray(tasks: Sequence[SweepTask], sweep: SweepDir, cwd: Path, address: str | None,
            on_end: Callable[[RowOutcome], None], say: Callable[[str], None]) -> None:
    """Run every task on the Ray cluster at `address`, calling `on_end` as each row ends."""
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem("Option '--executor ray' | Ray is not installed, expected "
                                 "pip install 'multiexport[sweep]'") from None
    if not tasks:
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    started = time.perf_counter()
    # A local cluster's session files (logs, sockets) go in a temporary of ours, removed after, not /tmp/ray
    scratch = None if address else make_temporary("ray")
    _join(ray, address, tasks, scratch)
    say(f"ray: joined {'the cluster at ' + address if address else 'a local cluster it started'} in "
        f"{time.perf_counter() - started:.1f} s ({_describe(ray.cluster_resources())})")

    pending: dict[Any, tuple[SweepTask, int]] = {}
    try:
        with stop_signals_polled():  # Ray's C wait cannot take our handler's exception: the loop polls instead
            _drive(ray, tasks, sweep, cwd, pending, on_end, say)
    finally:
        for ref in pending:  # stopped (a signal, an error): the compares still running on the nodes go too
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        ray.shutdown()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _join(ray, address: str | None, tasks: Sequence[SweepTask], scratch: Path | None) -> None:
    """ray.init, keeping multiexport's own signal handlers (Ray's make SIGTERM a sys.exit). A local cluster
    gets the local executor's share of the machine, not every core (each compare uses several)."""

    options: dict[str, Any] = {}
    if address is None:
        options["num_cpus"] = max([default_jobs(), *(t.resources.cpus for t in tasks)])
        options["_temp_dir"] = str(scratch)
    else:
        _check_reachable(address)
    try:
        with stop_handlers_kept():
            ray.init(address=address, log_to_driver=False, configure_logging=False, **options)
    except SystemExit:  # Ray's own SIGTERM handler (sys.exit(15)) while it joined: a stop, not the target's exit
        with contextlib.suppress(Exception):
            ray.shutdown()  # what the local cluster had started goes too
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise Interrupted(signal.SIGTERM) from None
    except (ConnectionError, ValueError, RuntimeError, TimeoutError, OSError) as exc:  # OSError: e.g. a socket
        with contextlib.suppress(Exception):                                             # path past 107 bytes
            ray.shutdown()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise EnvironmentProblem(f"Option '--ray-address' | cannot join {address or 'a local cluster'} "
                                 f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}), expected a running "
                                 "Ray cluster (`ray start --head`)") from None


CONNECT_TIMEOUT_S = 5.0


def _check_reachable(address: str) -> None:
    """Refuse in one line, within seconds, an address nothing answers at (ray.init retries for minutes).
    "auto"/"local" and addresses without a port are left to Ray."""
    import socket

    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if address in ("auto", "local") or not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (getattr(exc, "strerror", None) or str(exc))
        raise EnvironmentProblem(f"Option '--ray-address' | cannot reach {address} ({why} within "
                                 f"{CONNECT_TIMEOUT_S:g} s), expected a running Ray cluster's head "
                                 "(`ray start --head`)") from None


def _drive(ray, tasks: Sequence[SweepTask], sweep: SweepDir, cwd: Path, pending: dict[Any, tuple[SweepTask, int]],
           on_end: Callable[[RowOutcome], None], say: Callable[[str], None]) -> None:

    remote = ray.remote(_on_node)

    def submit(task: SweepTask, attempt: int) -> None:
        sweep.clear_row(task.name)
        sweep.record_start(task, attempt)
        sweep.start_log(task.name, shlex.join(command(task, sweep.row_dir(task.name))) + "  (on a Ray node)")
        ref = remote.options(max_retries=0, **_ray_resources(task)).remote(task, str(cwd))
        pending[ref] = (task, attempt)

    def unschedulable(task: SweepTask, attempts: int, missing: str) -> None:
        on_end(RowOutcome(task.name, UNSCHEDULABLE, None, 0.0, attempts, f"no node of the cluster offers {missing}",
                          "", task.fingerprint()))

    nodes = _alive(ray)
    for task in tasks:
        missing = _unschedulable(task, nodes)
        if missing:
            unschedulable(task, 0, missing)
        else:
            submit(task, 1)
    checked = time.monotonic()
    while pending:
        raise_if_stopped()  # Ray's wait does not see our signals: poll for them
        done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        if not done:
            if time.monotonic() - checked > 10:  # a node gone since: what only it offered would wait for ever
                checked, nodes = time.monotonic(), _alive(ray)
                for ref, (task, attempt) in list(pending.items()):
                    missing = _unschedulable(task, nodes)
                    if missing:
                        ray.cancel(ref, force=True)
                        del pending[ref]
                        unschedulable(task, attempt, missing + " any more")
            continue
        ref = done[0]
        task, attempt = pending.pop(ref)
        payload = _payload(ray, ref)
        _store(sweep, task.name, payload)
        if payload["state"] == DIED and attempt < 2:
            say(f"{task.name}: {payload['reason']}; running it once more")
            submit(task, attempt + 1)
            continue
        on_end(RowOutcome(task.name, payload["state"], payload["exit"], payload["seconds"], attempt,
                          payload["reason"], payload["host"], task.fingerprint()))


def _payload(ray, ref) -> dict[str, Any]:
    """What the task returned, checked; a Ray worker or node that died is a compare that died (re-run once),
    an error raised in the task itself is a failure (it would fail again)."""
    try:
        got = ray.get(ref)
    except Exception as exc:
        crashed = not isinstance(exc, ray.exceptions.RayTaskError)
        return {"state": DIED if crashed else FAILED, "exit": None, "seconds": 0.0, "host": "",
                "reason": f"the Ray task {'died' if crashed else 'failed'}: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:300]}", "log": str(exc), "files": {}}
    if not isinstance(got, dict) or got.get("state") not in (DONE, FAILED, DIED, TIMEOUT):
        return {"state": FAILED, "exit": None, "seconds": 0.0, "host": "", "files": {}, "log": repr(got)[:2000],
                "reason": "the node returned no result this version of multiexport reads (another version there?)"}
    return {"state": got["state"], "exit": got.get("exit") if isinstance(got.get("exit"), int) else None,
            "seconds": float(got.get("seconds") or 0.0), "host": str(got.get("host", "")),
            "reason": str(got.get("reason", "")), "log": str(got.get("log", "")),
            "files": got.get("files") if isinstance(got.get("files"), dict) else {}}


def _alive(ray) -> list[Mapping[str, float]]:
    return [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]


def _on_node(task: SweepTask, cwd: str) -> dict[str, Any]:
    """On the node that took the task: its compare into a temporary directory, the files to ship back."""

    scratch = make_temporary("sweep")  # marked: removed by the next multiexport command if this worker is killed
    try:
        out = scratch / task.name
        attempt = run_task(task, out, Path(cwd))
        files = {}
        for name in SHIPPED:
            path = out / name
            if path.is_file():
                files[name] = path.read_bytes()
        return {"state": attempt.state, "exit": attempt.exit, "seconds": attempt.seconds, "reason": attempt.reason,
                "host": attempt.host, "log": attempt.log, "files": files}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _store(sweep: SweepDir, name: str, payload: Mapping[str, Any]) -> None:
    """Write what a node shipped back into the row's directory (only the known file names)."""

    sweep.write_log(name, str(payload.get("log", "")))
    files = payload.get("files") or {}
    if files:
        row = sweep.row_dir(name)
        row.mkdir(parents=True, exist_ok=True)
        for file_name in SHIPPED:
            if isinstance(files.get(file_name), bytes):
                write_bytes_atomic(row / file_name, files[file_name])


def _ray_resources(task: SweepTask) -> dict[str, Any]:
    r = task.resources
    out: dict[str, Any] = {"num_cpus": r.cpus, "num_gpus": r.gpus}
    if r.memory_gib:
        out["memory"] = int(r.memory_gib * (1 << 30))
    if r.arch:
        out["resources"] = {f"arch:{r.arch}": 0.001}
    return out


def _unschedulable(task: SweepTask, nodes: Sequence[Mapping[str, float]]) -> str:
    """What no single node offers (empty when some node can take the task)."""
    r = task.resources
    wanted = {"CPU": r.cpus, "GPU": r.gpus, "memory": r.memory_gib * (1 << 30)}
    if r.arch:
        wanted[f"arch:{r.arch}"] = 0.001
    wanted = {k: v for k, v in wanted.items() if v}
    if any(all(node.get(k, 0.0) >= v for k, v in wanted.items()) for node in nodes):
        return ""
    return ", ".join(f"{k}={v / (1 << 30):g} GiB" if k == "memory" else (k if k.startswith("arch:") else f"{k}={v:g}")
                     for k, v in wanted.items())


def _describe(resources: Mapping[str, float]) -> str:
    shown = [f"{k}={v:g}" for k, v in sorted(resources.items()) if k in ("CPU", "GPU") or k.startswith("arch:")]
    return ", ".join(shown) or "no resources"
