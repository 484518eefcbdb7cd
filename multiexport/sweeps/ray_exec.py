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

import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import EnvironmentProblem
from .spec import SweepTask
from .state import DIED, UNSCHEDULABLE, RowOutcome, SweepDir

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
    ray.init(address=address, log_to_driver=False, include_dashboard=False if address is None else None,
             configure_logging=False)
    say(f"ray: joined {'the cluster at ' + address if address else 'a local cluster it started'} in "
        f"{time.perf_counter() - started:.1f} s ({_describe(ray.cluster_resources())})")
    try:
        remote = ray.remote(_on_node)
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        pending: dict[Any, tuple[SweepTask, int]] = {}

        def submit(task: SweepTask, attempt: int) -> None:
            sweep.clear_row(task.name)
            sweep.record_start(task, attempt)
            ref = remote.options(max_retries=0, **_ray_resources(task)).remote(task, str(cwd))
            pending[ref] = (task, attempt)

        for task in tasks:
            missing = _unschedulable(task, nodes)
            if missing:
                outcome = RowOutcome(task.name, UNSCHEDULABLE, None, 0.0, 0, f"no node of the cluster offers {missing}",
                                     "", task.fingerprint())
                on_end(outcome)
                continue
            submit(task, 1)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            task, attempt = pending.pop(ref)
            try:
                payload = ray.get(ref)
            except Exception as exc:  # the Ray worker itself died (or the node): like a compare killed
                payload = {"state": DIED, "exit": None, "seconds": 0.0, "host": "",
                           "reason": f"the Ray task failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                           "log": str(exc), "files": {}}
            _store(sweep, task.name, payload)
            if payload["state"] == DIED and attempt < 2:
                say(f"{task.name}: {payload['reason']}; running it once more")
                submit(task, attempt + 1)
                continue
            outcome = RowOutcome(task.name, payload["state"], payload["exit"], payload["seconds"], attempt,
                                 payload["reason"], payload["host"], task.fingerprint())
            on_end(outcome)
    finally:
        ray.shutdown()


def _on_node(task: SweepTask, cwd: str) -> dict[str, Any]:
    """On the node that took the task: its compare into a temporary directory, the files to ship back."""
    import shutil
    import tempfile

    from .task import run_task

    scratch = Path(tempfile.mkdtemp(prefix="multiexport-sweep-"))
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
    from ..files import write_bytes_atomic

    sweep.log_path(name).write_text(payload["log"])
    files = payload.get("files") or {}
    if files:
        row = sweep.row_dir(name)
        row.mkdir(parents=True, exist_ok=True)
        for file_name in SHIPPED:
            if file_name in files:
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
