"""One run worker, start to end: an artifact (or the reference) run in a fresh process on parity feeds and
timed on bench feeds, its outputs and figures read back (`run_artifact`); what the paired workers reuse."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..files.npz import load_npz, save_npz
from ..results import BenchResult
from .messages import BenchFeed, encode, write_bench_index
from .worker import thread_env
from .workers import WorkerResult, run_worker, start_work_dir


@dataclass(frozen=True)
class ArtifactRun:
    """What a run worker gave back.

    outputs: per parity feed, output leaf name -> array (empty on failure).
    bench: its figures when it was timed, else None.
    failure: (category, reason) when it failed, else None.
    runner: the runner's own description (`Runner.describe()`).
    """

    outputs: list[dict[str, np.ndarray]]
    bench: BenchResult | None
    failure: tuple[str, str] | None
    runner: dict[str, Any]


def run_artifact(source: Sequence[str], feeds: Sequence[dict[str, np.ndarray]],
                 bench_feeds: Sequence[tuple[int | None, dict | None]], unsupported: dict, bench, device: str,
                 threads: int, timeout: float, peak: bool = False) -> ArtifactRun:
    """Run a fresh worker (`source` = ["run", DIR] or ["reference", TARGET]) on parity and bench feeds."""
    work = start_work_dir("worker")
    result: WorkerResult | None = None
    try:
        out = work / "out"
        out.mkdir()
        cmd = [*source, str(out), "--device", device, "--threads", str(threads)]
        if feeds:
            (work / "feeds").mkdir()
            for i, feed in enumerate(feeds):
                save_npz(work / "feeds" / f"{i:04d}.npz", feed)
            cmd += ["--parity-feeds", str(work / "feeds")]
        if bench and bench_feeds:
            write_bench_feeds(work / "bench", bench_feeds, unsupported)
            cmd += ["--bench-feeds", str(work / "bench"), "--bench-config", encode(bench)]
            if peak:
                cmd.append("--peak")
        cmd += ["--spawned-at", repr(time.time())]  # last, after the feeds are written: cold start starts here
        result = run_worker(cmd, out, timeout, expect="run.json", env=thread_env(threads))
        if result.failure:
            return ArtifactRun([], None, result.failure, {})
        outputs = [load_npz(out / f"{i:04d}.npz", "Worker output") for i in range(len(feeds))]
        return ArtifactRun(outputs, result.bench, None, result.run.runner if result.run is not None else {})
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def write_bench_feeds(directory, bench_feeds: Sequence[tuple[int | None, dict | None]], unsupported: dict) -> None:
    """The feeds to time as DIR/NNNN.npz and DIR/index.json (`messages.BenchFeed` rows: a size the runner
    cannot take has no file, and the reason)."""
    directory.mkdir(exist_ok=True)
    index = []
    for i, (batch, feed) in enumerate(bench_feeds):
        if batch in unsupported or feed is None:
            index.append(BenchFeed(None, batch, unsupported.get(batch, "not supported")))
            continue
        save_npz(directory / f"{i:04d}.npz", feed)
        index.append(BenchFeed(f"{i:04d}.npz", batch))
    write_bench_index(directory, index)
