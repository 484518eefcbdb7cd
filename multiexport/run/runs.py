"""One backend's run in a compare: the sizes its artifact supports, its run worker, its parity verdict.

An artifact that was built for some sizes only (a converter that could not keep a symbolic dimension)
is checked and timed at exactly those sizes: trials at other sizes are not fed to it (extra trials at
its own size are made instead, so its verdict rests on as much evidence as any other's), and batch sizes
it does not support get a `size-unsupported` entry, never a latency.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..files.npz import load_npz, save_npz
from ..results import BenchResult, Status
from ..results.schema import from_data
from .workers import WorkerResult, run_worker, start_work_dir


@dataclass
class ArtifactRun:
    """What a run worker gave back: outputs per parity feed, its figures, or why it failed."""

    outputs: list[dict[str, np.ndarray]]
    bench: BenchResult | None
    failure: tuple[str, str] | None
    runner: dict[str, Any]


def run_artifact(source: Sequence[str], feeds: Sequence[dict[str, np.ndarray]],
                 bench_feeds: Sequence[tuple[int | None, dict | None]], unsupported: dict, bench, device: str,
                 threads: int, timeout: float, peak: bool = False) -> ArtifactRun:
    """Run a fresh worker (`source` = ["run", DIR] or ["reference", TARGET]) on parity and bench feeds."""
    from .worker import thread_env

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
            cmd += ["--bench-feeds", str(work / "bench"), "--bench-config", json.dumps(bench.to_json())]
            if peak:
                cmd.append("--peak")
        cmd += ["--spawned-at", repr(time.time())]  # last, after the feeds are written: cold start starts here
        result = run_worker(cmd, out, timeout, expect="run.json", env=thread_env(threads))
        bench_data = result.data.get("bench.json")
        parsed = from_data(BenchResult, bench_data, "bench.json") if bench_data else None
        if result.failure:
            return ArtifactRun([], None, result.failure, {})
        outputs = [load_npz(out / f"{i:04d}.npz", "Worker output") for i in range(len(feeds))]
        return ArtifactRun(outputs, parsed, None, result.data.get("run.json", {}).get("runner", {}))
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def write_bench_feeds(directory, bench_feeds: Sequence[tuple[int | None, dict | None]], unsupported: dict) -> None:
    """The feeds to time as DIR/NNNN.npz and DIR/index.json [{file, batch}, or {file: null, batch, reason}]."""
    directory.mkdir(exist_ok=True)
    index = []
    for i, (batch, feed) in enumerate(bench_feeds):
        if batch in unsupported or feed is None:
            index.append({"file": None, "batch": batch, "reason": unsupported.get(batch, "not supported")})
            continue
        save_npz(directory / f"{i:04d}.npz", feed)
        index.append({"file": f"{i:04d}.npz", "batch": batch})
    (directory / "index.json").write_text(json.dumps(index))


def check_row(run, row, manifest) -> None:
    """Run `row`'s artifact on the trials it supports, time it, and give the row its verdict."""
    from ..measure.inputs import trial_at
    from ..measure.parity import check_parity, inputs_note
    from ..measure.plan import out_of_domain, supported, unsupported_reason
    from ..measure.reference import error_vs

    config = run.config
    fixed = manifest.fixed_sizes()
    indices = [i for i, t in enumerate(run.trials) if supported(t.dims, fixed)]
    trials = [run.trials[i] for i in indices]
    refs = [run.ref_outputs[i] for i in indices]
    excluded_names = {e.trial for e in run.excluded}
    excluded = [e for e in run.excluded if e.trial in {t.name for t in trials}]
    if fixed and config.inputs is None:  # as much evidence at the artifact's own size as others get at theirs
        rng = np.random.default_rng(config.seed + 7)
        setting = {d: sizes[0] for d, sizes in fixed.items()}
        label = " ".join(f"{d}={v}" for d, v in setting.items())
        for t in range(config.trials):
            extra = trial_at(run.sig.inputs, run.sig.example_feed(), setting, rng, f"random{t} {label}",
                             config.val_ranges)
            trials.append(extra)
            refs.append(run.ref_runner(extra.feed))
        for e in out_of_domain([run.trials[0], *trials[len(indices):]], [run.ref_outputs[0], *refs[len(indices):]]):
            excluded.append(e)
            excluded_names.add(e.trial)
    skipped = [t.name for t in run.trials if not supported(t.dims, fixed)]
    unsupported = {b: unsupported_reason(row.backend, fixed) for b, feed in run.bench_feeds
                   if fixed and not _fits(manifest, feed)}
    checked = [(t, r) for t, r in zip(trials, refs) if t.name not in excluded_names]
    paired = run.servers is not None
    what = (f"{'cold start' if paired else 'benchmark'} and run {len(checked)} trials" if config.bench
            else f"run {len(checked)} trials")
    run.progress(f"{row.backend}: {what} in {'its paired' if paired else 'a'} worker" + (f" (at {', '.join(f'{d}={s}' for d, s in fixed.items())}"
                                                              " only)" if fixed else ""))
    if run.servers is not None:  # paired mode: the runner's live worker, loaded once for parity and timing
        from .paired import serve_artifact

        outcome = serve_artifact(run.servers, row.backend, [t.feed for t, _ in checked], run.bench_feeds, unsupported,
                                 run.row_bench)
    else:
        outcome = run_artifact(["run", str(manifest_dir(row))], [t.feed for t, _ in checked], run.bench_feeds,
                               unsupported, run.row_bench, run.plan.chosen, run.threads, config.timeout)
    if config.native:  # independent evidence: run whatever the Python runner's verdict is
        from .native_check import check_native

        row.native = check_native(run, row, manifest, checked, excluded, outcome.bench)
    if outcome.failure:
        row.status, row.reason = Status.parse(outcome.failure[0]), outcome.failure[1]
        return  # no latency for a row that failed
    row.bench = outcome.bench
    verdict = check_parity(row.backend, outcome.outputs, [r for _, r in checked], run.sig.outputs,
                           [t.name for t, _ in checked], config.tolerances, excluded=excluded,
                           inputs_notes=[inputs_note(t.feed) for t, _ in checked], feeds=[t.feed for t, _ in checked],
                           sensitivity=run.sensitivity)
    row.parity = verdict
    notes = [f"not supported by this artifact: trials {', '.join(skipped)}"] if skipped else []
    if not checked:
        row.status, row.reason = Status.RUN_FAILED, "no trial was evidence (every trial left the model's domain)"
    elif verdict.passed:
        row.status, row.reason = Status.OK, "; ".join(notes)
    else:
        row.status, row.reason = Status.PARITY_FAILED, verdict.summary()
    if run.truth is not None:
        position = {t.name: i for i, t in enumerate(run.trials)}
        pairs = [(got, run.truth[position[t.name]]) for got, (t, _) in zip(outcome.outputs, checked) if t.name in position]
        row.error_vs_float64 = error_vs([g for g, _ in pairs], [w for _, w in pairs])


def manifest_dir(row) -> str:
    return row.artifact


def _fits(manifest, feed) -> bool:
    """Whether a feed has the shapes the artifact takes (a specialised artifact takes one size only)."""
    from ..errors import InputError
    from ..exporting.feed import check_feed

    try:
        check_feed(manifest.inputs, feed)
    except InputError:
        return False
    return True
