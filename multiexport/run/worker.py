"""Worker process: export a target, or load one artifact from disk (or the jax.jit reference) and run it.

    python -m multiexport.run.worker export TARGET BACKEND ARTIFACT_DIR OUT_DIR [--options JSON]
                                            [--then BACKEND ARTIFACT_DIR OUT_DIR OPTIONS_JSON]...
                                            [--handoff DIR] [--expected NPZ]
    python -m multiexport.run.worker run ARTIFACT_DIR OUT_DIR [--parity-feeds DIR] [--bench-feeds DIR --bench-config JSON]
    python -m multiexport.run.worker reference TARGET OUT_DIR [--bench-feeds DIR --bench-config JSON]
    python -m multiexport.run.worker devices BACKEND DEVICE OUT_DIR
    python -m multiexport.run.worker serve run|reference SOURCE OUT_DIR --bench-feeds DIR   (see run.serve)

The artifact's worker never sees the original function: what it computes comes from the directory alone.
Cold start is measured first (load, compile, first call), then steady-state latency per batch size, then
the parity feeds. Results land in OUT_DIR: NNNN.npz outputs per parity feed, bench.json / export.json,
or error.json ({category, message}) with exit code 3, so the parent can tell a clean error from a crash
(a signal) or a hang (timeout).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..exporting.registry import get_backend
from ..files import write_text_atomic
from ..files.npz import load_npz, save_npz
from ..files.temporary import is_temporary
from ..leaves.factory_cache import ENV, off_in_timed_worker
from ..measure.bench import BenchConfig, bench_sizes, directory_bytes, memory_now
from ..results import BenchResult
from ..system.exits import target_cannot_exit
from ..system.process import die_with_parent
from .export_worker import export_main
from .messages import DeviceStatus, Loaded, decode, encode, read_bench_index
from .serve import peak_gflops, serve_main
from .worker_io import CLEAN_FAILURE, add_register_option, load_runner, register_entries, write_failure


def main(argv: list[str] | None = None) -> int:
    import signal

    # The parent starts workers with its stop signals held back, and the mask is inherited.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    argv = sys.argv[1:] if argv is None else argv

    die_with_parent()
    _exit_with_parent(argv)
    if argv and argv[0] != "export":
        off_in_timed_worker()  # what it compiles must cost what it costs in a fresh process

    modes = {"export": export_main, "run": run_main, "reference": run_main, "devices": devices_main, "serve": serve_main}
    if not argv or argv[0] not in modes:
        print(f"usage: python -m multiexport.run.worker {{{','.join(modes)}}} ...", file=sys.stderr)
        return 2
    with target_cannot_exit():  # the target's os._exit is its export's failure, reported, not a silent exit
        return modes[argv[0]](argv)


def _exit_with_parent(argv: list[str], interval: float = 1.0) -> None:
    """Die when the process that started this worker dies, where the kernel cannot be asked to.

    On Linux `system.process.die_with_parent` has the kernel kill this worker when its parent ends (even a worker
    busy in a C call that holds the GIL, which no thread of its own could stop); the next multiexport command
    removes the temporaries it could not (files.temporary). Elsewhere, or for a worker started by hand, a
    daemon thread notices the re-parenting, removes the temporaries and kills the worker's group; one wake-up
    a second costs a timed loop nothing measurable. (The parent thread that started the worker waits for
    it, so PR_SET_PDEATHSIG, which fires when that *thread* exits, never fires early.)
    """
    import shutil
    import signal
    import threading


    parent = os.getppid()
    # The supervisor's temporary directories this worker was given (an argument, or the directory holding
    # one; its $TMPDIR), and the factory cache of the compare that started it: with the supervisor gone, nobody
    # else would remove them. Only directories carrying multiexport's mark: an argument may lie in the user's --out.
    given = [a for a in argv if a and not a.startswith("-")]
    given += [os.environ[v] for v in (ENV, "TMPDIR") if os.environ.get(v)]  # its factory cache, its own $TMPDIR
    owned = {c for a in given for c in (Path(a), Path(a).parent) if is_temporary(c)}

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                for directory in owned:
                    shutil.rmtree(directory, ignore_errors=True)
                if os.getpgrp() == os.getpid():  # a session of its own: it and what it started in its group
                    os.killpg(os.getpid(), signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="multiexport-parent-watch", daemon=True).start()


def devices_main(argv: list[str]) -> int:
    """Write status.json {ok, reason} for BACKEND on DEVICE: the runtime's own answer, in this throwaway process."""
    parser = argparse.ArgumentParser(prog="python -m multiexport.run.worker devices")
    parser.add_argument("mode")
    parser.add_argument("backend")
    parser.add_argument("device")
    parser.add_argument("out", type=Path)
    add_register_option(parser)
    args = parser.parse_args(argv)

    register_entries(args.register)
    try:
        status = get_backend(args.backend).device_status(args.device)
        answer = DeviceStatus(status.ok, status.reason)
    except Exception as exc:  # a runtime that fails while probing cannot use the device
        answer = DeviceStatus(False, f"{type(exc).__name__}: {exc}")
    write_text_atomic(args.out / "status.json", encode(answer))
    return 0


