"""The export worker that builds the target, started before the compare's first reference, or the reference's
paired worker, which has built it already.

Where the target's build imports a framework (keras-hub: TensorFlow, ~4 CPU s), the export worker that
builds it is the longest of the export phase. Started only once the compare had planned its exports, it
began that build after the compare's first reference and handoff. Started here instead (`run.export_pool.
AheadWorker`), it builds meanwhile, on the core this process leaves idle while its reference compiles, and
the export plan gives it the exports that need the built target (`exports.export_all`). Where the compare has
a paired reference worker, that worker built the target as it started (run.serve): the exports that need it
are made there, before it loads anything (`run.servers.ReferenceExports`), and no process builds it for them.
What each export makes and how is unchanged: only the process it runs in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..run.export_pool import AheadWorker
from ..run.servers import ReferenceExports
from .exports import export_groups, needs_target, plan_for, unavailable
from .memory_plan import weight_bytes

if TYPE_CHECKING:
    from ..run.export_pool import BuildingWorker
    from ..run.servers import Servers
    from .stages import Context, Prepared

# The largest weights (baked and input, bytes) whose exports the reference's worker makes: what the converters
# leave resident there stays through the timed phase, which sizes that worker by its weights alone.
REFERENCE_EXPORTS_LIMIT_BYTES = 64 << 20


def start_ahead(ctx: Context, planned: Prepared, early: Mapping[str, int],
                servers: Servers | None = None) -> BuildingWorker | None:
    """The worker that makes the exports needing the built target: the reference's paired worker among
    `servers` when it builds this TARGET and the weights are small (`ReferenceExports`), else an export worker
    started now (`AheadWorker`). `planned`: the Prepared before any reference output (`prepare.prepare`).

    None where it would not help or might not fit: no TARGET string (exports in this process), a target whose
    build imported nothing (a worker builds it in about the time it imports jax), one core (no idle core to
    build on), no export that needs the built target among those whose converters are installed here (as the
    export plan decides it: `exports.needs_target`), or memory for fewer exports at once than there are export
    groups (up to two) beside the early workers `early` (name -> resident bytes): this worker holds the target
    while this process computes its reference."""
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
    weights = weight_bytes(planned.sig)
    if servers is not None and servers.reference_of(ctx.spec) and weights <= REFERENCE_EXPORTS_LIMIT_BYTES:
        return ReferenceExports(servers, ctx.spec)
    return AheadWorker(ctx.spec)
