"""The timed phase of a compare: paired rounds or one runner after another, the peak, and the floors.

Functions of the running `session.CompareRun` (its rows, feeds, config and the `Servers` of paired mode),
kept apart so the session reads as the phases it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import present
from ..exporting.manifest import Manifest
from ..results import Status

if TYPE_CHECKING:
    from .paired import Servers


@dataclass
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
        self.servers.close()  # a no-op once the compare that adopted them has closed them


def start_early(config, spec: str) -> EarlyWorkers | None:
    """Paired workers for `config.backends` (registered names), before `spec` is built (None when pairing
    is off or on a GPU plan)."""
    from ..measure.bench import memory_now
    from ..measure.pairing import available_memory

    if config.device != "cpu":
        return None  # which backends run is known only after the GPU probe
    available, rss = available_memory(), memory_now()["rss_bytes"]
    servers = _start_workers(config, spec, list(config.backends), "cpu")
    return EarlyWorkers(servers, spec, available, rss) if servers is not None else None


def prespawn(run) -> None:
    """Start the paired workers early: each imports its runtime while the parent traces the target and the
    exports run, then waits; it reads its artifact only when asked to load, after every export is done, and
    nothing is timed before then. On the CPU this runs before the signature is built (the session calls it
    first), or adopts the workers the CLI started before the target was built; `recheck_prespawn` stops
    them once the signature shows the weights would not fit, and `plan_timing` decides with the real
    artifact sizes and closes them if pairing is off after all."""
    from ..measure.bench import memory_now
    from ..measure.pairing import available_memory

    early, run.early = run.early, None
    if early is not None and early.spec == run.spec and run.config.bench and run.config.paired:
        run.servers = early.servers
        grown = max(0, memory_now()["rss_bytes"] - early.rss)  # the target, built in this process meanwhile
        run.available_before = None if early.available is None else early.available - grown
        for name in list(run.servers.dirs):
            if name != "jax" and name not in run.config.backends:
                run.servers.discard(name)
        return
    if early is not None:
        early.close()
    run.servers, run.available_before = None, available_memory()
    plan = getattr(run, "plan", None)
    names = [n for n in run.config.backends if plan is None or n not in plan.excluded]
    run.servers = _start_workers(run.config, run.spec, names, plan.chosen if plan else "cpu")


def _start_workers(config, spec: str | None, backends: list[str], device: str) -> Servers | None:
    """One paired worker per runner (and the reference's, given a TARGET), each importing its runtime."""
    from ..exporting.contract import usable_cpus
    from .paired import Servers

    runners = list(backends) + (["jax"] if spec else [])
    if not config.bench or not config.paired or len(runners) < 2:
        return None
    servers = Servers(device, config.threads or usable_cpus(), config.timeout)
    for name in runners:
        if name == "jax" and spec:
            servers.spawn(name, ["reference", spec], None)
        else:
            servers.spawn(name, ["run", "-"], name)
    return servers


def recheck_prespawn(run) -> None:
    """After the signature: stop workers started before it when the weights alone, once per runner, would
    not fit in memory (the exports need that memory more)."""
    from ..measure.pairing import fits_in_memory

    if run.servers is None:
        return
    weights = int(run.sig.weights.get("baked_bytes", 0)) + int(run.sig.weights.get("input_bytes", 0))
    if not fits_in_memory({n: weights for n in run.servers.dirs}, run.available_before)[0]:
        run.servers.close()
        run.servers = None


def plan_timing(run, artifacts: dict[str, Manifest]) -> None:
    """Paired rounds when every runner fits in memory at once (and pairing is not turned off), else one
    worker after another. In paired mode each runner's one worker gives its parity and cold start too."""
    from ..measure.pairing import fits_in_memory
    from ..results import Pairing
    from .paired import Servers, directory_bytes

    bench = run.config.bench
    run.pairing, run.row_bench = None, bench
    early, run.servers = run.servers, None
    fits, reason = False, ""
    if bench and not run.config.paired:
        run.pairing = Pairing(mode="sequential", reason="sequential: asked for (--sequential)")
    elif bench:
        sizes = {name: directory_bytes(run.rows[name].artifact) for name in artifacts}
        if run.spec is not None:
            sizes["jax"] = int(run.sig.weights.get("baked_bytes", 0))
        # The memory available before the early workers started: they are part of what is being sized.
        fits, reason = fits_in_memory(sizes, run.available_before)
        if len(sizes) < 2:
            fits, reason = False, "sequential: only one runner to time"
        if not fits:
            run.pairing = Pairing(mode="sequential", reason=reason)
    if not fits:
        if early is not None:
            early.close()
        return
    if run.spec is None:
        reason += "; the reference (no TARGET string to load it in a worker) is timed on its own, before the rounds"
    run.pairing = Pairing(mode="paired", reason=reason, rounds=run.config.rounds)
    run.row_bench = bench  # the cold-start part of it: the steady state comes from the rounds
    run.servers = early or Servers(run.plan.chosen, run.threads, run.config.timeout)


def start_servers(run, artifacts: dict[str, Manifest]) -> None:
    """One worker per runner, alive until the rounds are done; loads one after another, each timed alone
    (workers started early have imported their runtimes by now and wait for this)."""
    servers = present(run.servers, "timing is planned after the paired workers are started")
    if run.spec is not None:
        if "jax" not in servers.dirs:
            servers.spawn("jax", ["reference", run.spec], None)
        run.progress("reference: load jax.jit in its paired worker")
        servers.load("jax")
    for name in list(servers.dirs):
        if name != "jax" and name not in artifacts:
            servers.discard(name)  # its export failed: nothing to load
    for name in artifacts:
        if name not in servers.dirs:
            servers.spawn(name, ["run", "-"], name)
        run.progress(f"{name}: load in its paired worker")
        servers.load(name, run.rows[name].artifact)


def paired_rounds(run) -> None:
    from ..results import NATIVE_SUFFIX
    from .native_check import apply_paired, native_slices
    from .paired import apply, pairing_result, run_rounds

    present(run.servers, "paired rounds run on live servers")
    present(run.pairing, "paired rounds run after plan_timing")
    benches = {"jax": run.reference.bench} if "jax" in run.servers.alive and run.reference.bench else {}
    for name, row in run.rows.items():
        if row.status is Status.OK and row.bench is not None and name in run.servers.alive:
            benches[name] = row.bench
    unsupported = {n: {i for i, s in enumerate(b.sizes) if s.status is not Status.OK} for n, b in benches.items()}
    # Each native consumer that passed takes a slice per round too, beside its Python runner (--native).
    natives = native_slices(run) if run.config.native and run.config.bench else {}
    for name in natives:  # a native consumer is paired only at the sizes it was timed at alone
        timed_alone = {s.batch for s in run.rows[name[:-len(NATIVE_SUFFIX)]].native.sizes if s.latency is not None}
        unsupported[name] = {i for i, (batch, _) in enumerate(run.bench_feeds) if batch not in timed_alone}
    timed, peak = run_rounds(run.servers, list(benches), run.bench_feeds, unsupported, run.config.bench,
                             run.config.rounds, run.progress, natives)
    runners = {n: t for n, t in timed.items() if n not in natives}
    failures = {n: f for n, f in run.servers.failures.items() if n in benches}
    run.pairing = pairing_result("paired", run.pairing.reason, runners, run.bench_feeds, run.config.rounds,
                                  run.config.bench, failures, peak)
    apply(run.pairing, runners, benches, {n: r.native for n, r in run.rows.items() if r.native is not None})
    apply_paired(run, timed)


def floors(run) -> None:
    """The per-call floor of every timed runtime: the floor target compared the same way, in OUT/floor."""
    import dataclasses

    from ..measure.floor import SPEC, floor

    timed = [n for n, r in run.rows.items() if r.status is Status.OK and r.bench is not None]
    if not timed:
        return
    run.progress(f"per-call floor of {', '.join(timed)} (one add on 8 floats, the same calling paths)")
    config = dataclasses.replace(run.config, backends=tuple(timed), out_dir=run.out / "floor", trials=1,
                                 batch_sizes=None, native=False, native_plugin=None, floor=False, inputs=None,
                                 dim_sizes={}, val_ranges={}, tolerances={}, backend_options={})
    spec = SPEC if run.spec is not None else None
    from .session import CompareRun

    results = CompareRun(floor(), config, spec, lambda m: run.progress(f"floor: {m}"), report=run.report).run()
    benches = {"jax": results.reference.bench, **{n: r.bench for n, r in results.backends.items()}}
    for name, bench in benches.items():
        measured = bench.measured() if bench is not None else []
        if measured:
            latency = present(measured[0].latency, "measured() keeps only the sizes with a latency")
            run.pairing.floors[name] = latency.p50_ms


def compute_figures(run) -> None:
    from .paired import set_compute_figures

    if run.pairing is None:
        return
    benches = {n: r.bench for n, r in run.rows.items() if r.bench is not None}
    if run.reference.bench is not None:
        benches["jax"] = run.reference.bench
    peak = run.pairing.peak_gflops
    if peak is None and run.reference.bench is not None:
        peak = run.reference.bench.extra.get("peak_gflops")
        run.pairing.peak_gflops, run.pairing.peak_how = peak, run.reference.bench.extra.get("peak_how", "")
    set_compute_figures(benches, run.reference.bench, peak)
