"""What Ray adds to each task of a sweep, measured: the same trivial command (a bare `python -c pass`,
started through multiexport's supervisor as a compare is) run directly and as a Ray task, alternated.

    python -m benchmarks.sweep_overhead [--runs 30]

Starts a one-node local Ray cluster (2 CPUs, session files in a temporary directory, removed after),
prints per-task medians and their difference: the per-task overhead of the Ray executor, to set beside a
compare's tens of seconds. Needs `pip install 'multiexport[sweep]'`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from multiexport.system.process import run_command

CMD = [sys.executable, "-c", "pass"]


def _direct() -> float:
    t0 = time.perf_counter()
    run_command(CMD, timeout=60)
    return time.perf_counter() - t0


def _on_node() -> None:
    run_command(CMD, timeout=60)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    temp = tempfile.mkdtemp(prefix="mxray")
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp, configure_logging=False)
    init_s = time.perf_counter() - t0
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_on_node)
        ray.get(remote.remote())  # the first task starts a Ray worker process: timed apart, below
        direct, on_ray = [], []
        for _ in range(args.runs):
            direct.append(_direct())
            t0 = time.perf_counter()
            ray.get(remote.remote())
            on_ray.append(time.perf_counter() - t0)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    d, r = statistics.median(direct), statistics.median(on_ray)
    print(f"ray.init (a local cluster): {init_s:.2f} s")
    print(f"`python -c pass` through the supervisor, {args.runs} runs each, alternated:")
    print(f"  direct:   median {d * 1e3:.1f} ms (min {min(direct) * 1e3:.1f}, max {max(direct) * 1e3:.1f})")
    print(f"  Ray task: median {r * 1e3:.1f} ms (min {min(on_ray) * 1e3:.1f}, max {max(on_ray) * 1e3:.1f})")
    print(f"  per-task overhead of Ray: {(r - d) * 1e3:.1f} ms (median difference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