def run_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m multiexport.run.worker run|reference")
    parser.add_argument("mode", choices=["run", "reference"])
    parser.add_argument("source", help="artifact directory (run) or TARGET (reference)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--parity-feeds", type=Path)
    parser.add_argument("--bench-feeds", type=Path, help="directory with index.json [BenchFeed] and .npz feeds")
    parser.add_argument("--bench-config", default="{}", help="BenchConfig as JSON (run.messages' codec)")
    parser.add_argument("--spawned-at", type=float, help="parent's time.time() when it started this process")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--trust-artifact", action="store_true")
    parser.add_argument("--peak", action="store_true", help="also measure the machine's float32 matmul peak")
    add_register_option(parser)
    args = parser.parse_args(argv)
    stage, backend = "load", None
    try:
        register_entries(args.register)
        memory_start = memory_now()
        t0 = time.perf_counter()
        runner, backend = load_runner(args)
        load_s = time.perf_counter() - t0
        memory_loaded = memory_now()

        if args.bench_feeds:
            stage = "bench"
            config = decode(BenchConfig, args.bench_config, "--bench-config")
            index = read_bench_index(args.bench_feeds)
            feeds = [(e.batch, load_npz(args.bench_feeds / e.file) if e.file else None) for e in index]
            unsupported = {e.batch: e.reason for e in index if e.reason}
            first_output: dict[str, float] = {}
            sizes = bench_sizes(runner, feeds, config, on_first_output=lambda: first_output.setdefault("at", time.time()),
                                unsupported=unsupported)
            extra = {}
            if args.spawned_at and "at" in first_output:
                extra["process_start_to_first_output_s"] = first_output["at"] - args.spawned_at
            if hasattr(runner, "flops"):
                for size, (_, feed) in zip(sizes, feeds):
                    if feed is not None and size.latency is not None:
                        size.flops = runner.flops(feed)
                        if size.flops:
                            size.gflops_per_s = size.flops / (size.latency.p50_ms / 1e3) / 1e9
            if args.peak:
                measured = peak_gflops()
                extra.update(peak_gflops=measured.gflops, peak_how=measured.how)
            result = BenchResult(
                load_s=load_s, sizes=sizes,
                memory={"start_rss_bytes": memory_start["rss_bytes"], "after_load_rss_bytes": memory_loaded["rss_bytes"],
                        **memory_now()},
                artifact_bytes=directory_bytes(args.source) if args.mode == "run" else None,
                runner=runner.describe(), config=config.to_json(), extra=extra,
            )
            write_text_atomic(args.out / "bench.json", encode(result))

        if args.parity_feeds:
            stage = "run"
            for feed_path in sorted(args.parity_feeds.glob("*.npz")):
                save_npz(args.out / feed_path.name, runner(load_npz(feed_path)))
        write_text_atomic(args.out / "run.json", encode(Loaded(load_s, runner.describe())))
    except Exception as exc:  # reported to the parent as data, never as a traceback on its terminal
        write_failure(args.out, exc, stage, backend)
        return CLEAN_FAILURE
    return 0


def thread_env(threads: int) -> dict[str, str]:
    """Environment for a worker whose runtimes must use `threads` threads (set before they start).

    XLA's CPU client sizes its Eigen pool from PJRT_NPROC when it is created (measured with jaxlib 0.10.2: the
    often-quoted XLA_FLAGS intra_op_parallelism_threads is accepted and ignored); TF, ONNX Runtime and IREE
    take the number in code (RunOptions.threads); OMP_NUM_THREADS covers OpenMP users among them.
    """
    return {"PJRT_NPROC": str(threads), "OMP_NUM_THREADS": str(threads)}

if __name__ == "__main__":
    from multiexport.system.exits import exit_now

    exit_now(main())
