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

from ..errors import USAGE_EXIT, Interrupted, MultiexportError, present
from ..exporting.manifest import Manifest
from ..files.paths import safe_component
from ..results import BackendResult, Reference, Results, SignatureData, Status, TrialInfo
from ..results.schema import from_data
from ..system.process import stop_requested
from . import exports, timing
from .rundir import claim_run_dir, mark

if TYPE_CHECKING:
    from ..measure.timeline import Timeline
    from ..results import Pairing
    from .paired import Servers
    from .timing import EarlyWorkers


class CompareRun:
    # set by timing.prespawn / plan_timing (declared only: _results reads pairing with getattr, absent before then)
    servers: Servers | None
    pairing: Pairing | None
    available_before: int | None

    def __init__(self, target, config, target_spec: str | None, progress: Callable[[str], None],
                 early: EarlyWorkers | None = None, report: Callable[[Results, Path], object] | None = None,
                 timeline: Timeline | None = None):
        from ..measure.timeline import Timeline

        self.target, self.config, self.spec = target, config, target_spec
        self.timeline = timeline if timeline is not None else Timeline()
        self._say = progress
        # Writes the reports beside results.json (the caller's: run/ sits below report/ in the import order);
        # called before the directory is marked finished, also when a signal stopped the run.
        self.report = report
        self.early = early  # paired workers started before the target was built: timing.prespawn adopts them
        self.out = Path(config.out_dir or Path("multiexport-out") / safe_component(target.name))
        self.rows: dict[str, BackendResult] = {}
        self.results: Results | None = None
        self.sensitivity: dict[str, float] = {}  # per output leaf: how far rounding alone moves it (_prepare)

    def progress(self, message: str) -> None:
        """One step begins: said to the caller and marked on the timeline."""
        self.timeline.mark(message)
        self._say(message)

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> Results:
        claim = claim_run_dir(self.out)
        finished, usage_error = False, False
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
            except Exception as exc:
                # A signal's exception raised inside a runtime's callback comes back wrapped in the runtime's own
                # error (JaxRuntimeError): the stop request is the truth, not the wrapper.
                signum = stop_requested()
                if signum is None:
                    usage_error = isinstance(exc, MultiexportError) and exc.exit_code == USAGE_EXIT
                    raise
                finished = True
                self._finish(interrupted=True)
                raise Interrupted(signum) from None
            finished = True
            return self._finish(interrupted=False)
        finally:
            if not finished:  # a user mistake or a bug stopped the run before any results: say so, not "running"
                mark(self.out, "failed")
            claim.release(wrote_nothing=usage_error)

    def _prepare(self) -> None:
        from ..environment import environment
        from ..exporting.contract import usable_cpus
        from ..leaves import build_signature
        from ..measure.plan import bench_feeds, out_of_domain
        from ..measure.reference import ReferenceRunner, error_vs, float64_outputs, nondeterminism, not_float64, without
        from ..measure.tolerance import check_patterns
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
        if why is None:
            self._measure_rounding()
        self.excluded = out_of_domain(self.trials, self.ref_outputs)
        self.truth = float64_outputs(self.target, sig, [t.feed for t in self.trials]) if config.reference == "float64" else None
        self.reference = Reference(kind="jax.jit", jax_version=dist_version("jax"), device=self.ref_device,
                                   lifted_weights=self.ref_runner.lifted_weights, deterministic=why is None,
                                   rounding_sensitivity=dict(self.sensitivity) or None)
        if self.truth is not None:
            narrow = not_float64(self.truth)
            if narrow:
                self.truth = without(self.truth, narrow)
                self.reference.no_float64_truth = narrow
                self.progress(f"--reference float64: {', '.join(narrow)} not computed in float64 (the function "
                              "casts back), so no error against float64 is reported for them")
            self.reference.jax_error_vs_float64 = error_vs(self.ref_outputs, self.truth)
        self.environment = environment()
        self.fingerprint = sig.fingerprint(self.target.fn) if self.spec is not None else None
        if why:
            for row in self.rows.values():
                row.status, row.reason = Status.NONDETERMINISTIC_TARGET, why
            raise _Stop()

    def _measure_rounding(self) -> None:
        """How far rounding alone moves each float output leaf no --tolerance covers (measure/rounding.py),
        on the first trial: the default tolerances widen to it. A function it cannot trace again keeps them."""
        from ..dtypes import is_float, parse_dtype
        from ..measure.rounding import DRAWS, rounding_sensitivity
        from ..measure.tolerance import overridden

        leaves = [leaf for leaf in self.sig.outputs
                  if is_float(parse_dtype(leaf.dtype)) and not overridden(leaf.name, self.config.tolerances)]
        if not leaves:
            return
        self.progress(f"rounding sensitivity of jax.jit ({DRAWS} runs with inputs and weights moved by one rounding step)")
        trial = self.trials[0]
        try:
            found = rounding_sensitivity(self.target, self.sig, trial.feed, self.ref_outputs[0], self.ref_device)
        except Exception as exc:  # a measurement that widens tolerances must never stop the compare
            self.progress(f"rounding sensitivity not measured ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}): "
                          "default tolerances apply")
            return
        self.sensitivity = {leaf.name: found[leaf.name] for leaf in leaves if leaf.name in found}

    def _trials(self):
        from ..exporting.feed import check_feed
        from ..exporting.manifest import LeafBinding
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

            outcome = serve_artifact(present(self.servers, "paired implies live servers"), "jax", [], self.bench_feeds, {}, bench)
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
        for row in self.rows.values():
            if interrupted and row.status is Status.NOT_RUN:
                row.status, row.reason = Status.INTERRUPTED, "interrupted before this backend finished"
            clean_reasons(row)
        sig = getattr(self, "sig", None)
        signature = (from_data(SignatureData, sig.to_json(), "signature") if sig is not None
                     else SignatureData(name=self.target.name, inputs=[], outputs=[]))
        trials = [TrialInfo(t.name, dict(t.dims), t.origin) for t in getattr(self, "trials", [])]
        results = Results(
            target=self.target.name, signature=signature, trials=trials, backends=self.rows,
            reference=getattr(self, "reference", Reference()), environment=getattr(self, "environment", {}),
            out_dir=str(self.out), device=self.plan.to_json() if hasattr(self, "plan") else {},
            interrupted=interrupted, state="interrupted" if interrupted else "finished", config=self.config.to_json(),
            pairing=getattr(self, "pairing", None), timeline=self.timeline.steps())
        try:
            results.write(self.out / "results.json")
            if self.report is not None:
                self.report(results, self.out)
        except OSError as exc:  # a full disk: the run is over, and the marker must not say it still works
            from ..errors import EnvironmentProblem
            from ..exporting.outdir import disk_error
            from .rundir import mark_in_place

            mark_in_place(self.out, "failed")
            mapped = disk_error(exc, self.out)
            if mapped is exc:
                raise
            raise EnvironmentProblem(f"{mapped}; the results of this run were not saved: free space (or choose "
                                     "another --out) and run the compare again") from exc
        mark(self.out, results.state)
        self.results = results
        return results


def clean_reasons(row) -> None:
    """A row's reasons as results.json keeps them: a converter's colours (ANSI escapes) removed, any other
    control or bidirectional character escaped (`files.text.clean_message`)."""
    from ..files.text import clean_message

    row.reason = clean_message(row.reason)
    for size in row.bench.sizes if row.bench is not None else []:
        size.reason = clean_message(size.reason)


class _Stop(Exception):
    """Every row has its verdict already (e.g. a nondeterministic target): skip to the results."""


def _display(name: str) -> dict[str, str]:
    from ..exporting.registry import display

    return display(name)
