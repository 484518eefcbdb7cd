"""`compare`: one target, every selected backend, parity against jax.jit, latency, one results.json.

The compare is a chain of typed stages (`stages.py` holds the values they pass on), orchestrated by
`session.run_compare`; every rule lives where it belongs (DESIGN.md's data flow):

    CompareConfig (validated, config.py) -> Context (the request, fixed) -> claimed output directory
    -> DevicePlan and Prepared (prepare.py: signature, trials, the jax.jit reference and its checks)
    -> exports (exports.py: the policy; run/export_pool.py schedules the overlapping workers; a stage and the
       backends built on it share one; the paired workers start and import their runtimes meanwhile: no timed
       loop runs until the exports are done)
    -> Timing (timing.py: paired or sequential, with the reason) -> per runner, one after another: timed load,
       cold start and parity feeds (check.py, native_check.py); then the paired rounds
    -> Results, written with the caller's reports (report.md, report.html)

Each stage returns a frozen outcome per backend (outcomes.py); each row is built once from them (row.py), its
status and reason decided in one place with a documented precedence (verdict.py).
The process machinery (workers, the supervisor, paired servers) is `multiexport.run`'s. A backend that is
missing, fails to export or load, crashes, is killed or hangs becomes a row with its category and reason;
the others finish, and results are written even when a signal stops the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import Interrupted, UsageError
from ..files.temporary import remove_orphaned
from ..leaves import Target
from ..report.render import write_reports
from ..results import Results
from ..system.process import stop_on_signals
from .config import CompareConfig, CompareOptions
from .session import run_compare

if TYPE_CHECKING:
    from ..measure.timeline import Timeline
    from .timing import EarlyWorkers


def compare(target: Target, config: CompareConfig | None = None, *, target_spec: str | None = None,
            progress: Callable[[str], None] = lambda message: None, early_workers: EarlyWorkers | None = None,
            timeline: Timeline | None = None, target_modules: frozenset[str] = frozenset(), **options: Any) -> Results:
    """Export `target` with each backend, run each artifact in a worker, check parity, benchmark.

    Give a `CompareConfig`, or its fields as keyword arguments. target_spec (a TARGET string) lets every
    export run in a worker process of its own (overlapping), and the reference be benchmarked in a worker
    like every backend; without it, exports run in this process one after another. early_workers: paired
    workers started for target_spec before the target was built (`comparison.timing.start_early`, as the
    CLI does), adopted when they fit this compare, else closed. timeline: the caller's, when it started the
    clock before (building the target); results.json gets every step. target_modules: the top-level packages
    the caller's build of the target imported (`leaves.target.top_level_packages`, after minus before): the
    export plan puts the exports that need the built target in one worker only then. Returns the Results, also written
    to the output directory with report.md and report.html.
    """
    remove_orphaned()  # what an earlier run killed outright could not remove itself (the CLI does it too)
    if config is None:
        config = CompareConfig(**options)
    elif options:
        raise UsageError(f"compare | got a CompareConfig and options {', '.join(options)}, expected one or the other")
    with stop_on_signals():
        return run_compare(target, config, target_spec, progress, early_workers, report=write_reports,
                           timeline=timeline, target_modules=target_modules)


__all__ = ["CompareConfig", "CompareOptions", "Interrupted", "compare"]
