"""A row's status and reason, decided here and nowhere else, from what its stages returned.

Precedence (the first that applies decides; a later stage never overrides an earlier one's failure):

1. the target: the reference (or the target's fingerprint in a fresh process) is nondeterministic;
2. the gate, before any export: no GPU for this backend, an unsupported precision, the backend unavailable;
3. the export failed (its worker's category; a bare run-failed from the export stage is export-failed);
4. the check failed: the artifact did not load, run or benchmark in its run worker (its category);
5. no trial was evidence (every trial left the model's domain): run-failed;
6. a reduced-precision row: its accuracy budget (ok, or accuracy-failed with the leaves beyond it);
7. parity: ok, or parity-failed with the leaves beyond tolerance;
a row no stage reached is not-run ("not reached"), or interrupted when a signal stopped the run.

The same judgement (6, 7) gives a native consumer's verdict (`judged`), so "passed" means one thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..status import Status
from .outcomes import Failure, RowOutcomes

if TYPE_CHECKING:
    from ..results import AccuracyVerdict, ParityVerdict

NOT_REACHED = "not reached"
INTERRUPTED = "interrupted before this backend finished"
NO_EVIDENCE = "no trial was evidence (every trial left the model's domain)"


def decide(outcomes: RowOutcomes, interrupted: bool = False) -> tuple[Status, str]:
    """The row's status and reason (the precedence above)."""
    if outcomes.failure is not None:  # target, then gate: a row has at most one of them
        return _failed(outcomes.failure)
    if isinstance(outcomes.export, Failure):
        return _failed(outcomes.export)
    check = outcomes.check
    if outcomes.export is None or check is None:
        return (Status.INTERRUPTED, INTERRUPTED) if interrupted else (Status.NOT_RUN, NOT_REACHED)
    if check.failure is not None:
        return _failed(check.failure)
    if check.evidence and check.accuracy is not None:
        return judged(check.parity, check.accuracy, check.notes)
    if not check.evidence:
        return Status.RUN_FAILED, NO_EVIDENCE
    return judged(check.parity, None, check.notes)


def judged(parity: ParityVerdict | None, accuracy: AccuracyVerdict | None, notes: Sequence[str] = ()) -> tuple[Status, str]:
    """The verdict of outputs that ran: a reduced-precision artifact by its accuracy budget (float parity stays
    as figures), any other by parity. An ok verdict's reason is its notes; a failed one's, what failed."""
    if accuracy is not None:
        return (Status.OK, "; ".join(notes)) if accuracy.passed else (Status.ACCURACY_FAILED, accuracy.summary())
    if parity is not None and parity.passed:
        return Status.OK, "; ".join(notes)
    return Status.PARITY_FAILED, parity.summary() if parity is not None else "no parity verdict"


def _failed(failure: Failure) -> tuple[Status, str]:
    status = Status.parse(failure.category)
    if failure.stage == "export" and status is Status.RUN_FAILED:
        status = Status.EXPORT_FAILED  # an export that failed never ran anything: its stage names it
    return status, failure.reason
