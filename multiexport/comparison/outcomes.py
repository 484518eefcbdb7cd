"""What each stage of a compare hands on for one backend: frozen, typed values, never a row mutated in place.

A stage returns its outcome; `row.build_row` makes the results.json row once from them, and `verdict.decide`
alone turns them into the row's status and reason. The stages, in the order a row goes through them:

    target (prepare: the reference's determinism)  -> gate (device plan, precision, availability)
    -> export (in a worker, or in this process)    -> check (the run worker: load, parity, cold start / bench)
    -> native (compare --native: the Python-free consumer, beside the check)

Records measured later (the paired rounds) refine the bench and native records the check made, in place:
those are the measurement's own records (results.bench, results.native), not the row's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

if TYPE_CHECKING:
    from ..exporting.manifest import Manifest
    from ..results import AccuracyVerdict, BenchResult, Binding, NativeResult, ParityVerdict

# Where a failure happened, earliest first: the order is the precedence `verdict.decide` applies.
Stage = Literal["target", "gate", "export", "check"]
STAGES: tuple[Stage, ...] = ("target", "gate", "export", "check")


@dataclass(frozen=True)
class Failure:
    """A stage that stopped the row.

    stage: where ("target": the reference or the target's fingerprint; "gate": before any export — the device
        plan, the precision, the backend's availability; "export"; "check": the run worker's load, run or bench).
    category: the status value the stage classified it as (a `Status` value, or a worker's category that
        `Status.parse` maps); `verdict.decide` makes it the row's status.
    reason: why, and what to do.
    """

    stage: Stage
    category: str
    reason: str


@dataclass(frozen=True)
class Exported:
    """An export that worked: the artifact on disk and the facts the row reports from its manifest.

    artifact: the artifact directory. manifest: the manifest read back from it (what the check runs against).
    seconds, cpu_seconds: the export's wall and CPU time (cpu None when exported in this process).
    peak_rss_bytes: the export worker's peak resident memory (None in this process).
    binding: per input leaf, how the format binds it. warnings: the artifact's warnings.
    weights: where the artifact keeps its weights (the manifest's, tensors left out).
    versions, requires, supports: the manifest's. setup: one-time setup the export paid (`format.setup`).
    artifact_bytes: every file the export wrote. precision_facts: the manifest's `precision`, as data.
    child_peak_rss_bytes: the largest peak of a process the export started (None: none, or in this process).
    """

    artifact: str
    manifest: Manifest
    seconds: float | None
    cpu_seconds: float | None
    peak_rss_bytes: int | None
    binding: tuple[Binding, ...]
    warnings: tuple[str, ...]
    weights: Mapping[str, Any]
    versions: Mapping[str, str]
    requires: Mapping[str, Any]
    supports: Mapping[str, Any]
    setup: dict[str, Any] | None
    artifact_bytes: int
    precision_facts: dict[str, Any] | None
    child_peak_rss_bytes: int | None = None


@dataclass(frozen=True)
class Checked:
    """The run worker's outcome for one artifact (the check stage).

    failure: the worker's load, run or bench failure (then no bench, parity or accuracy), else None.
    bench: latency, cold start and memory. parity: the verdict over the trials that were evidence.
    evidence: how many trials were evidence (0: every trial left the model's domain).
    accuracy: a reduced-precision row's verdict against its accuracy budget, else None.
    notes: what an ok row still says (trials the artifact does not support).
    error_vs_float64: per output leaf, the error against the float64 truth, else None.
    native: the native consumer's record (compare --native), judged whatever the Python run gave.
    """

    failure: Failure | None = None
    bench: BenchResult | None = None
    parity: ParityVerdict | None = None
    evidence: int = 0
    accuracy: AccuracyVerdict | None = None
    notes: tuple[str, ...] = ()
    error_vs_float64: Mapping[str, float] | None = None
    native: NativeResult | None = None


@dataclass(frozen=True)
class RowOutcomes:
    """Everything the stages returned for one backend so far (a stage not reached is None).

    backend: the row's name ("onnx", "onnx:fp16"). failure: a failure before the export (target or gate).
    export: the export's artifact, or its failure. check: the run worker's outcome.
    """

    backend: str
    failure: Failure | None = None
    export: Exported | Failure | None = None
    check: Checked | None = None

    def with_failure(self, failure: Failure) -> RowOutcomes:
        return replace(self, failure=failure)

    @property
    def exported(self) -> Exported | None:
        return self.export if isinstance(self.export, Exported) else None


def exported_artifacts(outcomes: Mapping[str, RowOutcomes], order: Sequence[str]) -> dict[str, Exported]:
    """{backend: its export} of the rows whose export worked, in `order`."""
    return {name: ex for name in order if (ex := outcomes[name].exported) is not None}
