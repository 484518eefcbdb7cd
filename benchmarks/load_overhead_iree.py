"""IREE's Python lanes against IREE's own C loop, one lane, Offline: how much of the runtime's rate the harness keeps.

IREE's wheels ship no C API for a load loop of our own (`multiexport load` measures IREE in the Python lanes under
every driver), but their `iree-benchmark-module` is a C loop over one VM context: one invocation after another
(`--batch_size=1`; its larger batch sizes are for dispatch benchmarks compiled with a repeat count, and for a whole
model they do not run N invocations per batch: see docs/load.md). So for one lane the Python lanes can be measured
against it: each round runs, in an order alternating between rounds, (a) `multiexport load --scenario offline
--driver python --lanes 1 --threads T` on the artifact and (b) `iree-benchmark-module` with the artifact's own
native command (its device, `--task_topology_max_group_count=T`, the same inputs), `--batch_size=1` for `--seconds`,
and prints each side's calls/s per round and the ratio Python / C (median and range over the rounds).

Run: `.venv/bin/python -m benchmarks.load_overhead_iree ARTIFACT_DIR [--threads 1] [--seconds 1] [--rounds 5]`
(ARTIFACT_DIR: an IREE artifact, e.g. a compare's OUT/iree).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from multiexport.exporting.manifest import Manifest
from multiexport.measure.load import LoadConfig
from multiexport.native.run import command
from multiexport.run.load import measure_load


def python_rate(artifact: Path, threads: int, seconds: float) -> float:
    config = LoadConfig(scenario="offline", lanes=1, threads=threads, seconds=seconds, rounds=1, driver="python")
    row = measure_load([("iree", artifact)], config).rows[0]
    if not row.ok:
        raise SystemExit(f"harness: {row.status}: {row.reason}")
    return (row.offline[0].samples_per_s or 0.0) / (row.offline[0].batch or 1)


def c_rate(artifact: Path, threads: int, seconds: float, work: Path) -> float:
    """iree-benchmark-module's invocations per second, one after another for `seconds` (Google Benchmark's
    real time per iteration, one invocation each)."""
    argv, env = command(artifact, inputs_dir=str(artifact / "inputs"), outputs_dir=str(work), iters=1,
                        threads=threads)
    argv = [a.replace("--benchmark_min_time=1x", f"--benchmark_min_time={seconds:g}s") for a in argv]
    proc = subprocess.run([*argv, "--batch_size=1"], cwd=artifact, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"iree-benchmark-module: {proc.stderr.strip()[-500:]}")
    rows = [r for r in json.loads((work / "benchmark.json").read_text())["benchmarks"]
            if r.get("run_type") == "iteration"]
    seconds_per_call = rows[0]["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[rows[0]["time_unit"]]
    return 1.0 / seconds_per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if Manifest.read(args.artifact).backend != "iree":
        raise SystemExit(f"{args.artifact}: not an IREE artifact")
    work = Path(tempfile.mkdtemp(prefix="load-overhead-iree-"))
    figures: dict[str, list[float]] = {"python": [], "c": []}
    try:
        for i in range(args.rounds):
            for side in (("python", "c") if i % 2 == 0 else ("c", "python")):
                rate = (python_rate(args.artifact, args.threads, args.seconds) if side == "python"
                        else c_rate(args.artifact, args.threads, args.seconds, work))
                figures[side].append(rate)
            print(f"round {i + 1}: python {figures['python'][-1]:,.0f} calls/s, c {figures['c'][-1]:,.0f} calls/s",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [p / c for p, c in zip(figures["python"], figures["c"])]
    print(json.dumps({"artifact": str(args.artifact), "threads": args.threads, "seconds": args.seconds,
                      "load_average": os.getloadavg(), "python_calls_per_s": statistics.median(figures["python"]),
                      "c_calls_per_s": statistics.median(figures["c"]),
                      "python_ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}},
                     indent=1))


if __name__ == "__main__":
    main()
