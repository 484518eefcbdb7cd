"""Worker process: load one artifact from disk (or the jax.jit reference), benchmark it, run parity feeds.

    python -m multiexport.worker ARTIFACT_DIR OUT_DIR [--parity-feeds DIR] [--bench-feeds DIR --bench-config JSON]
    python -m multiexport.worker --reference TARGET OUT_DIR ...
    python -m multiexport.worker export TARGET BACKEND ARTIFACT_DIR OUT_DIR [--keep-unused] [--device gpu]
        [--external-weights auto|always|never]
    python -m multiexport.worker devices BACKEND DEVICE OUT_JSON

The artifact's worker never sees the original function: what it computes comes from the directory
alone. Cold start is measured first (load, compile, first call), then steady-state latency per batch
size, then the parity feeds run. Results land in OUT_DIR: NNNN.npz outputs per parity feed,
bench.json, or error.json ({category, message}) with exit code 3, so the parent can tell a clean
error from a crash (signal) or a hang (timeout).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import signal

    # The parent starts workers with SIGINT held back (comparison._sigint_deferred) and the mask is inherited.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export"]:
        return export_main(argv[1:])
    if argv[:1] == ["devices"]:
        return devices_main(argv[1:])
    return run_main(argv)


def devices_main(argv: list[str]) -> int:
    """Write {ok, reason} for BACKEND on DEVICE: the runtime's own answer, in this throwaway process."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m multiexport.worker devices")
    parser.add_argument("backend")
    parser.add_argument("device")
    parser.add_argument("out", type=Path)
    parser.add_argument("--register", action="append", default=[], metavar="NAME=module:Class")
    args = parser.parse_args(argv)
    from .manifest import write_text_atomic
    from .registry import get_backend, register

    for entry in args.register:
        name, _, locator = entry.partition("=")
        register(name, locator)
    try:
        status = get_backend(args.backend).device_status(args.device)
        data = {"ok": status.ok, "reason": status.reason}
    except Exception as exc:  # a runtime that fails while probing cannot use the device
        data = {"ok": False, "reason": f"{type(exc).__name__}: {exc}"}
    write_text_atomic(args.out, json.dumps(data))
    return 0


def export_main(argv: list[str]) -> int:
    """Export TARGET with BACKEND into ARTIFACT_DIR, isolated from the parent (and from other converters)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m multiexport.worker export")
    parser.add_argument("target")
    parser.add_argument("backend")
    parser.add_argument("artifact", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--keep-unused", action="store_true")
    parser.add_argument("--external-weights", default="auto")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--register", action="append", default=[], metavar="NAME=module:Class")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from .manifest import write_text_atomic

    try:
        from .api import export
        from .registry import register
        from .target import load_target

        for entry in args.register:
            name, _, locator = entry.partition("=")
            register(name, locator)
        from .signature import build_signature

        target = load_target(args.target)
        fingerprint = build_signature(target).fingerprint(target.fn)
        t0 = time.perf_counter()
        platforms = ("cpu", "cuda") if args.device == "gpu" else None
        export(target, args.artifact, args.backend, keep_unused=args.keep_unused, platforms=platforms,
               external_weights=args.external_weights)
        from .bench import memory_now

        write_text_atomic(args.out / "export.json", json.dumps({
            "seconds": time.perf_counter() - t0, "fingerprint": fingerprint,
            "peak_rss_bytes": memory_now()["peak_rss_bytes"]}))
    except Exception as exc:
        from .errors import MultiexportError

        category = getattr(exc, "category", "export-failed")
        message = str(exc) if isinstance(exc, MultiexportError) else f"{type(exc).__name__}: {exc}"
        write_text_atomic(args.out / "error.json", json.dumps({"category": category, "message": message}))
        return 3
    return 0


def run_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m multiexport.worker")
    parser.add_argument("artifact", type=Path, nargs="?", help="artifact directory (omit with --reference)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--reference", metavar="TARGET", help="benchmark jax.jit of this TARGET instead of an artifact")
    parser.add_argument("--parity-feeds", type=Path)
    parser.add_argument("--bench-feeds", type=Path, help="directory with index.json [{file, batch}] and .npz feeds")
    parser.add_argument("--bench-config", default="{}", help="BenchConfig fields as JSON")
    parser.add_argument("--spawned-at", type=float, help="parent's time.time() when it started this process")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--register", action="append", default=[], metavar="NAME=module:Class",
                        help="a backend the parent registered at run time")
    args = parser.parse_args(argv)
    if args.artifact is None and not args.reference:
        parser.error("give ARTIFACT_DIR or --reference TARGET")
    args.out.mkdir(parents=True, exist_ok=True)
    stage = "load"
    try:
        from .arrays_io import load_npz, save_npz
        from .bench import (
            BenchConfig,
            BenchResult,
            bench_sizes,
            directory_bytes,
            memory_now,
        )
        from .manifest import write_text_atomic
        from .registry import register

        for entry in args.register:
            name, _, locator = entry.partition("=")
            register(name, locator)
        memory_start = memory_now()
        t0 = time.perf_counter()
        runner = _load(args)
        load_s = time.perf_counter() - t0
        memory_loaded = memory_now()

        if args.bench_feeds:
            stage = "bench"
            config = BenchConfig(**json.loads(args.bench_config))
            index = json.loads((args.bench_feeds / "index.json").read_text())
            feeds = [(entry["batch"], load_npz(args.bench_feeds / entry["file"])) for entry in index]
            first_output: dict[str, float] = {}
            sizes = bench_sizes(runner, feeds, config, on_first_output=lambda: first_output.setdefault("at", time.time()))
            extra = {}
            if args.spawned_at and "at" in first_output:
                extra["process_start_to_first_output_s"] = first_output["at"] - args.spawned_at
            if hasattr(runner, "flops"):
                for size, (_, feed) in zip(sizes, feeds):
                    size.flops = runner.flops(feed)
                    if size.flops:
                        size.gflops_per_s = size.flops / (size.latency.p50_ms / 1e3) / 1e9
            result = BenchResult(
                load_s=load_s, sizes=sizes,
                memory={"start_rss_bytes": memory_start["rss_bytes"], "after_load_rss_bytes": memory_loaded["rss_bytes"],
                        **memory_now()},
                artifact_bytes=directory_bytes(args.artifact) if args.artifact else None,
                runner=runner.describe(), config=config.to_json(), extra=extra,
            )
            write_text_atomic(args.out / "bench.json", json.dumps(result.to_json(), indent=2))

        if args.parity_feeds:
            stage = "run"
            for feed_path in sorted(args.parity_feeds.glob("*.npz")):
                save_npz(args.out / feed_path.name, runner(load_npz(feed_path)))
    except Exception as exc:  # reported to the parent as data, never as a traceback on its terminal
        from .manifest import write_text_atomic

        message = f"{type(exc).__name__}: {exc}".strip()
        category = "out-of-memory" if isinstance(exc, MemoryError) else f"{stage}-failed"
        if getattr(exc, "category", "run-failed") != "run-failed":  # a typed cause, e.g. unsupported-dtype
            category = exc.category
        write_text_atomic(args.out / "error.json", json.dumps({"category": category, "message": message}))
        return 3
    return 0


def _load(args):
    if args.reference:
        from .reference import ReferenceRunner
        from .signature import build_signature
        from .target import load_target

        target = load_target(args.reference)
        return ReferenceRunner(target, build_signature(target), device=args.device)
    from .api import load

    return load(args.artifact, device=args.device)


if __name__ == "__main__":
    sys.exit(main())
