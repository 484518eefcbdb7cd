"""The harness under load against a bare C loop on the same runtime (ONNX Runtime, TF, LiteRT, OpenVINO, PJRT), Offline.

For one artifact whose native consumer has the load loops (ONNX, SavedModel, LiteRT, OpenVINO, XLA), each round runs,
in an order rotating from round to round, (a) `multiexport load --scenario offline --driver python` on it (a serve
worker, one Python thread per lane calling the runner in its throughput configuration: for ONNX Runtime
run_with_iobinding, for LiteRT one Interpreter per lane, for OpenVINO an infer request per lane under the THROUGHPUT
hint), (b) the same with `--driver native` (the harness hands the loop to the native consumer: by construction the C
loop, run through the harness's own path, which writes the feed, starts the program and reads its figures) and (c)
the bare program outside the harness (`ort_run`, `tf_run`, `lite_run`, `ov_run` or `pjrt_run` with `--load-lanes
N`: common/mx_load.h's pthreads, each consumer's lanes in the Python runner's configuration), all with the same
threads, lanes and seconds, so the machine's noise hits them alike. Prints each side's calls/s per round and the
ratios harness / C (median and range over the rounds): how much of the runtime's rate each harness driver keeps.
`multiexport load`'s default driver, auto, is side (b) for every format measured here (their consumers have the C
loop), side (a) for a format whose consumer has none (IREE) or on another device.

Run: `.venv/bin/python -m benchmarks.load_overhead ARTIFACT_DIR [--threads 2] [--lanes 2] [--seconds 2] [--rounds 5]`
(ARTIFACT_DIR: such an artifact, e.g. a compare's OUT/onnx or OUT/litert).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from multiexport.exporting.manifest import Manifest
from multiexport.files.npz import load_npz
from multiexport.measure.load import LoadConfig
from multiexport.run.load import measure_load
from multiexport.run.load_native import close, native_loop, native_offline


def harness_rate(artifact: Path, threads: int, lanes: int, seconds: float, driver: str) -> tuple[float, dict]:
    results = measure_load([("artifact", artifact)], LoadConfig(scenario="offline", lanes=lanes, threads=threads,
                                                                 seconds=seconds, rounds=1, driver=driver))
    row = results.rows[0]
    if not row.ok:
        raise SystemExit(f"harness: {row.status}: {row.reason}")
    point = row.offline[0]
    return (point.samples_per_s or 0.0) / (point.batch or 1), row.throughput_config


def c_rate(artifact: Path, threads: int, lanes: int, seconds: float, work: Path) -> float:
    """The bare program's Offline loop, outside the harness (its command as `multiexport native` builds it)."""
    loop = native_loop(artifact, load_npz(artifact / "example_inputs.npz"), threads, work)
    try:
        calls, span, _ = native_offline(loop, lanes, seconds, 600)
    finally:
        close(loop)
    return calls / span


def arguments(description: str) -> argparse.ArgumentParser:
    """The artifact, threads, lanes, seconds and rounds every C-loop comparison here takes (load_overhead_cpu too)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    return parser


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    Manifest.read(args.artifact)  # an artifact, before any timing
    work = Path(tempfile.mkdtemp(prefix="load-overhead-"))
    sides = ("python", "native", "c")
    figures: dict[str, list[float]] = {side: [] for side in sides}
    configs: dict[str, dict] = {}
    try:
        for i in range(args.rounds):
            for side in sides[i % 3:] + sides[:i % 3]:
                if side == "c":
                    figures[side].append(c_rate(args.artifact, args.threads, args.lanes, args.seconds, work))
                else:
                    rate, configs[side] = harness_rate(args.artifact, args.threads, args.lanes, args.seconds, side)
                    figures[side].append(rate)
            print(f"round {i + 1}: " + ", ".join(f"{side} {figures[side][-1]:,.0f} calls/s" for side in sides),
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"artifact": str(args.artifact), "threads": args.threads, "lanes": args.lanes, "seconds": args.seconds,
           "rounds": args.rounds, "configs": configs, "load_average": os.getloadavg()}
    for side in sides:
        out[f"{side}_calls_per_s"] = statistics.median(figures[side])
    for side in ("python", "native"):
        ratios = [h / c for h, c in zip(figures[side], figures["c"])]
        out[f"{side}_ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
