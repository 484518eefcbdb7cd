"""`compare`: one target, every selected backend, parity against JAX, latency, one results.json.

Flow (DESIGN.md): signature -> export per backend -> each artifact loaded in its own worker process
(from disk alone), benchmarked (cold start, then steady state per batch size) and run on the parity
trials -> parity per named output leaf against `jax.jit(fn)` -> results. The reference jax.jit is
benchmarked the same way. A backend that is missing, fails to export, fails in its worker, crashes or
hangs becomes a row with a status category and the reason; the others finish and results.json is
always written.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .backend import dist_version
from .bench import BenchConfig
from .errors import MultiexportError
from .manifest import write_text_atomic
from .target import Target

RESULTS_SCHEMA = "multiexport.results/1"
# Exit codes: 0 all faithful, 1 a parity failure, 3 a backend failed to export or run.
STATUS_EXIT = {"ok": 0, "parity-failed": 1}


@dataclass
class BackendResult:
    backend: str
    status: str  # ok | parity-failed | unavailable | export-failed | load-failed | bench-failed | run-failed | crashed | timeout
    reason: str = ""
    artifact: str | None = None
    export_seconds: float | None = None
    binding: list[dict[str, Any]] = field(default_factory=list)
    parity: dict[str, Any] | None = None
    error_vs_float64: dict[str, float] | None = None
    bench: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    export_setup: dict[str, Any] | None = None  # one-time setup the export paid, e.g. jax2onnx's plugin import
    export_peak_rss_bytes: int | None = None  # of the export worker process
    weights: dict[str, Any] | None = None  # where the artifact keeps the weights: storage, file, bytes (manifest)


@dataclass
class Results:
    target: str
    signature: dict[str, Any]
    trials: list[str]
    backends: dict[str, BackendResult]
    reference: dict[str, Any]
    environment: dict[str, Any]
    out_dir: str
    device: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

    def exit_code_allowing(self, allow_fail: Sequence[str] = ()) -> int:
        """0 all faithful, 1 a parity failure, 3 a backend failed; failures of `allow_fail` backends do not count."""
        return max((STATUS_EXIT.get(r.status, 3) for n, r in self.backends.items() if n not in allow_fail), default=0)

    @property
    def exit_code(self) -> int:
        return self.exit_code_allowing(())

    def to_json(self) -> dict[str, Any]:
        return {"schema": RESULTS_SCHEMA, **asdict(self)}


@dataclass(frozen=True)
class WorkerOutput:
    outputs: list[dict[str, np.ndarray]]
    bench: dict[str, Any] | None
    failure: tuple[str, str] | None = None  # (category, reason)


_CTRL_C_POLL_S = 0.25
_ctrl_c_seen = False


def _raise_if_ctrl_c() -> None:
    if _ctrl_c_seen:
        raise KeyboardInterrupt


def _remembers_ctrl_c(fn):
    """Run `fn` with a SIGINT handler that also records the Ctrl-C, for _run_process to see.

    Python raises KeyboardInterrupt in whatever code runs when the signal arrives; in a destructor
    (`__del__`, run by the garbage collector at any allocation) it is printed and dropped.
    """
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import signal
        import threading

        global _ctrl_c_seen
        previous = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is not threading.main_thread() or not callable(previous):
            return fn(*args, **kwargs)  # SIGINT ignored, at its default or not ours to handle

        def remember(signum, frame):
            global _ctrl_c_seen
            _ctrl_c_seen = True
            previous(signum, frame)

        _ctrl_c_seen = False
        signal.signal(signal.SIGINT, remember)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)
            _ctrl_c_seen = False

    return wrapper


@_remembers_ctrl_c
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
    external_weights: str = "auto",
    device: str = "cpu",
    timeout: float = 600.0,
    bench: BenchConfig | None = BenchConfig(),
    batch_sizes: Sequence[int] | None = None,
    target_spec: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> Results:
    """Export `target` with each backend, benchmark and run each artifact in a worker, check parity.

    device: "cpu", "gpu" (backends that cannot use it become "no-gpu" rows) or "auto" (the GPU when every
    selected backend sees one). bench=None skips latency. batch_sizes sweeps the symbolic batch dimension (default: the example's
    size). target_spec (a TARGET string) lets the reference be benchmarked in a worker process like
    every backend; without it the reference is timed in this process before any export.
    """
    from .backend import ExportOptions
    from .devices import probe_gpu, resolve
    from .feed import check_feed
    from .inputs import Trial, make_trials
    from .manifest import LeafBinding
    from .signature import build_signature
    from .tolerance import check_patterns

    out = Path(out_dir or Path("multiexport-out") / target.name)
    out.mkdir(parents=True, exist_ok=True)
    if device != "cpu":
        progress(f"which backends see a GPU ({', '.join(backends)})")
    plan = resolve(device, probe_gpu(backends) if device != "cpu" else {})
    if plan.note:
        progress(plan.note)
    progress(f"signature of '{target.name}'")
    sig = build_signature(target)
    check_patterns(tolerances or {}, [leaf.name for leaf in sig.outputs], "Tolerance")
    if inputs is not None:
        leaves = [LeafBinding(l.name, l.alias, list(l.shape), l.dtype) for l in sig.inputs]
        arrays, dims = check_feed(leaves, inputs)
        trial_list = [Trial("inputs", {l.name: a for l, a in zip(sig.inputs, arrays)}, dims)]
    else:
        trial_list = make_trials(sig.inputs, examples=sig.example_feed(), trials=trials, seed=seed,
                                 val_ranges=val_ranges, dim_sizes=dim_sizes)
    bench_feeds = _bench_feeds(target, sig, trial_list, batch_sizes, seed, val_ranges) if bench else []

    from .reference import ReferenceRunner, float64_outputs

    jax_gpu = plan.chosen == "gpu" and "xla" in plan.found and plan.found["xla"]["gpu"]
    ref_device = "gpu" if jax_gpu else "cpu"
    ref_runner = ReferenceRunner(target, sig, ref_device)
    progress(f"reference outputs (jax.jit) for {len(trial_list)} trials")
    ref_outputs = [ref_runner(t.feed) for t in trial_list]
    truth = float64_outputs(target, sig, [t.feed for t in trial_list]) if reference == "float64" else None
    ref_info: dict[str, Any] = {"kind": "jax.jit", "jax_version": dist_version("jax"), "device": ref_device,
                                "lifted_weights": ref_runner.lifted_weights}
    if truth is not None:
        ref_info["jax_error_vs_float64"] = _error_vs(ref_outputs, truth)
    if bench:
        progress("reference: benchmark jax.jit")
        ref_info["bench"] = _bench_reference(ref_runner, target_spec, bench_feeds, bench, ref_device, timeout)

    results: dict[str, BackendResult] = {}
    res = Results(target.name, sig.to_json(), [t.name for t in trial_list], results, ref_info, _environment(), str(out),
                  device=plan.to_json())
    # What every export worker must reproduce; hashed once, it covers all the weights a target bakes in.
    fingerprint = sig.fingerprint(target.fn) if target_spec is not None else None
    try:
        for name in backends:
            if name in plan.excluded:
                results[name] = BackendResult(name, "no-gpu", plan.excluded[name])
                continue
            results[name] = _one_backend(name, target, sig, trial_list, ref_outputs, truth, out, tolerances or {},
                                         ExportOptions.for_device(plan.chosen, keep_unused, external_weights), plan.chosen, timeout,
                                         bench, bench_feeds, progress, target_spec, fingerprint)
    except KeyboardInterrupt:
        # Keep what finished: write the results and reports so far, then let the caller stop.
        for name in backends:
            results.setdefault(name, BackendResult(name, "interrupted", "interrupted before this backend finished"))
        res.interrupted = True
        _write(res, out)
        raise
    _write(res, out)
    return res


def _write(res: "Results", out: Path) -> None:
    """results.json, report.md and report.html, each written atomically."""
    from .report import write_reports

    data = res.to_json()
    write_text_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")
    write_reports(data, out)


def _one_backend(name, target, sig, trial_list, ref_outputs, truth, out, tolerances, options, device, timeout,
                 bench, bench_feeds, progress, target_spec, fingerprint) -> BackendResult:
    from .backend import Artifact
    from .manifest import Manifest
    from .parity import check_parity
    from .registry import get_backend

    try:
        backend = get_backend(name)
    except MultiexportError as exc:
        return BackendResult(name, "unavailable", str(exc))
    status = backend.available()
    if not status.ok:
        return BackendResult(name, "unavailable", status.reason)
    progress(f"{name}: export" + (" in a worker process" if target_spec else ""))
    t0 = time.perf_counter()
    try:
        if target_spec is not None:
            failure, info = export_in_worker(target_spec, name, out / name, options, timeout)
            if failure:
                return BackendResult(name, failure[0], failure[1])
            if info["fingerprint"] != fingerprint:
                return BackendResult(name, "nondeterministic-target", (
                    f"Target '{target.name}' | loads with different example values or weights in a fresh process "
                    "(random values without a fixed seed?), expected the same: seed them, or compare from Python "
                    "with multiexport.compare(...), which exports in this process"))
            artifact = Artifact(name, out / name, Manifest.read(out / name))
        else:
            artifact = backend.export(target.fn, sig, out / name, options)
    except MultiexportError as exc:
        return BackendResult(name, getattr(exc, "category", "export-failed"), str(exc))
    result = BackendResult(
        name, "ok", artifact=str(artifact.directory), export_seconds=round(time.perf_counter() - t0, 3),
        binding=_binding(artifact.manifest),
        warnings=list(artifact.manifest.warnings),
        weights={k: v for k, v in artifact.manifest.weights.items() if k != "tensors"},
    )
    if target_spec is not None:
        result.export_peak_rss_bytes = info.get("peak_rss_bytes")
    fmt = artifact.manifest.format
    if fmt.get("one_time_setup_seconds") is not None:
        result.export_setup = {"seconds": fmt["one_time_setup_seconds"], "what": fmt.get("one_time_setup", "")}
    what = f"benchmark and run {len(trial_list)} trials" if bench else f"run {len(trial_list)} trials"
    progress(f"{name}: {what} in a worker process")
    worker = run_worker(artifact.directory, [t.feed for t in trial_list], device=device, timeout=timeout,
                        bench_feeds=bench_feeds, bench=bench)
    result.bench = worker.bench
    if worker.failure:
        result.status, result.reason = worker.failure
        return result
    verdict = check_parity(name, worker.outputs, ref_outputs, sig.outputs, [t.name for t in trial_list], tolerances)
    result.parity = verdict.to_json()
    if not verdict.passed:
        result.status, result.reason = "parity-failed", verdict.summary()
    if truth is not None:
        result.error_vs_float64 = _error_vs(worker.outputs, truth)
    return result


def _binding(manifest) -> list[dict[str, Any]]:
    """Per input leaf: whether the format's module reads it, its parameter, and the key a caller must
    still feed when the format keeps a dropped leaf in its interface (a SavedModel signature does)."""
    keys = manifest.format.get("signature_keys") or {}
    return [{"name": l.name, "used": l.used, "param": l.param, "caller_key": keys.get(l.name)} for l in manifest.inputs]


def run_worker(
    artifact_dir: Path | None,
    feeds: Sequence[dict[str, np.ndarray]] = (),
    *,
    device: str = "cpu",
    timeout: float = 600.0,
    bench_feeds: Sequence[tuple[int | None, dict[str, np.ndarray]]] = (),
    bench: BenchConfig | None = None,
    reference_spec: str | None = None,
) -> WorkerOutput:
    """Run a fresh `python -m multiexport.worker` on an artifact (or the reference of a TARGET).

    Failures come back as (category, reason): load-failed / bench-failed / run-failed (a clean error in
    the worker), crashed (killed by a signal or an unexpected exit), timeout.
    """
    from .arrays_io import load_npz, save_npz

    work = Path(tempfile.mkdtemp(prefix="multiexport-worker-"))
    try:
        cmd = [sys.executable, "-m", "multiexport.worker"]
        cmd += ["--reference", reference_spec] if reference_spec else [str(artifact_dir)]
        cmd += [str(work / "out"), "--device", device]
        if feeds:
            (work / "feeds").mkdir()
            for i, feed in enumerate(feeds):
                save_npz(work / "feeds" / f"{i:04d}.npz", feed)
            cmd += ["--parity-feeds", str(work / "feeds")]
        if bench and bench_feeds:
            (work / "bench").mkdir()
            index = []
            for i, (batch, feed) in enumerate(bench_feeds):
                save_npz(work / "bench" / f"{i:04d}.npz", feed)
                index.append({"file": f"{i:04d}.npz", "batch": batch})
            (work / "bench" / "index.json").write_text(json.dumps(index))
            cmd += ["--bench-feeds", str(work / "bench"), "--bench-config", json.dumps(bench.to_json())]
        cmd += _registrations()
        cmd += ["--spawned-at", repr(time.time())]  # last, after the feeds are written: cold start starts here
        failure = _run_process(cmd, work / "out", timeout)
        bench_file = work / "out" / "bench.json"
        bench_data = json.loads(bench_file.read_text()) if bench_file.is_file() else None
        if failure:
            return WorkerOutput([], bench_data, failure)
        outputs = [load_npz(work / "out" / f"{i:04d}.npz") for i in range(len(feeds))]
        return WorkerOutput(outputs, bench_data)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def export_in_worker(target_spec: str, backend: str, artifact_dir: Path, options,
                     timeout: float) -> tuple[tuple[str, str] | None, dict[str, Any] | None]:
    """Export in a fresh process, so a converter that crashes, hangs or patches globals harms nothing else.

    Returns (failure, {seconds, fingerprint of the target as the worker loaded it, peak_rss_bytes}).
    """
    work = Path(tempfile.mkdtemp(prefix="multiexport-export-"))
    try:
        cmd = [sys.executable, "-m", "multiexport.worker", "export", target_spec, backend, str(artifact_dir), str(work)]
        cmd += ["--keep-unused"] if options.keep_unused else []
        cmd += ["--external-weights", options.external_weights]
        cmd += ["--device", "gpu"] if options.platforms and "cuda" in options.platforms else []
        failure = _run_process(cmd + _registrations(), work, timeout)
        if failure:
            return failure, None
        return None, json.loads((work / "export.json").read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _registrations() -> list[str]:
    from .registry import runtime_registered

    return [arg for name, locator in runtime_registered().items() for arg in ("--register", f"{name}={locator}")]


def _run_process(cmd: list[str], out_dir: Path, timeout: float) -> tuple[str, str] | None:
    """Run a worker; None on success, else (category, reason) from its error.json, its signal or the clock.

    Whatever interrupts the wait (Ctrl-C included) kills the worker first: a worker left behind would
    hold on to its memory, and a hung one would never exit. The wait polls for a Ctrl-C whose
    KeyboardInterrupt was swallowed (one raised inside a __del__ is only printed), which once left
    `compare` waiting on a hung worker for its full timeout.
    """
    proc = None
    try:
        _raise_if_ctrl_c()
        with _sigint_deferred():  # a Ctrl-C between fork and Popen's return would orphan the worker
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                # communicate() may be retried after a timeout without losing output (documented).
                _, stderr = proc.communicate(timeout=max(0.0, min(_CTRL_C_POLL_S, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                _raise_if_ctrl_c()
                if time.monotonic() >= deadline:
                    raise
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return ("timeout", f"worker did not finish within {timeout:g} s")
    except BaseException:
        if proc is not None:
            proc.kill()
            proc.wait()
        raise
    error_file = out_dir / "error.json"
    if error_file.is_file():
        err = json.loads(error_file.read_text())
        return (err["category"], err["message"])
    if proc.returncode != 0:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        if proc.returncode == -9:  # SIGKILL: on Linux almost always the kernel's OOM killer
            return ("out-of-memory", f"worker killed by SIGKILL (the kernel's out-of-memory killer?): {tail}")
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited {proc.returncode}"
        return ("crashed", f"worker {how}: {tail}")
    return None


@contextlib.contextmanager
def _sigint_deferred():
    """SIGINT held back for the block (delivered when it ends), where the main thread can do so."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _bench_feeds(target, sig, trial_list, batch_sizes, seed, val_ranges) -> list[tuple[int | None, dict[str, np.ndarray]]]:
    """One feed per batch size to time: the sweep sizes of the batch symbol, else the first trial as is."""
    from .errors import UsageError
    from .inputs import make_trials

    symbols = list(sig.symbolic_dims)
    if not batch_sizes:
        first = trial_list[0]
        return [(first.dims[symbols[0]] if len(symbols) == 1 else _static_batch(target, sig), first.feed)]
    if len(symbols) != 1:
        raise UsageError(
            f"Option '--batch-sizes' | got a target with {len(symbols)} symbolic dimensions, expected exactly one "
            "(declare a symbolic batch: Target(symbolic_batch='b', ...))"
        )
    sym = symbols[0]
    feeds = []
    for size in batch_sizes:
        trial = make_trials(sig.inputs, trials=1, seed=seed, val_ranges=val_ranges, dim_sizes={sym: (size,)})[0]
        feeds.append((size, trial.feed))
    return feeds


