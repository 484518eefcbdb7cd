"""What the compare hands its export workers, so that each does less: the target itself as its signature and
StableHLO modules (an export that needs nothing else does not build the target: exporting/handoff.py,
leaves/handed.py), and jax.jit's outputs at the example (the symbolic check's reference, which a worker would
otherwise compile the target for: exporting/symbolic_check.py). Each lives in a private temporary directory for
the export phase only.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..dtypes import is_float
from ..exporting.handoff import write_handoff
from ..files.npz import save_npz
from ..run.workers import start_work_dir
from .stages import Context, Prepared

# The most bytes of reference outputs written for the export workers: past it (a decoder's whole KV cache) each
# worker computes its own, rather than the compare writing and every worker reading that much.
EXPECTED_LIMIT_BYTES = 512 << 20


@dataclass(frozen=True)
class Given:
    """What the compare hands its export workers, each None where nothing is handed.

    handoff: the target as its signature and StableHLO modules (`handed_target`, exporting/handoff.py).
    expected: jax.jit's outputs at the example, for the symbolic check (`example_outputs`).
    """

    handoff: Path | None = None
    expected: Path | None = None


def with_builder(groups: list[list[str]], builds: list[bool]) -> list[list[str]]:
    """`groups` with those that need the target built (`builds`, one flag per group) merged into one, first:
    one worker builds the target and exports them all, and the others export from the handed modules without
    building it. Unchanged when none or all of them need it."""
    if all(builds) or not any(builds):
        return groups
    return [[n for g, b in zip(groups, builds) if b for n in g], *(g for g, b in zip(groups, builds) if not b)]


@contextmanager
def example_outputs(ctx: Context, prep: Prepared) -> Iterator[Path | None]:
    """An .npz of jax.jit's outputs at the target's example, for the export workers' symbolic check
    (`exporting.symbolic_check.remember`), removed on exit; None when the compare's first trial is not the
    example itself or its reference is not plain jax.jit on the CPU (another device or matmul precision),
    so each worker computes its own (also past EXPECTED_LIMIT_BYTES)."""
    examples = prep.sig.example_feed()
    first = prep.trials[0].feed if prep.trials else {}
    same = (bool(prep.ref_outputs) and prep.ref_device == "cpu" and ctx.config.matmul_precision == "default"
            and len(examples) == len(prep.sig.inputs) and set(first) == set(examples)
            and all(first[n] is v or (np.shape(first[n]) == np.shape(v)
                                       and np.asarray(first[n]).dtype == np.asarray(v).dtype
                                       and np.array_equal(first[n], v, equal_nan=is_float(np.asarray(v).dtype)))
                    for n, v in examples.items())
            and sum(np.asarray(a).nbytes for a in prep.ref_outputs[0].values()) <= EXPECTED_LIMIT_BYTES)
    if not same:
        yield None
        return
    work = start_work_dir("expected")
    try:
        yield save_npz(work / "expected.npz", dict(prep.ref_outputs[0]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def handed_target(ctx: Context, prep: Prepared) -> Iterator[Path | None]:
    """The target handed to the export workers (exporting/handoff.py: its signature and StableHLO modules, so
    an export that needs nothing else does not build the target in its worker), removed on exit; None where
    nothing is handed (no fingerprint to hand with it, weights too large, a module jax.export refuses)."""
    if prep.fingerprint is None:
        yield None
        return
    work = start_work_dir("handoff")
    try:
        yield work if write_handoff(ctx.target.fn, prep.sig, prep.fingerprint, work) else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
