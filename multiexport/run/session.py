"""One compare run, phase by phase: what `compare.compare` does, with the state each phase needs.

Phases: claim the output directory; signature and device plan; trials and the jax.jit reference (with
its determinism check and the trials that are no evidence); exports (overlapping workers); then, one
at a time so no two timed loops share the machine, the reference's benchmark and each backend's run
worker; results and reports, always, also when a signal stops the run.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import Interrupted, MultiexportError
from ..export.manifest import Manifest
from ..files.paths import safe_component
from ..results import BackendResult, Binding, Reference, Results, SignatureData, Status, TrialInfo
from ..results.schema import from_data
from . import timing
from .rundir import claim_run_dir, mark
from .supervisor import stop_requested

if TYPE_CHECKING:
    from ..results import Pairing
    from .paired import Servers


class CompareRun:
    # set by timing.plan_timing (declared only: _results reads pairing with getattr, absent before then)
    servers: Servers | None
    pairing: Pairing | None

    def __init__(self, target, config, target_spec: str | None, progress: Callable[[str], None]):
        self.target, self.config, self.spec, self.progress = target, config, target_spec, progress
        self.out = Path(config.out_dir or Path("multiexport-out") / safe_component(target.name))
        self.rows: dict[str, BackendResult] = {}
        self.results: Results | None = None

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> Results:
        claim_run_dir(self.out)
        finished = False
        try:
            try:
                self._prepare()
                artifacts = self._export_all()
                timing.plan_timing(self, artifacts)
                try:
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

    # -- exports -------------------------------------------------------------------------------------
    def _export_all(self) -> dict[str, Manifest]:
        todo = []
        for name in self.config.backends:
            row = self.rows[name]
            if name in self.plan.excluded:
                row.status, row.reason = Status.NO_GPU, self.plan.excluded[name]
                continue
            todo.append(name)
        jobs = self._export_jobs(len(todo))
        artifacts: dict[str, Manifest] = {}
        if self.spec is None or jobs == 1:
            for name in todo:
                manifest = self._export(name)
                if manifest is not None:
                    artifacts[name] = manifest
            return artifacts
        self.progress(f"export with {', '.join(todo)} ({jobs} at a time, each in its own worker)")
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {name: pool.submit(self._export, name) for name in todo}
            for name in todo:
                manifest = futures[name].result()
                if manifest is not None:
                    artifacts[name] = manifest
        return artifacts

    def _export_jobs(self, count: int) -> int:
        """How many exports may overlap: the cores, and what memory allows (~3x the weights per export)."""
        import os

        if self.config.export_jobs:
            return min(self.config.export_jobs, max(count, 1))
        weights = int(self.sig.weights.get("baked_bytes", 0)) + int(self.sig.weights.get("input_bytes", 0))
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            available = 8 << 30
        by_memory = max(1, int(available // max(3 * weights + (1 << 30), 1)))
        return max(1, min(count, self.threads, by_memory))

    def _export(self, name: str) -> Manifest | None:
        from ..export.contract import ExportOptions
        from ..export.registry import get_backend
        from .workers import run_worker, start_work_dir

        row, config = self.rows[name], self.config
        try:
            backend = get_backend(name)
        except MultiexportError as exc:
            row.status, row.reason = Status.UNAVAILABLE, str(exc)
            return None
        status = backend.available()
        if not status.ok:
            row.status, row.reason = Status.UNAVAILABLE, status.reason
            return None
        # No load check in the export worker: the run worker loads the artifact next, and the backend classifies
        # a failure there the same way (one root cause, one category), without paying the load twice.
        from ..measure.plan import sizes_checked

        static = sizes_checked(self.sig, self.trials, self.bench_feeds) if config.native and name == "xla" else {}
        options = ExportOptions.for_device(self.plan.chosen, keep_unused=config.keep_unused,
                                           external_weights=config.external_weights, static_sizes=static,
                                           backend_options=dict(config.backend_options.get(name, {})), check_load=False)
        directory = self.out / name
        self.progress(f"{name}: export" + (" in a worker process" if self.spec else ""))
        t0 = time.perf_counter()
        if self.spec is not None:
            work = start_work_dir("export")
            payload = {"keep_unused": options.keep_unused, "platforms": list(options.platforms or []) or None,
                       "external_weights": options.external_weights, "backend_options": dict(options.backend_options),
                       "static_sizes": {d: list(v) for d, v in options.static_sizes.items()}, "check_load": False}
            result = run_worker(["export", self.spec, name, str(directory), str(work), "--options", json.dumps(payload)],
                                work, config.timeout, expect="export.json")
            result.close()
            if result.failure:
                row.status, row.reason = Status.parse(result.failure[0]), result.failure[1]
                return None
            info = result.data["export.json"]
            if info.get("fingerprint") != self.fingerprint:
                row.status, row.reason = Status.NONDETERMINISTIC_TARGET, (
                    f"Target '{self.target.name}' | loads with different example values or weights in a fresh process "
                    "(random values without a fixed seed?), expected the same: seed them, or compare from Python with "
                    "multiexport.compare(...), which exports in this process")
                return None
            row.export_seconds, row.export_cpu_seconds = round(info["seconds"], 3), round(info["cpu_seconds"], 3)
            row.export_peak_rss_bytes = info.get("peak_rss_bytes")
        else:
            try:
                backend.export(self.target.fn, self.sig, directory, options)
            except MultiexportError as exc:
                row.status, row.reason = Status.parse(getattr(exc, "category", "export-failed")), str(exc)
                if row.status is Status.RUN_FAILED:
                    row.status = Status.EXPORT_FAILED
                return None
            row.export_seconds = round(time.perf_counter() - t0, 3)
        manifest = Manifest.read(directory)
        row.artifact = str(directory)
        row.binding = [Binding(b.name, b.used, b.param, _caller_key(manifest, b)) for b in manifest.inputs]
        row.warnings = list(manifest.warnings)
        row.weights = {k: v for k, v in manifest.weights.items() if k != "tensors"}
        row.versions, row.requires, row.supports = dict(manifest.versions), dict(manifest.requires), dict(manifest.supports)
        row.export_setup = manifest.format.get("setup")
        return manifest

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


def _caller_key(manifest: Manifest, binding) -> str | None:
    """The key a caller must still feed for a leaf the module does not read (a declared, unread input)."""
    return binding.param if not binding.used and isinstance(binding.param, str) else None
