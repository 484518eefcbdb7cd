"""Paired latency for a compare: every faithful runner loaded at once, timed in interleaved rounds.

Each runner gets one `serve` worker (run.serve) that loads it once and gives, on request, its parity
outputs and its cold start (each size prepared, compiled, called once, warmed), then waits. For each
batch size, each round asks every runner in turn (the order rotating) for one slice of timed calls;
only one worker runs at a time, the others block on a read. Pooled slices give
each runner's latency; per-round medians give every ratio with its interval (measure.pairing). A worker
that fails is that runner's bench failure only, and the others go on. A new artifact whose ratio to its
baseline passes the gate's threshold is measured again by a fresh pair of workers (`confirm`). The workers
themselves are `run.servers.Servers`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from ..errors import MultiexportError
from ..files.npz import load_npz, save_npz
from ..measure.bench import summarize
from ..measure.pairing import (
    SEQUENTIAL_CAP,
    all_ratios,
    fresh_name,
    is_fresh,
    level_after,
    new_over_base,
    paired_ratio,
    round_orders,
    slice_plan,
    with_rounds,
)
from ..report.regression import paired_decided, paired_flagged
from ..results import Pairing, Ratio, Status
from ..results.bench import BASELINE_PREFIX
from .messages import (
    ColdStart,
    Done,
    Parity,
    Peak,
    PeakFigure,
    Prepare,
    Samples,
    TimeSlice,
)
from .runs import ArtifactRun, write_bench_feeds
from .servers import Servers

if TYPE_CHECKING:
    from .runs import ArtifactRun


@dataclass
class Timed:
    """What the rounds gave one runner: per size, its samples (ns), per-round medians (ms), how loops ended."""

    samples: dict[int, list[np.ndarray]] = field(default_factory=dict)
    medians: dict[int, list[float]] = field(default_factory=dict)
    capped: dict[int, bool] = field(default_factory=dict)


def serve_artifact(servers: Servers, name: str, feeds: Sequence[dict[str, np.ndarray]],
                   bench_feeds: Sequence[tuple[int | None, dict | None]], unsupported: dict, bench) -> "ArtifactRun":
    """Parity outputs and cold start from the runner's live worker: what `runs.run_artifact` gives in
    sequential mode, without loading the runner a second time."""

    if name not in servers.alive:
        failure = servers.failures.get(name, ("internal-error", "no paired worker was started"))
        return ArtifactRun([], None, failure, {})
    work, parsed = servers.dirs[name], None
    if bench and bench_feeds:
        write_bench_feeds(work / "bench", bench_feeds, unsupported)
        servers.prepared[name] = Prepare(str(work / "bench"), bench)
        answer = servers.ask(name, servers.prepared[name], ColdStart, servers.timeout)
        if answer is None:
            return ArtifactRun([], None, servers.failures[name], {})
        parsed = answer.bench
    outputs = []
    if feeds:
        (work / "feeds").mkdir(exist_ok=True)
        (work / "outputs").mkdir(exist_ok=True)
        for i, feed in enumerate(feeds):
            save_npz(work / "feeds" / f"{i:04d}.npz", feed)
        if servers.ask(name, Parity(str(work / "feeds"), str(work / "outputs")), Done, servers.timeout) is None:
            return ArtifactRun([], None, servers.failures[name], {})
        outputs = [load_npz(work / "outputs" / f"{i:04d}.npz", "Worker output") for i in range(len(feeds))]
    ready = servers.ready.get(name)
    return ArtifactRun(outputs, parsed, None, dict(ready.runner) if ready is not None else {})


# A native consumer's slice: (size index, seconds, min calls, max calls) -> every timed call's ns, call order.
NativeSlice = Callable[[int, float, int, int], np.ndarray]


def run_rounds(servers: Servers, names: Sequence[str], feeds: Sequence[tuple[int | None, dict | None]],
               unsupported: dict[str, set[int]], bench, rounds: int, progress,
               natives: Mapping[str, NativeSlice] | None = None,
               keep_first: bool = True) -> tuple[dict[str, Timed], PeakFigure | None]:
    """Time every runner in `names` on every size it supports, in interleaved rounds; then the peak.

    unsupported: name -> indices of sizes it has no prepared feed for. natives: more participants, each a
    native consumer run for one slice per round (a process of its own: not a server); one that fails is
    dropped from the rounds and keeps the figure it had. A new runner timed beside its baseline
    (BASELINE_PREFIX + name) whose paired ratio is still undecided after `rounds` rounds (report.regression:
    its interval neither above the gate's threshold nor below it) gets more rounds, the pair alone, until it
    is decided or has had SEQUENTIAL_CAP times `rounds`; one whose interval then lies above the threshold is
    timed again by a fresh pair of workers (`confirm`; keep_first False: the first pair's workers are closed
    before the fresh pair starts, when the four do not fit in memory together). Returns (per participant what was timed, the fresh
    pairs' under `fresh_name`, the peak measurement or None); runner failures land in `servers.failures`.
    """

    natives = dict(natives or {})
    unsupported = {n: set(v) for n, v in unsupported.items()}  # a native's failed sizes join it: the caller's stays
    timed = {n: Timed() for n in names if n in servers.alive}
    timed.update({n: Timed() for n in natives})
    plan = slice_plan(bench.bench_time, bench.min_iters, bench.max_iters, rounds)
    for i, (batch, feed) in enumerate(feeds):
        here = [n for n in timed if feed is not None and i not in unsupported.get(n, set())
                and (n in servers.alive or n in natives)]
        if len(here) == 0:
            continue
        at = f" at batch {batch}" if batch is not None else ""
        progress(f"paired benchmark: {len(here)} runners, {rounds} interleaved rounds{at}")
        for order in round_orders(here, rounds):
            for name in order:
                _time_slice(servers, natives, timed, unsupported, i, name, plan, progress, at)
        pairs = [(n, BASELINE_PREFIX + n) for n in here if BASELINE_PREFIX + n in here]
        _rounds_until_decided(servers, timed, unsupported, i, pairs, rounds, plan, progress, at)
        confirm(servers, timed, unsupported, i, pairs, rounds, plan, progress, at, keep_first)
    peak = servers.ask("jax", Peak(), PeakFigure, servers.timeout) if "jax" in servers.alive else None
    return {n: t for n, t in timed.items() if n not in servers.failures}, peak


def _time_slice(servers: Servers, natives: Mapping[str, NativeSlice], timed: dict[str, Timed],
                unsupported: dict[str, set[int]], i: int, name: str, plan: tuple[float, int, int], progress,
                at: str) -> None:
    """One slice of one participant at size index i, added to what it was timed at."""

    seconds, min_calls, max_calls = plan
    if i in unsupported.get(name, set()):  # a native that failed at this size in an earlier round
        return
    if name in natives:
        try:
            samples = natives[name](i, seconds, min_calls, max_calls)
            stopped: str | None = "max_iters" if len(samples) >= max_calls else "time"
        except MultiexportError as exc:  # this size only: what it gave at other sizes stands
            progress(f"{name}: not paired{at} ({exc})")
            unsupported.setdefault(name, set()).add(i)
            for figures in (timed[name].samples, timed[name].medians, timed[name].capped):
                figures.pop(i, None)
            return
    else:
        answer = servers.ask(name, TimeSlice(i, seconds, min_calls, max_calls), Samples,
                             seconds * 20 + servers.timeout)
        if answer is None:
            return
        samples, stopped = np.load(answer.file), answer.stopped
    t = timed[name]
    t.samples.setdefault(i, []).append(samples)
    t.medians.setdefault(i, []).append(float(np.median(samples)) / 1e6)
    t.capped[i] = t.capped.get(i, False) or stopped == "max_iters"


def _interval(timed: dict[str, Timed], i: int, new: str, base: str, rounds: int) -> tuple[float, float, float] | None:
    """(low, high, the baseline's p50 ms) of the pair's ratio new / baseline at size i so far, at the level its
    rounds call for (`level_after`); None when the two were not timed in the same rounds (a worker failed)."""
    a, b = timed[new].samples.get(i, []), timed[base].samples.get(i, [])
    if not a or len(a) != len(b):
        return None
    _, low, high = new_over_base(paired_ratio(a, b, None, new, base, level_after(len(a), rounds)), new)
    return low, high, float(np.median(np.concatenate(b))) / 1e6


def _rounds_until_decided(servers: Servers, timed: dict[str, Timed], unsupported: dict[str, set[int]], i: int,
                          pairs: Sequence[tuple[str, str]], rounds: int, plan: tuple[float, int, int], progress,
                          at: str) -> None:
    """Sequential rounds against a baseline: each new runner whose ratio to its baseline (timed in the same
    rounds) is not yet decided gets one more round with its baseline, in rotating order, until every pair is
    decided or has had SEQUENTIAL_CAP x `rounds` rounds. Each added look is judged at the stricter level."""

    def undecided() -> list[str]:
        names = []
        for new, base in pairs:
            if new not in servers.alive or base not in servers.alive:
                continue  # a worker failed: that pair has no ratio to decide
            interval = _interval(timed, i, new, base, rounds)
            if interval is None or len(timed[new].samples[i]) >= SEQUENTIAL_CAP * rounds:
                continue
            if not paired_decided(*interval):
                names += [new, base]
        return names

    extra = 0
    while names := undecided():
        if extra == 0:
            progress(f"paired benchmark: {len(names) // 2} ratio(s) against the baseline undecided after {rounds} "
                     f"rounds{at}: more rounds, up to {SEQUENTIAL_CAP * rounds}")
        for name in round_orders(names, extra + 1)[-1]:
            _time_slice(servers, {}, timed, unsupported, i, name, plan, progress, at)
        extra += 1


def confirm(servers: Servers, timed: dict[str, Timed], unsupported: dict[str, set[int]], i: int,
            pairs: Sequence[tuple[str, str]], rounds: int, plan: tuple[float, int, int], progress, at: str,
            keep_first: bool = True) -> None:
    """A fresh pair of processes for each pair whose ratio lies above the gate's threshold at size i: a new
    worker and a baseline worker started again (`Servers.fresh`), timed alone in `rounds` interleaved rounds,
    then sequential rounds as the first pair had. Measured under load, one worker process can run ~1.2x
    slower than another of the same artifact for the whole run, and every round of its pair says so; a
    second, independent pair of processes does not share that offset. The gate's verdict needs both pairs
    (report.regression). Costs nothing where no ratio passes the threshold. keep_first False: the first pair's
    workers are closed before the fresh pair starts (what they timed is kept; a pair timed by itself, at one
    size, when four workers do not fit in memory)."""

    for new, base in pairs:
        if new not in servers.alive or base not in servers.alive:
            continue
        interval = _interval(timed, i, new, base, rounds)
        if interval is None or not paired_flagged(interval[0], interval[2]):
            continue
        progress(f"paired benchmark: {new}'s ratio to its baseline passed the threshold{at}: measured again by a "
                 f"fresh pair of workers")
        if not keep_first:
            servers.discard(new)
            servers.discard(base)
        new2, base2 = servers.fresh(new), servers.fresh(base)
        if new2 is None or base2 is None:
            why = servers.failures.get(fresh_name(new)) or servers.failures.get(fresh_name(base))
            progress(f"{new}: no fresh pair{at} ({why})")
            continue
        for name, of in ((new2, new), (base2, base)):
            timed.setdefault(name, Timed())
            unsupported[name] = set(unsupported.get(of, set()))
        for order in round_orders([new2, base2], rounds):
            for name in order:
                _time_slice(servers, {}, timed, unsupported, i, name, plan, progress, at)
        _rounds_until_decided(servers, timed, unsupported, i, [(new2, base2)], rounds, plan, progress, at)


def pairing_result(mode: str, reason: str, timed: dict[str, Timed], feeds, rounds: int, bench,
                   failures: dict[str, tuple[str, str]], peak: PeakFigure | None) -> Pairing:
    """The Pairing record: every ratio at every size (between runners over the `rounds` all had; a new
    runner against its baseline over every round the pair had, at the level that many rounds call for, and
    again from its fresh pair of workers where one was timed), the peak, and the failures."""

    ratios: list[Ratio] = []
    against_baseline: list[Ratio] = []
    confirmations: list[Ratio] = []
    for i, (batch, _) in enumerate(feeds):
        complete = {n: t.samples[i] for n, t in timed.items() if len(t.samples.get(i, [])) >= rounds}
        new = {n: s for n, s in complete.items() if not n.startswith(BASELINE_PREFIX) and not is_fresh(n)}
        if len(new) > 1:
            ratios += all_ratios({n: s[:rounds] for n, s in new.items()}, batch)
        for name in new:  # each new artifact against its own baseline only, timed in the same rounds
            for first, second, into in ((name, BASELINE_PREFIX + name, against_baseline),
                                        (fresh_name(name), fresh_name(BASELINE_PREFIX + name), confirmations)):
                if first in complete and second in complete:
                    shared = min(len(complete[first]), len(complete[second]))
                    r = paired_ratio(complete[first][:shared], complete[second][:shared], batch, name,
                                     BASELINE_PREFIX + name, level_after(shared, rounds))
                    base_ms = float(np.median(np.concatenate(complete[second][:shared]))) / 1e6
                    into.append(dataclasses.replace(with_rounds(r, shared), base_ms=base_ms))
    fresh_failed = {n: f"its fresh pair failed: {c}: {r}" for n, (c, r) in failures.items() if is_fresh(n)}
    return Pairing(mode=mode, reason=reason, rounds=rounds, slice_s=slice_plan(bench.bench_time, bench.min_iters,
                                                                               bench.max_iters, rounds)[0],
                   ratios=ratios, peak_gflops=peak.gflops if peak else None, peak_how=peak.how if peak else "",
                   failures={n: f"{c}: {r}" for n, (c, r) in failures.items()
                             if not n.startswith(BASELINE_PREFIX) and not is_fresh(n)},
                   baseline_ratios=against_baseline,
                   baseline_failures={n[len(BASELINE_PREFIX):]: f"{c}: {r}" for n, (c, r) in failures.items()
                                      if n.startswith(BASELINE_PREFIX) and not is_fresh(n)},
                   confirmations=confirmations,
                   confirmation_failures={_backend(n): why for n, why in fresh_failed.items()})


def _backend(name: str) -> str:
    """The backend a runner name belongs to ("baseline:onnx#2" -> "onnx")."""
    name = name[:-len(fresh_name(""))] if is_fresh(name) else name
    return name[len(BASELINE_PREFIX):] if name.startswith(BASELINE_PREFIX) else name


def directory_bytes(path: str | os.PathLike) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def apply(pairing: Pairing, timed: dict[str, Timed], benches: dict, natives: dict) -> None:
    """Write what the rounds measured into each runner's BenchResult (benches: name -> BenchResult), mark the
    sizes of runners whose worker failed as bench-failed, and set every figure that depends on latency."""

    for name, t in timed.items():
        bench = benches.get(name)
        if bench is None:
            continue
        for i, size in enumerate(bench.sizes):
            if i not in t.samples or size.status is not Status.OK:
                continue
            size.latency = summarize(np.concatenate(t.samples[i]), "max_iters" if t.capped.get(i) else "time")
            size.measured = "paired"
            size.throughput_per_s = ((size.batch or 1) / (size.latency.p50_ms / 1e3) if size.latency.p50_ms > 0
                                     else None)
    for name, why in pairing.failures.items():
        bench = benches.get(name)
        for size in (bench.sizes if bench else []):
            if size.status is Status.OK:
                size.latency, size.status, size.reason = None, Status.BENCH_FAILED, f"paired benchmark worker: {why}"
    for name, native in natives.items():  # the Python figure beside each native one is the paired one now
        bench = benches.get(name)
        python = {s.batch: s for s in (bench.sizes if bench else [])}
        for ns in (native.sizes if native else []):
            s = python.get(ns.batch)
            ns.python_p50_ms = s.latency.p50_ms if s is not None and s.latency is not None else None


def set_compute_figures(benches: dict, reference, peak_gflops: float | None) -> None:
    """GFLOP/s of every runner at every size from the reference's FLOP count (the same function everywhere),
    and its fraction of the machine's peak measured in the same run."""
    flops = {s.batch: s.flops for s in (reference.sizes if reference else []) if s.flops}
    for bench in benches.values():
        for size in (bench.sizes if bench else []):
            if size.latency is None or size.latency.p50_ms <= 0:
                continue
            size.flops = size.flops or flops.get(size.batch)
            if size.flops:
                size.gflops_per_s = size.flops / (size.latency.p50_ms / 1e3) / 1e9
                size.fraction_of_peak = size.gflops_per_s / peak_gflops if peak_gflops else None
