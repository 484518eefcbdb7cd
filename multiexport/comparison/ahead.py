"""The export worker that builds the target, started as soon as the signature is known.

Where the target's build imports a framework (keras-hub: TensorFlow, ~4 CPU s), the export worker that
builds it is the longest of the export phase. Started only once the compare has planned its exports, it
began that build after the compare's first reference and handoff. Started here instead (`run.export_pool.
AheadWorker`), it builds meanwhile, on the core this process leaves idle while its reference compiles, and
the export plan gives it the exports that need the built target (`exports.export_all`). What it exports
and how is unchanged: only when its process started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..run.export_pool import AheadWorker
from .exports import plan_with

if TYPE_CHECKING:
    from ..leaves import Signature
    from ..run.devices import DevicePlan
    from .stages import Context


def start_ahead(ctx: Context, sig: Signature, device: DevicePlan, early: Mapping[str, int]) -> AheadWorker | None:
    """The export worker that builds the target, started now; None where it would not help or might not fit:
    no TARGET string (exports in this process), a target whose build imported nothing (a worker builds it
    in about the time it imports jax), or memory for fewer than two exports at once beside the early workers
    `early` (name -> resident bytes), as the memory plan counts them: this worker holds the target while this
    process computes its reference."""
    if ctx.spec is None or not ctx.target_modules or not ctx.config.backends:
        return None
    plan = plan_with(ctx, sig, device, early)
    groups = len({*plan.export_need} - {*plan.refused})
    if plan.refused or plan.close_early or plan.exports_at_once < min(2, groups):
        return None
    return AheadWorker(ctx.spec)
