"""The export worker that builds the target, started before the compare's first reference.

Where the target's build imports a framework (keras-hub: TensorFlow, ~4 CPU s), the export worker that
builds it is the longest of the export phase. Started only once the compare had planned its exports, it
began that build after the compare's first reference and handoff. Started here instead (`run.export_pool.
AheadWorker`), it builds meanwhile, on the core this process leaves idle while its reference compiles, and
the export plan gives it the exports that need the built target (`exports.export_all`). What it exports
and how is unchanged: only when its process started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..run.export_pool import AheadWorker
from .exports import export_groups, needs_target, plan_for, unavailable

if TYPE_CHECKING:
    from .stages import Context, Prepared


def start_ahead(ctx: Context, planned: Prepared, early: Mapping[str, int]) -> AheadWorker | None:
    """The export worker that builds the target, started now (`planned`: the Prepared before any reference
    output, `prepare.prepare`); None where it would not help or might not fit: no TARGET string (exports in
    this process), a target whose build imported nothing (a worker builds it in about the time it imports
    jax), one core (no idle core to build on), no export that needs the built target among those whose
    converters are installed here (as the export plan decides it: `exports.needs_target`), or memory for
    fewer exports at once than there are export groups (up to two) beside the early workers `early` (name ->
    resident bytes): this worker holds the target while this process computes its reference."""
    if ctx.spec is None or not ctx.target_modules or ctx.threads < 2:
        return None
    plan = plan_for(ctx, planned, early)
    # what the workers will export: not refused, and its converter installed here (a plan without it gives
    # this worker nothing: ONNX on a machine without it would still ask for the build)
    groups = export_groups([n for n in plan.export_need if n not in plan.refused and unavailable(n) is None])
    if not groups or plan.refused or plan.close_early or plan.exports_at_once < min(2, len(groups)):
        return None
    if not any(needs_target(ctx, planned, group) for group in groups):
        return None
    return AheadWorker(ctx.spec)