def _static_batch(target, sig) -> int | None:
    """The batch size of a static target whose batch leaves are named (batch_leaves), for items/s."""
    import fnmatch

    if tuple(target.batch_leaves) == ("*",):
        return None  # every leaf, weights included: no batch size to speak of
    leading = {leaf.shape[0] for leaf in sig.inputs
               if leaf.shape and any(fnmatch.fnmatchcase(leaf.name, p) for p in target.batch_leaves)}
    return leading.pop() if len(leading) == 1 and isinstance(next(iter(leading), None), int) else None


def _bench_reference(ref_runner, target_spec, bench_feeds, bench, device, timeout) -> dict[str, Any]:
    """The reference's figures, from a worker when the target can be named, else from this process."""
    from .bench import BenchResult, bench_sizes, memory_now

    if target_spec is not None:
        worker = run_worker(None, device=device, timeout=timeout, bench_feeds=bench_feeds, bench=bench,
                            reference_spec=target_spec)
        if worker.failure is None and worker.bench is not None:
            return worker.bench
    t0 = time.perf_counter()
    sizes = bench_sizes(ref_runner, list(bench_feeds), bench)
    for size, (_, feed) in zip(sizes, bench_feeds):
        size.flops = ref_runner.flops(feed)
        if size.flops:
            size.gflops_per_s = size.flops / (size.latency.p50_ms / 1e3) / 1e9
    return BenchResult(load_s=0.0, sizes=sizes, memory=memory_now(), artifact_bytes=None,
                       runner=ref_runner.describe(), config=bench.to_json(), process="parent",
                       extra={"bench_s": time.perf_counter() - t0}).to_json()


def _error_vs(outputs, truth) -> dict[str, float]:
    """Per output leaf: max |error| / max |truth| against the float64 truth, worst over all trials."""
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



def _environment() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "XLA_FLAGS", "TF_NUM_INTRAOP_THREADS") if k in os.environ}
    return {
        "python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
        "cores": os.cpu_count(), "thread_env": threads,
        "versions": {d: dist_version(d) for d in ("jax", "jaxlib", "numpy", "multiexport")},
    }
