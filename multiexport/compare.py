"""`compare`: one target, every selected backend, parity against JAX, one results.json.

Flow (DESIGN.md): signature -> export per backend -> each artifact loaded and run in its own worker
process (from disk alone) -> parity per named output leaf against `jax.jit(fn)` -> results. A backend
that is missing, fails to export, fails in its worker, crashes or hangs becomes a row with a status
category and the reason; the others still finish and results.json is always written.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import MultiexportError
from .manifest import write_text_atomic
from .target import Target

RESULTS_SCHEMA = "multiexport.results/1"
# Exit codes: 0 all faithful, 1 a parity failure, 3 a backend failed to export or run.
STATUS_EXIT = {"ok": 0, "parity-failed": 1}


@dataclass
class BackendResult:
    backend: str
    status: str  # ok | parity-failed | unavailable | export-failed | load-failed | run-failed | crashed | timeout
    reason: str = ""
    artifact: str | None = None
    export_seconds: float | None = None
    binding: list[dict[str, Any]] = field(default_factory=list)
    parity: dict[str, Any] | None = None
    error_vs_float64: dict[str, float] | None = None


@dataclass
class Results:
    target: str
    signature: dict[str, Any]
    trials: list[str]
    backends: dict[str, BackendResult]
    reference: dict[str, Any]
    environment: dict[str, Any]
    out_dir: str

    @property
    def exit_code(self) -> int:
        codes = [STATUS_EXIT.get(r.status, 3) for r in self.backends.values()]
        return max(codes, default=0)

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"schema": RESULTS_SCHEMA, **asdict(self)}


def compare(
    target: Target,
    *,
    backends: Sequence[str] = ("xla",),
    out_dir: str | os.PathLike | None = None,
    trials: int = 2,
    seed: int = 0,
    val_ranges: Mapping[str, tuple[float, float]] | None = None,
    dim_sizes: Mapping[str, Sequence[int]] | None = None,
    tolerances: Mapping[str, Any] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    reference: str = "jax",
    keep_unused: bool = False,
    device: str = "cpu",
    timeout: float = 600.0,
    progress: Callable[[str], None] = lambda message: None,
) -> Results:
    """Export `target` with each backend, run each artifact in a worker and check parity."""
    from .backend import ExportOptions
    from .feed import check_feed
    from .inputs import Trial, make_trials
    from .registry import get_backend
    from .signature import build_signature
    from .tolerance import check_patterns

    out = Path(out_dir or Path("multiexport-out") / target.name)
    out.mkdir(parents=True, exist_ok=True)
    progress(f"signature of '{target.name}'")
    sig = build_signature(target)
    check_patterns(tolerances or {}, [leaf.name for leaf in sig.outputs], "Tolerance")
    if inputs is not None:
        from .manifest import LeafBinding

        leaves = [LeafBinding(l.name, l.alias, list(l.shape), l.dtype) for l in sig.inputs]
        arrays, dims = check_feed(leaves, inputs)
        trial_list = [Trial("inputs", {l.name: a for l, a in zip(sig.inputs, arrays)}, dims)]
    else:
        trial_list = make_trials(sig.inputs, examples=sig.example_feed(), trials=trials, seed=seed,
                                 val_ranges=val_ranges, dim_sizes=dim_sizes)
    progress(f"reference outputs (jax.jit) for {len(trial_list)} trials")
    ref = _jax_reference(target, sig)
    ref_outputs = [ref(t.feed) for t in trial_list]
    truth = _float64_reference(target, sig, trial_list) if reference == "float64" else None

    results: dict[str, BackendResult] = {}
    for name in backends:
        results[name] = _one_backend(name, target, sig, trial_list, ref_outputs, truth, out, tolerances or {},
                                     ExportOptions(keep_unused=keep_unused), device, timeout, progress, get_backend)

    ref_info: dict[str, Any] = {"kind": "jax.jit", "jax_version": _version("jax")}
    if truth is not None:
        ref_info["jax_error_vs_float64"] = _error_vs(ref_outputs, truth)
    res = Results(target.name, sig.to_json(), [t.name for t in trial_list], results, ref_info, _environment(), str(out))
    write_text_atomic(out / "results.json", json.dumps(res.to_json(), indent=2) + "\n")
    return res


def _one_backend(name, target, sig, trial_list, ref_outputs, truth, out, tolerances, options, device, timeout,
                 progress, get_backend) -> BackendResult:
    from .parity import check_parity

    try:
        backend = get_backend(name)
    except MultiexportError as exc:
        return BackendResult(name, "unavailable", str(exc))
    status = backend.available()
    if not status.ok:
        return BackendResult(name, "unavailable", status.reason)
    progress(f"{name}: export")
    t0 = time.perf_counter()
    try:
        artifact = backend.export(target.fn, sig, out / name, options)
    except MultiexportError as exc:
        return BackendResult(name, getattr(exc, "category", "export-failed"), str(exc))
    result = BackendResult(
        name, "ok", artifact=str(artifact.directory), export_seconds=round(time.perf_counter() - t0, 3),
        binding=[{"name": l.name, "used": l.used, "param": l.param} for l in artifact.manifest.inputs],
    )
    progress(f"{name}: run {len(trial_list)} trials in a worker process")
    outputs, failure = run_in_worker(artifact.directory, [t.feed for t in trial_list], device, timeout)
    if failure:
        result.status, result.reason = failure
        return result
    progress(f"{name}: parity")
    verdict = check_parity(name, outputs, ref_outputs, sig.outputs, [t.name for t in trial_list], tolerances)
    result.parity = verdict.to_json()
    if not verdict.passed:
        result.status, result.reason = "parity-failed", verdict.summary()
    if truth is not None:
        result.error_vs_float64 = _error_vs(outputs, truth)
    return result


def run_in_worker(artifact_dir: Path, feeds: Sequence[dict[str, np.ndarray]], device: str = "cpu",
                  timeout: float = 600.0) -> tuple[list[dict[str, np.ndarray]], tuple[str, str] | None]:
    """Run feeds through the artifact in a fresh `python -m multiexport.worker` process.

    Returns the outputs per feed, or a (category, reason) failure: load-failed / run-failed (clean
    error), crashed (killed by a signal or an unexpected exit), timeout.
    """
    from .arrays_io import load_npz, save_npz
    from .registry import runtime_registered

    work = Path(tempfile.mkdtemp(prefix="multiexport-worker-"))
    try:
        (work / "feeds").mkdir()
        for i, feed in enumerate(feeds):
            save_npz(work / "feeds" / f"{i:04d}.npz", feed)
        cmd = [sys.executable, "-m", "multiexport.worker", str(artifact_dir), str(work / "feeds"), str(work / "out"),
               "--device", device]
        for name, locator in runtime_registered().items():
            cmd += ["--register", f"{name}={locator}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [], ("timeout", f"worker did not finish within {timeout:g} s")
        error_file = work / "out" / "error.json"
        if error_file.is_file():
            err = json.loads(error_file.read_text())
            return [], (err["category"], err["message"])
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited {proc.returncode}"
            return [], ("crashed", f"worker {how}: {tail}")
        return [load_npz(work / "out" / f"{i:04d}.npz") for i in range(len(feeds))], None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _jax_reference(target: Target, sig) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    import jax

    flat = jax.jit(sig.flat_function(target.fn))

    def run(feed):
        outs = flat(*[feed[leaf.name] for leaf in sig.inputs])
        return {leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, outs)}

    return run


def _float64_reference(target: Target, sig, trial_list) -> list[dict[str, np.ndarray]]:
    """The function in float64 (x64 on, float inputs widened): the true value, not XLA's float32 one."""
    import jax

    flat = sig.flat_function(target.fn)
    outs = []
    with jax.enable_x64(True):
        jitted = jax.jit(flat)
        for t in trial_list:
            args = [np.asarray(t.feed[leaf.name], np.float64) if np.dtype(t.feed[leaf.name].dtype).kind == "f"
                    else t.feed[leaf.name] for leaf in sig.inputs]
            outs.append({leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, jitted(*args))})
    return outs


def _error_vs(outputs, truth) -> dict[str, float]:
    """Per output leaf: the largest relative error against the float64 truth over all trials."""
    worst: dict[str, float] = {}
    for got, want in zip(outputs, truth):
        for name, w in want.items():
            if np.asarray(w).dtype.kind not in "fc":
                continue
            g = np.asarray(got[name], np.float64)
            w = np.asarray(w, np.float64)
            scale = max(float(np.max(np.abs(w), initial=0.0)), np.finfo(np.float64).tiny)
            worst[name] = max(worst.get(name, 0.0), float(np.max(np.abs(g - w), initial=0.0)) / scale)
    return worst


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _environment() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
        "cores": os.cpu_count(), "versions": {d: _version(d) for d in ("jax", "jaxlib", "numpy", "multiexport")},
    }
