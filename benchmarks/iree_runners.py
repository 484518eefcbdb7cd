"""IREE's two runners on the same artifact: the Python runner (iree.runtime, what `load` returns) vs native
`iree-benchmark-module`, side by side in one run.

For each model: export once, then alternate rounds of (a) the harness timing `IreeRunner.run_prepared`
(`bench.time_calls`: wall time of each call), (b) `iree-benchmark-module` timing single calls
(`--benchmark_min_time=1x`, one call per repetition) and (c) `iree-benchmark-module` as usually run
(mean wall time per call over a timed loop), so machine noise hits all three alike. Like is compared
with like: Python p50 / native p50 of single calls, Python mean / native loop mean. The gap is what the
Python binding costs per call (a VmVariantList for the results, the trip through the binding).

Run: `.venv/bin/python benchmarks/iree_runners.py [--models mlp,transformer] [--rounds 8] [--seconds 0.5]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.backends.iree import IreeBackend
from multiexport.backends.iree.native import BENCH_TOOL, find_native_tool, native_benchmark
from multiexport.measure.bench import BenchConfig, summarize, time_calls
from multiexport.signature import build_signature


def measure(model: str, rounds: int, seconds: float, single_calls: int) -> dict:
    target = getattr(examples, model)()
    sig = build_signature(target)
    feed = sig.example_feed()
    with tempfile.TemporaryDirectory() as tmp:
        artifact = IreeBackend().export(target.fn, sig, Path(tmp) / model)
        runner = IreeBackend().load(artifact.directory)
        prepared = runner.prepare(feed)
        config = BenchConfig(warmup_iters=20, warmup_time=0.05, min_iters=20, bench_time=seconds)
        python_ns, native_calls_ms, native_loop_ms = [], [], []
        for _ in range(rounds):
            python_ns += list(time_calls(lambda: runner.run_prepared(prepared), config)[0])
            native_calls_ms += native_benchmark(artifact.directory, feed, repetitions=single_calls,
                                                single_calls=True)["real_time_ms"]
            native_loop_ms += native_benchmark(artifact.directory, feed, repetitions=1, min_time_s=seconds)["real_time_ms"]
        stats = summarize(np.asarray(python_ns))
    return {
        "model": model, "python_p50_ms": stats.p50_ms, "python_mean_ms": stats.mean_ms, "python_calls": stats.n,
        "native_p50_ms": statistics.median(native_calls_ms), "native_calls": len(native_calls_ms),
        "native_loop_mean_ms": statistics.median(native_loop_ms), "native_loops": len(native_loop_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,transformer")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=0.5, help="time per timed loop per round")
    parser.add_argument("--single-calls", type=int, default=300, help="native single calls per round")
    args = parser.parse_args()
    print(f"native tool: {find_native_tool(BENCH_TOOL)}")
    print(f"{'model':>12} {'py p50 us':>10} {'native p50 us':>14} {'ratio':>6}   "
          f"{'py mean us':>11} {'native loop mean us':>20} {'ratio':>6}   {'py calls':>9} {'native calls':>13}")
    for model in args.models.split(","):
        r = measure(model, args.rounds, args.seconds, args.single_calls)
        print(f"{model:>12} {r['python_p50_ms'] * 1e3:10.2f} {r['native_p50_ms'] * 1e3:14.2f} "
              f"{r['python_p50_ms'] / r['native_p50_ms']:6.2f}   {r['python_mean_ms'] * 1e3:11.2f} "
              f"{r['native_loop_mean_ms'] * 1e3:20.2f} {r['python_mean_ms'] / r['native_loop_mean_ms']:6.2f}   "
              f"{r['python_calls']:9d} {r['native_calls']:13d}")


if __name__ == "__main__":
    main()
