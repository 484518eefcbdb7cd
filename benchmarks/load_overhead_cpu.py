"""CPU time per call of a C load loop against the Python lanes on the same artifact, Offline, alternating rounds.

On a machine shared with other work the calls per second of both sides move with the others' load (single rounds
differed by up to 3x here), but the CPU time a call costs moves much less: it is the work each side does per call,
which is what limits the rate when the lanes have the cores to themselves. Each round runs, in an order alternating
from round to round:

- the Python lanes in a fresh process with the serve worker's thread variables (run.worker's `thread_env`: PJRT_NPROC
  and OMP_NUM_THREADS set to the threads), built as `answer_load_run` builds them (the backend's own throughput lanes,
  one runner per lane where its runner is not shared across threads, else threads calling the one runner), each lane
  called once, then `measure.load.run_offline` with the process's CPU clock read around it;
- the bare program's loop (`native_loop`: the command `multiexport native` builds) twice, for `--seconds` / 4 and for
  `--seconds`, its CPU time read from the child's rusage: the difference between the two runs over the difference
  in calls is the loop's CPU per call (the program's start, load and compile cancel out).

Prints per round each side's calls/s and CPU us per call, then the medians and ranges; the ratio Python / C of the
CPU per call above 1 means the C loop does less work per call.

Run: `.venv/bin/python -m benchmarks.load_overhead_cpu ARTIFACT_DIR [--threads 2] [--lanes 2] [--seconds 2]
[--rounds 5]` (an artifact whose consumer has the loops: ONNX, SavedModel, LiteRT, OpenVINO, XLA).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.load_overhead import arguments
from multiexport.exporting.manifest import Manifest
from multiexport.files.npz import load_npz
from multiexport.run.load_native import close, native_loop, native_offline
from multiexport.run.worker import thread_env


def python_side(artifact: Path, threads: int, lanes: int, seconds: float) -> dict[str, float]:
    """In this process (started with the worker's thread variables): the Python lanes' Offline loop."""
    from multiexport.exporting.registry import get_backend
    from multiexport.measure.load import run_offline
    from multiexport.run.load_serve import default_lanes, separate_runners
    from multiexport.sdk import RunOptions

    manifest = Manifest.read(artifact)
    backend = get_backend(manifest.backend)
    runner = backend.load(artifact, RunOptions(device="cpu", threads=threads))
    feed = load_npz(artifact / "example_inputs.npz")
    own = getattr(runner, "throughput_lanes", None)
    if own is not None:
        calls, _ = own(feed, lanes)
    elif getattr(runner, "shared_across_threads", True):
        calls, _ = default_lanes(runner, lambda: runner.prepare(feed), lanes)
    else:
        calls, _ = separate_runners({"runner": runner, "backend": backend}, feed, lanes)
    for call in calls:
        call()
    start = time.process_time()
    count, span = run_offline(calls, seconds)
    cpu = time.process_time() - start
    return {"calls_per_s": count / span, "cpu_us_per_call": 1e6 * cpu / count}


def python_rate(artifact: Path, threads: int, lanes: int, seconds: float) -> dict[str, float]:
    env = {**os.environ, **thread_env(threads)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.load_overhead_cpu", str(artifact), "--python-side",
                           "--threads", str(threads), "--lanes", str(lanes), "--seconds", str(seconds)],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"python side: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def c_rate(artifact: Path, threads: int, lanes: int, seconds: float, work: Path) -> dict[str, float]:
    """The bare program's loop: CPU per call from a short and a long run (its start cancels out)."""
    loop = native_loop(artifact, load_npz(artifact / "example_inputs.npz"), threads, work)
    try:
        runs = []
        for length in (seconds / 4, seconds):
            before = _child_cpu()
            calls, span, _ = native_offline(loop, lanes, length, 900)
            runs.append((calls, span, _child_cpu() - before))
    finally:
        close(loop)
    (short_calls, _, short_cpu), (calls, span, cpu) = runs
    per_call = (cpu - short_cpu) / (calls - short_calls) if calls > short_calls else float("nan")
    return {"calls_per_s": calls / span, "cpu_us_per_call": 1e6 * per_call}


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--python-side", action="store_true", help="internal: run the Python lanes here, print JSON")
    args = parser.parse_args()
    Manifest.read(args.artifact)  # an artifact, before any timing
    if args.python_side:
        print(json.dumps(python_side(args.artifact.resolve(), args.threads, args.lanes, args.seconds)))
        return
    work = Path(tempfile.mkdtemp(prefix="load-overhead-cpu-"))
    figures: dict[str, list[dict[str, float]]] = {"python": [], "c": []}
    try:
        for i in range(args.rounds):
            for side in (("python", "c") if i % 2 == 0 else ("c", "python")):
                if side == "c":
                    figures[side].append(c_rate(args.artifact, args.threads, args.lanes, args.seconds, work))
                else:
                    figures[side].append(python_rate(args.artifact, args.threads, args.lanes, args.seconds))
            load = os.getloadavg()[0]
            print(f"round {i + 1} (load {load:.1f}): " + ", ".join(
                f"{side} {figures[side][-1]['calls_per_s']:,.0f} calls/s {figures[side][-1]['cpu_us_per_call']:.2f} "
                "us CPU/call" for side in figures), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for key in ("calls_per_s", "cpu_us_per_call"):
        for side, rows in figures.items():
            values = [row[key] for row in rows]
            print(f"{side} {key}: median {statistics.median(values):,.2f} [{min(values):,.2f}, {max(values):,.2f}]")
    ratios = [p["cpu_us_per_call"] / c["cpu_us_per_call"] for p, c in zip(figures["python"], figures["c"])]
    print(f"CPU per call, Python / C: median {statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]")


if __name__ == "__main__":
    main()
