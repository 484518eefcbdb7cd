"""The Python harness under load against a bare C loop on the same runtime: ONNX Runtime, Offline scenario.

For one ONNX artifact, alternate rounds of (a) `multiexport load --scenario offline` on it (the harness: a serve
worker, one Python thread per lane calling ONNX Runtime's run_with_iobinding, the runner's throughput
configuration) and (b) `ort_run --load-lanes N` (backends/onnx/csrc/ort_run.c: N pthreads calling RunWithBinding on
one session, the same configuration: threads/N intra-op threads each, spinning off), both with the same threads,
lanes and seconds, so the machine's noise hits both alike. Prints each side's calls/s per round and the ratio
harness / C (median and range over the rounds): how much of the runtime's rate the Python harness keeps.

Run: `.venv/bin/python -m benchmarks.load_overhead ARTIFACT_DIR [--threads 2] [--lanes 2] [--seconds 2] [--rounds 5]`
(ARTIFACT_DIR: an ONNX artifact, e.g. a compare's OUT/onnx).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from multiexport.measure.load import LoadConfig
from multiexport.native.build import build
from multiexport.run.load import measure_load
from multiexport.run.worker import thread_env


def harness_rate(artifact: Path, threads: int, lanes: int, seconds: float) -> tuple[float, dict]:
    results = measure_load([("onnx", artifact)], LoadConfig(scenario="offline", lanes=lanes, threads=threads,
                                                             seconds=seconds, rounds=1))
    row = results.rows[0]
    if not row.ok:
        raise SystemExit(f"harness: {row.status}: {row.reason}")
    point = row.offline[0]
    return (point.samples_per_s or 0.0) / (point.batch or 1), row.throughput_config


def c_rate(program: Path, artifact: Path, threads: int, lanes: int, seconds: float) -> dict:
    import os

    proc = subprocess.run([str(program), "--artifact", str(artifact), "--inputs", str(artifact / "inputs"),
                           "--threads", str(threads), "--load-lanes", str(lanes), "--load-seconds", str(seconds),
                           "--warmup", "3", "--no-outputs"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **thread_env(threads)})
    if proc.returncode != 0:
        raise SystemExit(f"ort_run: {proc.stderr.strip()[-500:]}")
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    program = build("ort_run")
    harness, native, ratios = [], [], []
    config: dict = {}
    for i in range(args.rounds):
        order = ("harness", "c") if i % 2 == 0 else ("c", "harness")
        got = {}
        for side in order:
            if side == "harness":
                got[side], config = harness_rate(args.artifact, args.threads, args.lanes, args.seconds)
            else:
                got[side] = c_rate(program, args.artifact, args.threads, args.lanes, args.seconds)["calls_per_s"]
        harness.append(got["harness"])
        native.append(got["c"])
        ratios.append(got["harness"] / got["c"])
        print(f"round {i + 1}: harness {got['harness']:,.0f} calls/s, C loop {got['c']:,.0f} calls/s, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(json.dumps({"artifact": str(args.artifact), "threads": args.threads, "lanes": args.lanes,
                      "seconds": args.seconds, "rounds": args.rounds, "harness_config": config,
                      "harness_calls_per_s": statistics.median(harness), "c_calls_per_s": statistics.median(native),
                      "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)},
                     indent=1))


if __name__ == "__main__":
    main()
