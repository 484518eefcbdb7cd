"""Cost of named leaves: `multiexport.describe` (flatten + trace + XLA binding) vs a bare jax.export.

Both are timed in this one process, alternating, so machine noise hits both alike; the ratio is the
figure to read. Run: `.venv/bin/python benchmarks/signature_overhead.py [--repeats 20]`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

from multiexport import describe
from multiexport.examples import mlp, seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    for make in (seed, mlp):
        target = make()
        bare, named = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.export.export(jax.jit(target.fn))(*target.args, **target.kwargs)
            t1 = time.perf_counter()
            describe(target)
            t2 = time.perf_counter()
            bare.append(t1 - t0)
            named.append(t2 - t1)
        b, n = statistics.median(bare), statistics.median(named)
        print(f"{target.name:>6}: bare jax.export {b * 1e3:7.2f} ms   describe {n * 1e3:7.2f} ms   ratio {n / b:5.2f}x")


if __name__ == "__main__":
    main()
