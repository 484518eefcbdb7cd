"""The paired-mode worker: one runner loaded once, then asked for parity, cold start and timed slices.

    python -m multiexport.run.worker serve run ARTIFACT_DIR OUT_DIR [--device --threads --trust-artifact]
    python -m multiexport.run.worker serve run - OUT_DIR [...]      (the directory comes with "load")
    python -m multiexport.run.worker serve reference TARGET OUT_DIR [...]

It imports its runtime (the backend's `runtime_modules`; jax for the reference) and answers `Imported`,
so it can be started while other work runs (compare starts it as soon as the compare starts); then it
reads one request per line on stdin and answers one line (the types and their codec: `run.messages`):

    Load(artifact)            load the runner, timed -> Loaded (artifact: the directory, for a worker started with -)
    Parity(feeds, out)        outputs of each FEEDS/NNNN.npz as OUT/NNNN.npz -> Done
    Prepare(bench_feeds, config)   each size prepared on the device, compiled, first call and warm-up
                                   -> ColdStart (the BenchResult of cold start)
    TimeSlice(size, seconds, min_calls, max_calls)   -> Samples (every call's ns in OUT/slice-*.npy)
    LoadRun(scenario, feeds, size, lanes, ...)    a load scenario (run.load_serve) -> LoadAnswer
    Peak()                    float32 matmul GFLOP/s through XLA here -> PeakFigure
    Export(args)              (the reference's worker, before Load) export with the target it built -> ExportsDone
    Quit()

A failure is answered as {"error": WorkerFailure} (the same categories as the run worker's) and the
worker exits. The protocol has its own file descriptor: what a runtime prints to stdout goes to
stderr. Between requests the worker blocks on a read, so it does not disturb the one being timed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..exporting.registry import get_backend
from ..files.npz import load_npz, save_npz
from ..leaves import build_signature, load_target
from ..leaves.factory_cache import ENV as FACTORY_ENV, kept_directory, use_in_export_worker
from ..measure.bench import BenchConfig, cold_start, memory_now, time_calls, time_runner
from ..measure.pairing import planted
from ..results import BenchResult, SizeResult, Status
from ..results.schema import to_data
from ..system.exits import exit_now
from .export_worker import export_built
from .load_serve import answer_load_run
from .messages import (
    ColdStart,
    Done,
    Export,
    ExportsDone,
    Imported,
    Load,
    LoadRun,
    Loaded,
    Parity,
    PeakFigure,
    Prepare,
    Quit,
    Samples,
    TargetLoad,
    TimeSlice,
    decode_request,
    encode,
    read_bench_index,
)
from .worker_io import CLEAN_FAILURE, load_runner, register_entries, write_failure

PEAK_N = 1024  # float32 matmul side for the peak: 2 GFLOP per call, compute-bound on any CPU
RE_WARM_CALLS = 2  # untimed calls at the start of a slice: the other runners ran in between


def serve_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m multiexport.run.worker serve")
    parser.add_argument("serve")
    parser.add_argument("mode", choices=["run", "reference"])
    parser.add_argument("source")
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--trust-artifact", action="store_true")
    parser.add_argument("--register", action="append", default=[])
    parser.add_argument("--runtime", help="the backend whose runtime to import before loading (default: none)")
    args = parser.parse_args(argv)
    # The protocol keeps the real stdout; fd 1 becomes stderr, so a runtime's prints cannot corrupt it.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    state: dict = {"stage": "load", "backend": None, "slices": 0, "out": args.out, "runner": None}
    try:
        register_entries(args.register)
        t0 = time.perf_counter()
        _import_runtime(state, args.mode, args.source, args.runtime)
        state["import_s"], state["import_cpu_s"] = time.perf_counter() - t0, time.process_time()
        _answer(protocol, Imported(state["import_s"], state["import_cpu_s"]))
        for line in sys.stdin:
            request = decode_request(line)
            if isinstance(request, Quit):
                protocol.flush()
                sys.stderr.flush()
                # Nothing is left to write: skip the runtimes' interpreter teardown (TensorFlow's takes ~1 s)
                exit_now(0)
            if isinstance(request, Export):
                _answer(protocol, _export(state, args, request))
                continue
            if isinstance(request, Load):
                if args.mode == "run" and args.source == "-":
                    if request.artifact is None:
                        raise ValueError("request 'load' without the artifact, expected it for a worker started with -")
                    args.source = request.artifact  # started before the artifact was written
                _answer(protocol, _load_runner(state, args))
                continue
            if state["runner"] is None:
                raise ValueError(f"request {type(request).__name__!r} before 'load'")
            if isinstance(request, Parity):
                _answer(protocol, _parity(state, request))
            elif isinstance(request, Prepare):
                _answer(protocol, _prepare(state, request))
            elif isinstance(request, TimeSlice):
                _answer(protocol, _time(state, request))
            elif isinstance(request, LoadRun):  # a load measurement (run.load)
                _answer(protocol, answer_load_run(state, request))
            else:
                _answer(protocol, peak_gflops())
    except Exception as exc:
        failure = write_failure(args.out, exc, state["stage"], state["backend"])
        protocol.write(json.dumps({"error": to_data(failure)}) + "\n")
        protocol.flush()
        return CLEAN_FAILURE
    return 0


def _import_runtime(state: dict, mode: str, source: str, runtime: str | None) -> None:
    """The runner's library, before any artifact is read: the backend's; for the reference, jax and the
    target's own module (its import is the reference's runtime, as the library is an artifact's), the
    target built from the build cache where one is kept (`_build_target`)."""
    if mode == "reference":
        state["target"], state["build_cache"] = _build_target(source)
        return
    if runtime:
        get_backend(runtime).import_runtime()


def _build_target(source: str) -> tuple[Any, dict]:
    """The reference's target, its factory's eager programs read from the build cache kept between commands
    (leaves/factory_cache.py: what the compare's own build, or an earlier one, recorded; read only), as an
    export worker builds it; then JAX's compilation cache is switched off again and forgotten, before
    anything is loaded or timed, so the reference's cold start compiles as in a fresh process. Returns
    (the target, what the build read: {"dir", "hits", "misses"}; empty when no cache is kept)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    kept = kept_directory()
    if kept is None or not kept.is_dir():
        return load_target(source), {}
    os.environ[FACTORY_ENV] = str(kept)
    try:
        with _cache_events() as counts:
            use_in_export_worker()
            target = load_target(source)
    finally:
        os.environ.pop(FACTORY_ENV, None)
        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()
    return target, {"dir": str(kept), **counts}


@contextlib.contextmanager
def _cache_events() -> Iterator[dict[str, int]]:
    """JAX's compilation-cache reads meanwhile: {"hits", "misses"} (none while the cache is off)."""
    import jax

    counts = {"hits": 0, "misses": 0}
    names = {"/jax/compilation_cache/cache_hits": "hits", "/jax/compilation_cache/cache_misses": "misses"}

    def count(event: str, **_: object) -> None:
        if event in names:
            counts[names[event]] += 1

    jax.monitoring.register_event_listener(count)
    try:
        yield counts
    finally:
        jax.monitoring.unregister_event_listener(count)


def _export(state: dict, args, request: Export) -> ExportsDone:
    """Export with the target this reference worker built (`export_worker.export_built`), before its load: the
    compare's exports that need the built target, without a build in another process. Then what the exports
    left behind is made to count as little as it can: JAX's caches cleared (the reference's cold start traces
    and compiles its function anew), garbage collected and freed memory handed back to the system, the resident
    peak reset (its peak is the reference's own from here on, over what the exports left resident, which is
    said: `exports_resident_bytes`), and which exports ran here listed with its cold start
    (`exported_before_load`)."""
    import gc

    import jax

    if args.mode != "reference" or state["runner"] is not None or "target" not in state:
        raise ValueError("request 'export' to a worker that is not the reference's, or after 'load'")
    given = {a.partition("=")[0] for a in _registers(request.args)}  # the compare's registrations win: newer
    argv = [*request.args, *(a for r in args.register if r.partition("=")[0] not in given for a in ("--register", r))]
    cache = state.get("build_cache") or {}
    load = TargetLoad(seconds=state["import_s"], factory_cache=bool(cache), cache_hits=cache.get("hits", 0),
                      cache_misses=cache.get("misses", 0))
    ran: list[str] = []
    before = _traced(state["target"])
    try:
        returncode = export_built(argv, args.source, state["target"], load, ran)
    finally:
        state.setdefault("exported", []).extend(ran)
    changed = _traced(state["target"]) != before
    jax.clear_caches()
    gc.collect()
    _trim_heap()
    _reset_peak()
    state["exports_resident_bytes"] = memory_now()["rss_bytes"]
    return ExportsDone(returncode, target_changed=changed)


def _registers(argv: Sequence[str]) -> list[str]:
    """The NAME=module:Class of each --register in a command line."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--register"]


def _traced(target: Any) -> tuple[str, str, str] | None:
    """What the reference would time, to tell whether an export changed it: the signature's fingerprint (its leaves,
    example values and the constants the function bakes in), a hash of the jaxpr it traces to (its ops and their
    parameters: dtypes, shapes, precisions, never the constants' values, which the fingerprint has) and of the JAX
    settings and CPU affinity it would run under (a converter turning on x64 or debug_nans, pinning the process).
    Traced only, not lowered: no copy of a baked constant is made. None when it cannot be traced here (compared as
    such: a target that traced before and not after has changed)."""
    import hashlib

    import jax

    try:
        sig = build_signature(target)
        closed = jax.make_jaxpr(sig.flat_function(target.fn))(*sig.specs)  # traced once, for both hashes
        settings = {k: repr(v) for k, v in getattr(jax.config, "values", {}).items() if "cache" not in k}
        affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        where = json.dumps([sorted(settings.items()), affinity])
        return (sig.fingerprint(target.fn, closed), hashlib.sha256(str(closed.jaxpr).encode()).hexdigest(),
                hashlib.sha256(where.encode()).hexdigest())
    except Exception:  # the export's own error, if any, is its report; the reference's load reports its own
        return None


def _trim_heap() -> None:
    """Hand the heap's free memory back to the system (glibc's malloc_trim; elsewhere nothing)."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def _reset_peak() -> None:
    """Start this process's resident peak (VmHWM) again from its size now (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError):
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")


def _load_runner(state: dict, args) -> Loaded:
    """Load the runner (timed: the artifact's load, with its library already imported)."""
    if state["runner"] is not None:
        raise ValueError("asked to load twice")
    start = memory_now()
    t0 = time.perf_counter()
    runner, state["backend"] = load_runner(args, state.get("target"))  # the reference's target is imported already
    state["runner"], state["load_s"] = runner, time.perf_counter() - t0
    state["memory"] = {"start_rss_bytes": start["rss_bytes"], "after_load_rss_bytes": memory_now()["rss_bytes"]}
    state["artifact_bytes"] = _bytes(args.source) if args.mode == "run" else None
    return Loaded(state["load_s"], runner.describe())


def _parity(state: dict, request: Parity) -> Done:
    state["stage"] = "run"
    out = Path(request.out)
    for path in sorted(Path(request.feeds).glob("*.npz")):
        save_npz(out / path.name, state["runner"](load_npz(path)))
    return Done()


def _prepare(state: dict, request: Prepare) -> ColdStart:
    """Cold start per size (prepare, compile, first call), then warm-up; the prepared inputs stay resident."""
    state["stage"] = "bench"
    runner = state["runner"]
    config = request.config
    directory = Path(request.bench_feeds)
    state["prepared"], sizes = [], []
    built_from_cache = bool(state.get("build_cache"))
    for entry in read_bench_index(directory):
        if not entry.file:
            state["prepared"].append(None)
            sizes.append(SizeResult(batch=entry.batch, status=Status.SIZE_UNSUPPORTED, reason=entry.reason))
            continue
        feed = load_npz(directory / entry.file)
        # Only the worker that built its target from the build cache counts JAX's cache reads: any other
        # worker (ONNX's, IREE's, ...) would import JAX for it, 0.35 s of its timed cold start and its memory.
        events: contextlib.AbstractContextManager[dict[str, int]] = (
            _cache_events() if built_from_cache else contextlib.nullcontext({}))
        with events as reads:
            prepared, size = cold_start(runner, feed, entry.batch)
        if built_from_cache:  # the cache the target was built from is off: its cold start reads nothing (recorded)
            state["build_cache"]["cold_start_reads"] = state["build_cache"].get("cold_start_reads", 0) + sum(
                reads.values())
        time_calls(lambda: runner.run_prepared(prepared), BenchConfig(
            warmup_iters=config.warmup_iters, warmup_time=config.warmup_time, min_iters=1, bench_time=0.0,
            max_iters=max(config.warmup_iters, 1)))
        size.flops = runner.flops(feed) if hasattr(runner, "flops") else None
        state["prepared"].append(prepared)
        sizes.append(size)
    # Process start to first output, as the sum of its parts measured here: the runtime's import in CPU
    # seconds (this worker may have been started while exports ran: its wall time would be theirs too),
    # then the load and the first size's prepare, compile and first call, each timed with nothing else running.
    extra: dict = {"runtime_import_cpu_s": state["import_cpu_s"]}
    if state.get("build_cache"):  # the reference's import built the target reading the build cache: said
        extra["target_build_cache"] = state["build_cache"]
    if state.get("exported"):  # exports ran in this process before its load (`_export`): said
        extra["exported_before_load"] = list(state["exported"])
        extra["exports_resident_bytes"] = state["exports_resident_bytes"]
    first = next((s for s in sizes if s.status is Status.OK), None)
    if first is not None:
        extra["process_start_to_first_output_s"] = state["import_cpu_s"] + state["load_s"] + sum(
            t or 0.0 for t in (first.prepare_s, first.compile_s, first.first_call_s))
        extra["process_start_how"] = "runtime import (CPU s) + load + first prepare, compile and call" + (
            " (the target's factory built from the build cache: its initializers' programs read, not compiled)"
            if state.get("build_cache", {}).get("hits") else "")
    result = BenchResult(load_s=state["load_s"], sizes=sizes, memory={**state["memory"], **memory_now()},
                         artifact_bytes=state["artifact_bytes"], runner=runner.describe(), config=config.to_json(),
                         process="worker (paired)", extra=extra)
    return ColdStart(result)


def _time(state: dict, request: TimeSlice) -> Samples:
    import numpy as np


    state["stage"] = "bench"
    if not 0 <= request.size < len(state.get("prepared", [])) or state["prepared"][request.size] is None:
        raise ValueError(f"asked to time size {request.size}, which has no feed")
    prepared = state["prepared"][request.size]
    runner = state["runner"]
    config = BenchConfig(warmup_iters=RE_WARM_CALLS, warmup_time=0.0, min_iters=request.min_calls,
                         bench_time=request.seconds, max_iters=request.max_calls)
    # planted: the benchmarks' slowdown, never inside a runtime's own clock (time_own_calls)
    times, stopped = time_runner(runner, prepared, config, planted(lambda: runner.run_prepared(prepared)))
    state["slices"] += 1
    path = state["out"] / f"slice-{state['slices']:05d}.npy"
    np.save(path, times)
    return Samples(str(path), int(times.size), stopped)


def peak_gflops() -> PeakFigure:
    """The machine's float32 matmul throughput through XLA here: what compute-bound models are measured against."""
    import jax
    import numpy as np


    a = jax.device_put(np.random.default_rng(0).standard_normal((PEAK_N, PEAK_N), dtype=np.float32))
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    times, _ = time_calls(lambda: jax.block_until_ready(f(a)),
                          BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=5, bench_time=0.5, max_iters=200))
    best = float(np.min(times)) / 1e9
    return PeakFigure(2 * PEAK_N**3 / best / 1e9,
                      f"float32 {PEAK_N}x{PEAK_N} matmul through XLA (jax.jit) on {a.devices().pop().platform}, "
                      f"best of {times.size} calls")


def _bytes(path: str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _answer(protocol, message: Any) -> None:
    protocol.write(encode(message) + "\n")
    protocol.flush()
