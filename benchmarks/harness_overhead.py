"""Does the harness add overhead? Its p50 vs a bare hand-written loop on the same runtime, same process.

For each backend: export a model, load it once, then alternate blocks of (a) a bare loop calling the
runtime directly, written by hand per backend, and (b) the harness (`bench.time_calls` over
`Runner.run_prepared`), so machine noise hits both alike. Goal: harness p50 within 5% of bare p50.

Run: `.venv/bin/python benchmarks/harness_overhead.py [--models seed,mlp] [--backends xla,...] [--rounds 10]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.bench import BenchConfig, time_calls
from multiexport.registry import get_backend
from multiexport.signature import build_signature


def bare_xla(directory: Path, feed_arrays):
    import jax

    exported = jax.export.deserialize(bytearray((directory / "model.jax_exported").read_bytes()))
    call = jax.jit(exported.call)
    args = [jax.device_put(a) for a in feed_arrays]
    jax.block_until_ready(call(*args))
    return lambda: jax.block_until_ready(call(*args))


BARE = {"xla": bare_xla}


def bare_loop(call, n: int) -> list[int]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp")
    parser.add_argument("--backends", default=",".join(BARE))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300, help="calls per block")
    args = parser.parse_args()
    config = BenchConfig(warmup_iters=20, warmup_time=0.0, min_iters=args.calls, bench_time=0.0, max_iters=args.calls)
    print(f"{'backend':>10} {'model':>6} {'bare p50 us':>12} {'harness p50 us':>15} {'ratio':>7}")
    for backend_name in args.backends.split(","):
        backend = get_backend(backend_name)
        if not backend.available().ok:
            print(f"{backend_name:>10}: unavailable ({backend.available().reason})")
            continue
        for model in args.models.split(","):
            target = getattr(examples, model)()
            sig = build_signature(target)
            with tempfile.TemporaryDirectory() as tmp:
                artifact = backend.export(target.fn, sig, Path(tmp) / "a")
                feed = sig.example_feed()
                runner = backend.load(artifact.directory)
                prepared = runner.prepare(feed)
                runner.run_prepared(prepared)
                ordered = [feed[leaf.name] for leaf in artifact.manifest.inputs]
                bare = BARE[backend_name](artifact.directory, ordered)
                bare_times, harness_times = [], []
                for _ in range(args.rounds):
                    bare_times += bare_loop(bare, args.calls)
                    harness_times += list(time_calls(lambda: runner.run_prepared(prepared), config))
                b, h = statistics.median(bare_times) / 1e3, statistics.median(harness_times) / 1e3
                print(f"{backend_name:>10} {model:>6} {b:12.2f} {h:15.2f} {h / b:7.3f}")


if __name__ == "__main__":
    main()
