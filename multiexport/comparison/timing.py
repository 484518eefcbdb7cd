"""The timed stages of a compare: the paired workers started early, the timing plan (paired rounds or one
runner after another), the reference's benchmark, the rounds, the peak and the floors.

Functions of the stages' typed values (`stages.Context`, `Prepared`, `Workers`, `Timing`) and the rows;
the workers themselves are `run.paired.Servers`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from ..errors import present
from ..leaves.factory_cache import off_here
from ..measure.bench import bench_sizes, memory_now
from ..measure.pairing import fits_in_memory, fresh_name, is_fresh
from ..results import NATIVE_SUFFIX, BenchResult, Pairing, Status
from ..results.bench import BASELINE_PREFIX
from ..run.paired import (
    Servers,
    apply,
    directory_bytes,
    pairing_result,
    run_rounds,
    serve_artifact,
    set_compute_figures,
)
from ..run.runs import run_artifact
from .baseline import BaselineArtifacts, artifact_bytes, attach, find_baseline, prepare_baselines, spawn_baselines
from .memory_plan import available_now, rss_of, weight_bytes
from .native_check import apply_paired, native_slices
from .outcomes import Exported
from .stages import Context, Prepared, Rows, Timing, Workers

if TYPE_CHECKING:
    from ..run.devices import DevicePlan
    from .config import CompareConfig


@dataclass(frozen=True)
class EarlyWorkers:
    """Paired workers started before the target was built (the CLI starts them, so their runtimes import
    while the target's factory runs on the other core); the compare for `spec` adopts them.

    servers: the workers (artifact directories still to come with each load).
    spec: the TARGET string they were started for (the reference worker builds it).
    available: memory available to new processes just before they started, in bytes (None: unknown).
    rss: this process's resident size then: what building the target has taken since is not available.
    """

    servers: Servers
    spec: str
    available: int | None
    rss: int

    def close(self) -> None:
        """Kill them, unused (the target failed to load, or the compare stopped before adopting them): a no-op
        once the compare that adopted them has closed them."""
        self.servers.close(kill=True)


def start_early(config: CompareConfig, spec: str) -> EarlyWorkers | None:
    """Paired workers for `config.backends` (registered names), before `spec` is built (None when pairing
    is off or on a GPU plan)."""
    if config.device != "cpu":
        return None  # which backends run is known only after the GPU probe
    available, rss = available_now()[0], memory_now()["rss_bytes"]
    servers = _start_workers(config, spec, list(config.backends), "cpu")
    return EarlyWorkers(servers, spec, available, rss) if servers is not None else None


def prespawn(ctx: Context, early: EarlyWorkers | None, device: DevicePlan | None) -> Workers:
    """Start the paired workers early: each imports its runtime while the parent traces the target and the
    exports run, then waits; it reads its artifact only when asked to load, after every export is done, and
    nothing is timed before then. On the CPU this runs before the signature is built (device None), or adopts
    the workers the CLI started before the target was built (`early`, else closed); `recheck_prespawn` stops
    them once the signature shows the weights would not fit, and `plan_timing` decides with the real
    artifact sizes and closes them if pairing is off after all."""
    config = ctx.config
    if early is not None and early.spec == ctx.spec and config.bench and config.paired:
        grown = max(0, memory_now()["rss_bytes"] - early.rss)  # the target, built in this process meanwhile
        for name in list(early.servers.dirs):
            if name != "jax" and name not in config.backends:
                early.servers.discard(name)
        return Workers(early.servers, None if early.available is None else early.available - grown)
    if early is not None:
        early.close()
    available = available_now()[0]
    names = [n for n in config.backends if device is None or n not in device.excluded]
    return Workers(_start_workers(config, ctx.spec, names, device.chosen if device else "cpu"), available)


def _start_workers(config: CompareConfig, spec: str | None, backends: list[str], device: str) -> Servers | None:
    """One paired worker per runner (and the reference's, given a TARGET), each importing its runtime."""
    runners = list(backends) + (["jax"] if spec else [])
    if not config.bench or not config.paired or len(runners) < 2:
        return None
    servers = Servers(device, config.runtime_threads(), config.timeout)
    for name in runners:
        if name == "jax" and spec:
            servers.spawn(name, ["reference", spec], None)
        else:
            servers.spawn(name, ["run", "-"], name)
    return servers


def recheck_prespawn(workers: Workers, prep: Prepared) -> Workers:
    """After the signature: stop workers started before it when the weights alone, once per runner, would
    not fit in memory (the exports need that memory more)."""
    if workers.servers is None:
        return workers
    weights = weight_bytes(prep.sig)
    if not fits_in_memory({n: weights for n in workers.servers.dirs}, workers.available_before)[0]:
        workers.servers.close()
        return Workers(None, workers.available_before)
    return workers


def plan_timing(ctx: Context, prep: Prepared, artifacts: Mapping[str, Exported], workers: Workers) -> Timing:
    """Paired rounds when every runner fits in memory at once (and pairing is not turned off), else one
    worker after another. In paired mode each runner's one worker gives its parity and cold start too; the
    early workers are adopted for it, else closed here."""
    config = ctx.config
    fits, reason, pairing = False, "", None
    baseline = _baseline(ctx, artifacts)
    if config.bench and not config.paired:
        pairing = Pairing(mode="sequential", reason="sequential: asked for (--sequential)")
    elif config.bench:
        sizes = {name: directory_bytes(exported.artifact) for name, exported in artifacts.items()}
        if ctx.spec is not None:
            sizes["jax"] = int(prep.sig.weights.get("baked_bytes", 0))
        if baseline is not None:
            sizes.update(artifact_bytes(baseline))
        # The memory available before the early workers started: they are part of what is being sized.
        fits, reason = fits_in_memory(sizes, workers.available_before)
        if len(sizes) < 2:
            fits, reason = False, "sequential: only one runner to time"
        if not fits:
            pairing = Pairing(mode="sequential", reason=reason)
    if not fits:
        if workers.servers is not None:
            workers.servers.close()
        if baseline is not None and pairing is not None:  # each pair timed by itself later (`time_baseline_pairs`)
            pairing.rounds = config.rounds
            pairing.reason += ("; each backend's new and baseline artifacts are timed as a pair by themselves (two "
                               "workers at a time) in paired rounds")
        return Timing(pairing, None, baseline)
    if ctx.spec is None:
        reason += "; the reference (no TARGET string to load it in a worker) is timed on its own, before the rounds"
    servers = workers.servers or Servers(prep.device.chosen, ctx.threads, config.timeout)
    if baseline is not None:  # (the config gave it BASELINE_ROUNDS rounds at least)
        spawn_baselines(servers, baseline, list(artifacts))  # their runtimes import while the new ones load
    return Timing(Pairing(mode="paired", reason=reason, rounds=config.rounds), servers, baseline)


def _baseline(ctx: Context, artifacts: Mapping[str, Exported]):
    """The baseline artifacts to time beside `artifacts` (compare --baseline-artifacts), or None."""
    if ctx.config.baseline_artifacts is None or not ctx.config.bench or not artifacts:
        return None
    return find_baseline(ctx.config.baseline_artifacts, list(ctx.config.backends), ctx.out)


def start_servers(ctx: Context, servers: Servers, artifacts: Mapping[str, Exported]) -> None:
    """One worker per runner, alive until the rounds are done; loads one after another, each timed alone
    (workers started early have imported their runtimes by now and wait for this)."""
    if ctx.spec is not None:
        if "jax" not in servers.dirs:
            servers.spawn("jax", ["reference", ctx.spec], None)
        ctx.progress("reference: load jax.jit in its paired worker")
        servers.load("jax")
    for name in list(servers.dirs):
        if name != "jax" and name not in artifacts and not name.startswith(BASELINE_PREFIX):
            servers.discard(name)  # its export failed: nothing to load
    for name in artifacts:
        if name not in servers.dirs:
            servers.spawn(name, ["run", "-"], name)
        ctx.progress(f"{name}: load in its paired worker")
        servers.load(name, artifacts[name].artifact)
    for name in [n for n in servers.dirs if n.startswith(BASELINE_PREFIX)]:
        ctx.progress(f"{name[len(BASELINE_PREFIX):]}: load its baseline in a paired worker")
        servers.load(name)


def bench_reference(ctx: Context, prep: Prepared, tm: Timing) -> BenchResult | None:
    """The reference's latency, measured like every backend's: its cold start in its paired worker (the
    steady state comes from the rounds), else a fresh worker, else (no TARGET string) in this process."""
    bench = ctx.config.bench
    if not bench:
        return None
    paired = tm.servers is not None and ctx.spec is not None
    ctx.progress("reference: " + ("cold start of jax.jit" if paired else "benchmark jax.jit"))
    if paired:
        outcome = serve_artifact(present(tm.servers, "paired implies live servers"), "jax", [], prep.bench_feeds, {},
                                 bench)
        return outcome.bench if outcome.failure is None else None
    if ctx.spec is not None:
        outcome = run_artifact(["reference", ctx.spec], [], prep.bench_feeds, {}, bench, prep.ref_device,
                               ctx.threads, ctx.config.timeout, peak=True)
        if outcome.failure is None and outcome.bench is not None:
            return outcome.bench
    t0 = time.perf_counter()
    runner = prep.ref_runner
    with off_here():  # timed here: no compile of it may be read from a cache (a compare keeps its programs)
        sizes = bench_sizes(runner, list(prep.bench_feeds), bench)
    for size, (_, feed) in zip(sizes, prep.bench_feeds):
        size.flops = runner.flops(feed)
        if size.flops and size.latency:
            size.gflops_per_s = size.flops / (size.latency.p50_ms / 1e3) / 1e9
    return BenchResult(load_s=0.0, sizes=sizes, memory=memory_now(), artifact_bytes=None, runner=runner.describe(),
                       config=bench.to_json(), process="parent", extra={"bench_s": time.perf_counter() - t0})


def paired_rounds(ctx: Context, prep: Prepared, tm: Timing, rows: Rows, reference: BenchResult | None) -> Pairing:
    """The interleaved rounds over every runner that passed (and each native consumer that did, beside its
    Python runner); each runner's steady-state figures replaced by the rounds'. Returns the pairing with
    the paired ratios."""
    servers = present(tm.servers, "paired rounds run on live servers")
    planned = present(tm.pairing, "paired rounds run after plan_timing")
    config = ctx.config
    benches = {"jax": reference} if "jax" in servers.alive and reference is not None else {}
    for name, row in rows.items():  # a variant beyond its accuracy budget is timed too: what it would have bought
        if row.status in (Status.OK, Status.ACCURACY_FAILED) and row.bench is not None and name in servers.alive:
            benches[name] = row.bench
    baseline_failures = {}
    if tm.baseline is not None:  # each baseline artifact prepared at its new artifact's sizes, to join the rounds
        baseline_failures = prepare_baselines(servers, benches, prep.bench_feeds, config.bench, ctx.progress)
    unsupported = {n: {i for i, s in enumerate(b.sizes) if s.status is not Status.OK} for n, b in benches.items()}
    # Each native consumer that passed takes a slice per round too, beside its Python runner (--native).
    natives = native_slices(ctx, prep, rows) if config.native and config.bench else {}
    for name in natives:  # a native consumer is paired only at the sizes it was timed at alone
        native = present(rows[name[:-len(NATIVE_SUFFIX)]].native, "a native slice has a native result")
        timed_alone = {s.batch for s in native.sizes if s.latency is not None}
        unsupported[name] = {i for i, (batch, _) in enumerate(prep.bench_feeds) if batch not in timed_alone}
    timed, peak = run_rounds(servers, list(benches), prep.bench_feeds, unsupported, config.bench, planned.rounds,
                             ctx.progress, natives)
    runners = {n: t for n, t in timed.items() if n not in natives}
    failures = {n: f for n, f in servers.failures.items() if n in benches or is_fresh(n)}
    pairing = pairing_result("paired", planned.reason, runners, prep.bench_feeds, planned.rounds, config.bench,
                             failures, peak)
    if tm.baseline is not None:
        attach(pairing, tm.baseline, baseline_failures, [n for n in rows if n in benches])
    apply(pairing, runners, benches, {n: r.native for n, r in rows.items() if r.native is not None})
    apply_paired(ctx, prep, rows, timed)
    return pairing


def time_baseline_pairs(ctx: Context, prep: Prepared, tm: Timing, rows: Rows) -> Pairing | None:
    """Sequential mode against baseline artifacts (not every runner fits in memory at once, or --sequential):
    each timed row's new artifact and its baseline are timed as a pair by themselves, two workers at a time,
    in the paired rounds as usual (sequential rounds while undecided, a fresh pair of workers to confirm a
    flagged ratio), so the gate's latency verdict rests on a paired ratio and never on two separate runs while
    the baseline's artifacts exist. A pair that does not fit in memory even alone is judged cross-run, with
    that reason. The rows keep their own sequential figures. Returns the pairing with the pairs' ratios (the
    baseline failures recorded on it); `tm.pairing` unchanged when there is nothing to pair."""
    pairing, baseline = tm.pairing, tm.baseline
    if pairing is None or baseline is None or tm.servers is not None:
        return pairing
    failures: dict[str, str] = {}
    for name, row in rows.items():
        if (row.status not in (Status.OK, Status.ACCURACY_FAILED) or row.bench is None or row.artifact is None
                or name not in baseline.found):
            continue  # no latency to pair (attach says why), or no baseline artifact (in `baseline.missing`)
        sizes = {name: directory_bytes(row.artifact), **artifact_bytes(_only(baseline, name))}
        fits, reason = fits_in_memory(sizes, available_now()[0])
        if not fits:
            failures[name] = f"not timed beside its baseline even as a pair alone ({reason})"
            continue
        # the confirming pair needs two more workers: when all four do not fit, the first pair is closed before it
        # starts, and each size gets a pair of its own (a closed pair cannot time the next size)
        four = fits_in_memory({**sizes, **{fresh_name(n): b for n, b in sizes.items()}}, available_now()[0])[0]
        timed_alone = [b for b, _ in prep.bench_feeds
                       if any(s.batch == b and s.status is Status.OK and s.latency is not None for s in row.bench.sizes)]
        for batches in ([timed_alone] if four else [[b] for b in timed_alone]):
            part = _time_pair(ctx, prep, baseline, name, row, batches, keep_first=four)
            failures.update(part.baseline_failures)
            pairing.baseline_ratios += part.baseline_ratios
            pairing.confirmations += part.confirmations
            pairing.confirmation_failures.update(part.confirmation_failures)
            pairing.slice_s = part.slice_s
    attach(pairing, baseline, failures, list(rows))
    return pairing


def _only(baseline: BaselineArtifacts, name: str) -> BaselineArtifacts:
    """The baseline narrowed to row `name`'s artifact."""
    return dataclasses.replace(baseline, found={name: baseline.found[name]}, missing={})


def _time_pair(ctx: Context, prep: Prepared, baseline: BaselineArtifacts, name: str, row, batches: list,
               keep_first: bool) -> Pairing:
    """Row `name`'s new artifact and its baseline, loaded in two workers by themselves and timed at `batches`
    in the paired rounds (run.paired.run_rounds: the same statistic, sequential rounds and fresh pair as every
    paired A/B). Returns that pair's Pairing (baseline_failures says why it gave no ratio)."""
    config = ctx.config
    servers = Servers(prep.device.chosen, ctx.threads, config.timeout)
    try:
        ctx.progress(f"{name}: timed beside its baseline as a pair by themselves")
        servers.spawn(name, ["run", str(row.artifact)], name)
        spawn_baselines(servers, _only(baseline, name), [name])
        servers.load(name)
        servers.load(BASELINE_PREFIX + name)
        skip = {b: "not timed in this pair" for b, _ in prep.bench_feeds if b not in batches}
        outcome = serve_artifact(servers, name, [], prep.bench_feeds, skip, config.bench)
        failures: dict[str, str] = {}
        benches = {}
        if outcome.failure is None and outcome.bench is not None:
            benches[name] = outcome.bench
            failures = prepare_baselines(servers, benches, prep.bench_feeds, config.bench, ctx.progress)
        else:
            category, reason = outcome.failure or ("bench-failed", "no cold start")
            failures[name] = f"its new artifact's worker beside the baseline failed: {category}: {reason}"
        unsupported = {n: {i for i, s in enumerate(b.sizes) if s.status is not Status.OK} for n, b in benches.items()}
        timed, _ = run_rounds(servers, list(benches), prep.bench_feeds, unsupported, config.bench, config.rounds,
                              ctx.progress, keep_first=keep_first)
        part = pairing_result("paired", "", timed, prep.bench_feeds, config.rounds, config.bench,
                              dict(servers.failures), None)
        if name in part.failures:
            failures[name] = f"its new artifact's worker beside the baseline failed: {part.failures[name]}"
        part.baseline_failures = {**part.baseline_failures, **failures}
        return part
    finally:
        servers.close()


def compute_figures(pairing: Pairing | None, rows: Rows, reference: BenchResult | None) -> None:
    """Each timed size's achieved GFLOP/s and its fraction of the machine's peak measured in the same run
    (the rounds', else the reference worker's), set on the benches and the pairing."""
    if pairing is None:
        return
    benches = {n: r.bench for n, r in rows.items() if r.bench is not None}
    if reference is not None:
        benches["jax"] = reference
    peak = pairing.peak_gflops
    if peak is None and reference is not None:
        peak = reference.extra.get("peak_gflops")
        pairing.peak_gflops, pairing.peak_how = peak, reference.extra.get("peak_how", "")
    set_compute_figures(benches, reference, peak)


def early_rss(workers: Workers) -> dict[str, int]:
    """The resident size of each live paired worker started early (name -> bytes; "jax": the reference's),
    what the memory plan frees by closing them."""
    if workers.servers is None:
        return {}
    return {name: rss_of(server.proc.pid) for name, server in workers.servers.alive.items()}


def close_early(workers: Workers) -> Workers:
    """Close the paired workers started early (the memory plan needs their memory for the exports); the
    timing plan starts each again (`plan_timing`, `start_servers`), or times one after another."""
    if workers.servers is not None:
        workers.servers.close()
    return Workers(None, workers.available_before)
