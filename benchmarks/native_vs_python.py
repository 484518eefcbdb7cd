"""Per-call latency of each artifact in its Python runner vs its native, Python-free consumer, side by side.

For each model and backend: export once, then alternate rounds of (a) the harness timing the backend's
Runner.run_prepared (what `compare` reports) and (b) the native program timing single calls inside itself
(`multiexport native --iters`: PJRT C API, TF C API, ONNX Runtime C API, iree-benchmark-module), so machine
noise hits both alike. The ratio Python p50 / native p50 is what the Python binding costs per call. Every
runtime gets the same thread count.

Run: `.venv/bin/python benchmarks/native_vs_python.py [--models seed,mlp,transformer] [--rounds 5]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.exporting import RunOptions
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.measure.bench import BenchConfig, summarize, time_calls
from multiexport.native.run import run as native_run

BACKENDS = ("xla", "savedmodel", "iree")


def measure(model: str, backend: str, rounds: int, seconds: float, calls: int, threads: int) -> dict:
    target = examples.transformer() if model == "transformer" else getattr(examples, model)()
    sig = build_signature(target)
    feed = sig.example_feed()
    with tempfile.TemporaryDirectory() as tmp:
        artifact = get_backend(backend).export(target.fn, sig, Path(tmp) / model)
        runner = get_backend(backend).load(artifact.directory, RunOptions(threads=threads))
        prepared = runner.prepare(feed)
        config = BenchConfig(warmup_iters=20, warmup_time=0.05, min_iters=20, bench_time=seconds)
        python_ns, native_p50 = [], []
        for _ in range(rounds):
            python_ns += list(time_calls(lambda: runner.run_prepared(prepared), config)[0])
            native_p50.append(native_run(artifact.directory, feed, iters=calls, warmup=20, threads=threads).timing["median_ms"])
        stats = summarize(np.asarray(python_ns))
    return {"model": model, "backend": backend, "python_p50_ms": stats.p50_ms, "python_calls": stats.n,
            "native_p50_ms": statistics.median(native_p50), "native_calls": rounds * calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp,transformer")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3, help="Python timed loop per round")
    parser.add_argument("--calls", type=int, default=300, help="native timed calls per round")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for every runtime (default: 1)")
    args = parser.parse_args()
    print("| model | backend | native consumer | Python p50 (us) | native p50 (us) | Python / native |")
    print("|---|---|---|---|---|---|")
    consumer = {"xla": "PJRT C API", "savedmodel": "TF C API", "iree": "iree-benchmark-module",
                "onnx": "ONNX Runtime C API", "openvino": "OpenVINO C API"}
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            r = measure(model, backend, args.rounds, args.seconds, args.calls, args.threads)
            print(f"| {model} | {backend} | {consumer[backend]} | {r['python_p50_ms'] * 1e3:.1f} | "
                  f"{r['native_p50_ms'] * 1e3:.1f} | {r['python_p50_ms'] / r['native_p50_ms']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
