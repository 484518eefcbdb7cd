"""One compare run, phase by phase: what `compare.compare` does, with the state each phase needs.

Phases: claim the output directory; signature and device plan; trials and the jax.jit reference (with
its determinism check and the trials that are no evidence); exports (run.exports: overlapping workers,
a stage and what builds on it in one; in paired mode each runner's worker starts, and imports its
runtime, as soon as its artifact is on disk); then, one at a time so no two timed loops share the
machine, each runner's timed load, the reference's benchmark and each backend's run; results and
reports, always, also when a signal stops the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import Interrupted, MultiexportError
from ..export.manifest import Manifest
from ..files.paths import safe_component
from ..results import BackendResult, Reference, Results, SignatureData, Status, TrialInfo
from ..results.schema import from_data
from . import exports, timing
from .rundir import claim_run_dir, mark
from .supervisor import stop_requested

if TYPE_CHECKING:
    from ..results import Pairing
    from .paired import Servers
    from .timing import EarlyWorkers


class CompareRun:
    # set by timing.prespawn / plan_timing (declared only: _results reads pairing with getattr, absent before then)
    servers: Servers | None
    pairing: Pairing | None
    available_before: int | None

    def __init__(self, target, config, target_spec: str | None, progress: Callable[[str], None],
                 early: EarlyWorkers | None = None):
        self.target, self.config, self.spec, self.progress = target, config, target_spec, progress
        self.early = early  # paired workers started before the target was built: timing.prespawn adopts them
        self.out = Path(config.out_dir or Path("multiexport-out") / safe_component(target.name))
        self.rows: dict[str, BackendResult] = {}
        self.results: Results | None = None

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> Results:
        claim_run_dir(self.out)
        finished = False
        try:
            try:
                early = self.config.device == "cpu"  # no GPU plan needed to know which workers to start
                self.servers = None
                try:
                    if early:
                        timing.prespawn(self)
                    self._prepare()
                    if not early:
                        timing.prespawn(self)
                    timing.recheck_prespawn(self)
                    artifacts = exports.export_all(self)
                    timing.plan_timing(self, artifacts)
                    if self.servers is not None:
                        timing.start_servers(self, artifacts)
                    self._bench_reference()
                    for name in self.config.backends:
                        if name in artifacts:
                            self._run_backend(name, artifacts[name])
                    if self.servers is not None:
                        timing.paired_rounds(self)
                finally:
                    if self.servers is not None:
                        self.servers.close()
                timing.compute_figures(self)
                if self.config.floor and self.pairing is not None:
                    timing.floors(self)
            except _Stop:
                pass
            except (Interrupted, KeyboardInterrupt):
                finished = True
                self._finish(interrupted=True)
                raise
            except Exception:
                # A signal's exception raised inside a runtime's callback comes back wrapped in the runtime's own
                # error (JaxRuntimeError): the stop request is the truth, not the wrapper.
                signum = stop_requested()
                if signum is None:
                    raise
                finished = True
                self._finish(interrupted=True)
                raise Interrupted(signum) from None
            finished = True
            return self._finish(interrupted=False)
        finally:
            if not finished:  # a user mistake or a bug stopped the run before any results: say so, not "running"
                mark(self.out, "failed")

    def _prepare(self) -> None:
        from ..environment import environment
        from ..export.contract import usable_cpus
        from ..measure.plan import bench_feeds, out_of_domain
        from ..measure.reference import ReferenceRunner, error_vs, float64_outputs, nondeterminism
        from ..measure.tolerance import check_patterns
        from ..signature import build_signature
        from ..versions import dist_version
        from .devices import probe_gpu, resolve

        config = self.config
        for name in config.backends:
            self.rows[name] = BackendResult(name, Status.NOT_RUN, "not reached", display=_display(name))
        if config.device != "cpu":
            self.progress(f"which backends see a GPU ({', '.join(config.backends)})")
        self.plan = resolve(config.device, probe_gpu(config.backends) if config.device != "cpu" else {})
        if self.plan.note:
            self.progress(self.plan.note)
        self.sig = sig = build_signature(self.target)
        # Every check that needs the signature, before anything is printed or run: a usage error is one line.
        check_patterns(config.tolerances, [leaf.name for leaf in sig.outputs], "Tolerance")
        self.trials = self._trials()
        self.bench_feeds = (bench_feeds(sig, self.trials, config.batch_sizes, config.seed, config.val_ranges,
                                        self.target.batch_leaves) if config.bench else [])
        self.progress(f"signature of '{self.target.name}': {len(sig.inputs)} input leaves, {len(sig.outputs)} outputs")
        self.threads = config.threads or usable_cpus()
        jax_gpu = self.plan.chosen == "gpu" and (self.plan.found.get("xla") or {}).get("gpu")
        self.ref_device = "gpu" if jax_gpu else "cpu"
        self.ref_runner = ReferenceRunner(self.target, sig, self.ref_device)
        self.progress(f"reference outputs (jax.jit) for {len(self.trials)} trials")
        self.ref_outputs = [self.ref_runner(t.feed) for t in self.trials]
        why = nondeterminism(self.target, sig, self.ref_runner, self.trials[0].feed)
        self.excluded = out_of_domain(self.trials, self.ref_outputs)
        self.truth = float64_outputs(self.target, sig, [t.feed for t in self.trials]) if config.reference == "float64" else None
        self.reference = Reference(kind="jax.jit", jax_version=dist_version("jax"), device=self.ref_device,
                                   lifted_weights=self.ref_runner.lifted_weights, deterministic=why is None)
        if self.truth is not None:
            self.reference.jax_error_vs_float64 = error_vs(self.ref_outputs, self.truth)
        self.environment = environment()
        self.fingerprint = sig.fingerprint(self.target.fn) if self.spec is not None else None
        if why:
            for row in self.rows.values():
                row.status, row.reason = Status.NONDETERMINISTIC_TARGET, why
            raise _Stop()

    def _trials(self):
        from ..export.feed import check_feed
        from ..export.manifest import LeafBinding
        from ..measure.inputs import Trial, make_trials

        config, sig = self.config, self.sig
        if config.inputs is not None:
            leaves = [LeafBinding(leaf.name, leaf.alias, list(leaf.shape), leaf.dtype) for leaf in sig.inputs]
            arrays, dims = check_feed(leaves, config.inputs)
            return [Trial("inputs", {leaf.name: a for leaf, a in zip(sig.inputs, arrays)}, dims, "the given inputs")]
        trials = make_trials(sig.inputs, examples=sig.example_feed(), trials=config.trials, seed=config.seed,
                             val_ranges=config.val_ranges, dim_sizes=config.dim_sizes)
        if not trials:
            raise MultiexportError(f"Target '{sig.name}' | produced no trials")
        return trials

    # -- timed work, one at a time ---------------------------------------------------------------------
    def _bench_reference(self) -> None:
        from ..measure.bench import bench_sizes, memory_now
        from ..results import BenchResult
        from .runs import run_artifact

        bench = self.config.bench
        if not bench:
            return
        paired = self.servers is not None and self.spec is not None
        self.progress("reference: " + ("cold start of jax.jit" if paired else "benchmark jax.jit"))
        if paired:
            from .paired import serve_artifact

            assert self.servers is not None  # paired implies it
            outcome = serve_artifact(self.servers, "jax", [], self.bench_feeds, {}, bench)
            if outcome.failure is None and outcome.bench is not None:
                self.reference.bench = outcome.bench
            return
        if self.spec is not None:
            outcome = run_artifact(["reference", self.spec], [], self.bench_feeds, {}, bench, self.ref_device,
                                   self.threads, self.config.timeout, peak=True)
            if outcome.failure is None and outcome.bench is not None:
                self.reference.bench = outcome.bench
                return
        t0 = time.perf_counter()
        sizes = bench_sizes(self.ref_runner, list(self.bench_feeds), bench)
        for size, (_, feed) in zip(sizes, self.bench_feeds):
            size.flops = self.ref_runner.flops(feed)
            if size.flops and size.latency:
                size.gflops_per_s = size.flops / (size.latency.p50_ms / 1e3) / 1e9
        self.reference.bench = BenchResult(load_s=0.0, sizes=sizes, memory=memory_now(), artifact_bytes=None,
                                           runner=self.ref_runner.describe(), config=bench.to_json(), process="parent",
                                           extra={"bench_s": time.perf_counter() - t0})

    def _run_backend(self, name: str, manifest: Manifest) -> None:
        from .runs import check_row

        check_row(self, self.rows[name], manifest)

    # -- results -------------------------------------------------------------------------------------
    def _finish(self, interrupted: bool) -> Results:
        from ..report.render import write_reports

        for row in self.rows.values():
            if interrupted and row.status is Status.NOT_RUN:
                row.status, row.reason = Status.INTERRUPTED, "interrupted before this backend finished"
        sig = getattr(self, "sig", None)
        signature = (from_data(SignatureData, sig.to_json(), "signature") if sig is not None
                     else SignatureData(name=self.target.name, inputs=[], outputs=[]))
        trials = [TrialInfo(t.name, dict(t.dims), t.origin) for t in getattr(self, "trials", [])]
        results = Results(
            target=self.target.name, signature=signature, trials=trials, backends=self.rows,
            reference=getattr(self, "reference", Reference()), environment=getattr(self, "environment", {}),
            out_dir=str(self.out), device=self.plan.to_json() if hasattr(self, "plan") else {},
            interrupted=interrupted, state="interrupted" if interrupted else "finished", config=self.config.to_json(),
            pairing=getattr(self, "pairing", None))
        results.write(self.out / "results.json")
        write_reports(results, self.out)
        mark(self.out, results.state)
        self.results = results
        return results


class _Stop(Exception):
    """Every row has its verdict already (e.g. a nondeterministic target): skip to the results."""


def _display(name: str) -> dict[str, str]:
    from ..export.registry import display

    return display(name)
