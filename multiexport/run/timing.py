"""The timed phase of a compare: paired rounds or one runner after another, the peak, and the floors.

Functions of the running `session.CompareRun` (its rows, feeds, config and the `Servers` of paired mode),
kept apart so the session reads as the phases it runs.
"""

from __future__ import annotations

from ..export.manifest import Manifest
from ..results import Status


def plan_timing(run, artifacts: dict[str, Manifest]) -> None:
    """Paired rounds when every runner fits in memory at once (and pairing is not turned off), else one
    worker after another. In paired mode each runner's one worker gives its parity and cold start too."""
    from ..measure.pairing import available_memory, fits_in_memory
    from ..results import Pairing
    from .paired import Servers, directory_bytes

    bench = run.config.bench
    run.pairing, run.row_bench, run.servers = None, bench, None
    if not bench:
        return
    if not run.config.paired:
        run.pairing = Pairing(mode="sequential", reason="sequential: asked for (--sequential)")
        return
    sizes = {name: directory_bytes(run.rows[name].artifact) for name in artifacts}
    if run.spec is not None:
        sizes["jax"] = int(run.sig.weights.get("baked_bytes", 0))
    fits, reason = fits_in_memory(sizes, available_memory())
    if len(sizes) < 2:
        fits, reason = False, "sequential: only one runner to time"
    if not fits:
        run.pairing = Pairing(mode="sequential", reason=reason)
        return
    if run.spec is None:
        reason += "; the reference (no TARGET string to load it in a worker) is timed on its own, before the rounds"
    run.pairing = Pairing(mode="paired", reason=reason, rounds=run.config.rounds)
    run.row_bench = bench  # the cold-start part of it: the steady state comes from the rounds
    run.servers = Servers(run.plan.chosen, run.threads, run.config.timeout)


def start_servers(run, artifacts: dict[str, Manifest]) -> None:
    """One worker per runner, loaded once, alive until the rounds are done (loads one after another)."""
    assert run.servers is not None
    if run.spec is not None:
        run.progress("reference: load jax.jit in its paired worker")
        run.servers.start("jax", ["reference", run.spec])
    for name in artifacts:
        run.progress(f"{name}: load in its paired worker")
        run.servers.start(name, ["run", run.rows[name].artifact])


def paired_rounds(run) -> None:
    from .paired import apply, pairing_result, run_rounds

    assert run.servers is not None and run.pairing is not None
    benches = {"jax": run.reference.bench} if "jax" in run.servers.alive and run.reference.bench else {}
    for name, row in run.rows.items():
        if row.status is Status.OK and row.bench is not None and name in run.servers.alive:
            benches[name] = row.bench
    unsupported = {n: {i for i, s in enumerate(b.sizes) if s.status is not Status.OK} for n, b in benches.items()}
    timed, peak = run_rounds(run.servers, list(benches), run.bench_feeds, unsupported, run.config.bench,
                             run.config.rounds, run.progress)
    failures = {n: f for n, f in run.servers.failures.items() if n in benches}
    run.pairing = pairing_result("paired", run.pairing.reason, timed, run.bench_feeds, run.config.rounds,
                                  run.config.bench, failures, peak)
    apply(run.pairing, timed, benches, {n: r.native for n, r in run.rows.items() if r.native is not None})


def floors(run) -> None:
    """The per-call floor of every timed runtime: the floor target compared the same way, in OUT/floor."""
    import dataclasses

    from ..examples import floor

    timed = [n for n, r in run.rows.items() if r.status is Status.OK and r.bench is not None]
    if not timed:
        return
    run.progress(f"per-call floor of {', '.join(timed)} (one add on 8 floats, the same calling paths)")
    config = dataclasses.replace(run.config, backends=tuple(timed), out_dir=run.out / "floor", trials=1,
                                 batch_sizes=None, native=False, native_plugin=None, floor=False, inputs=None,
                                 dim_sizes={}, val_ranges={}, tolerances={}, backend_options={})
    spec = "multiexport.examples:floor" if run.spec is not None else None
    from .session import CompareRun

    results = CompareRun(floor(), config, spec, lambda m: run.progress(f"floor: {m}")).run()
    benches = {"jax": results.reference.bench, **{n: r.bench for n, r in results.backends.items()}}
    for name, bench in benches.items():
        measured = bench.measured() if bench is not None else []
        if measured:
            latency = measured[0].latency
            assert latency is not None  # measured() keeps only the sizes with a latency
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
