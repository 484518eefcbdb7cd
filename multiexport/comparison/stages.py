"""The typed values a compare's stages pass on, each frozen once its stage has made it.

    Context (the request) -> DevicePlan -> Prepared -> {backend: Exported | Failure} -> Timing
    -> {backend: Checked} -> rows -> Results

Each stage is a function of these to the next (`session.run_compare` calls them in order). What a stage
finds about one backend it returns as that backend's outcome (`outcomes.py`); the rows (`Rows`: one
`BackendResult` per selected backend) are built from the outcomes by `row.build_rows` alone, and the
timed stages after the checks read them; nothing else is shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

    from ..exporting.precision import Calibration
    from ..leaves import Signature, Target
    from ..measure.inputs import Trial
    from ..measure.reference import ReferenceRunner
    from ..measure.timeline import Timeline
    from ..results import BackendResult, Pairing, Reference, Results
    from ..run.devices import DevicePlan
    from ..run.paired import Servers
    from .baseline import BaselineArtifacts
    from .config import CompareConfig

Rows = dict[str, "BackendResult"]  # backend name -> its row, in the compare's order


@dataclass(frozen=True)
class Context:
    """One compare's request, fixed before any work starts.

    target: the function and its example arguments.
    config: the validated CompareConfig.
    spec: the TARGET string workers rebuild the target from; None: exports and the reference run in this
        process (a Target object cannot be sent to a worker).
    out: the output directory (claimed by the session before any stage writes to it).
    threads: intra-op threads every runtime gets (the config's, else the usable cores).
    timeline: where each step is marked (results.json and the report keep it).
    say: the caller's progress callback, one line per step.
    report: writes the reports beside results.json (the caller's: `run`/`comparison` sit below `report` in the
        import order); called before the directory is marked finished, also when a signal stopped the run.
    target_modules: the top-level packages the target's build imported in this process (empty when the caller
        built it beforehand): where the export plan puts the exports that need the built target.
    """

    target: Target
    config: CompareConfig
    spec: str | None
    out: Path
    threads: int
    timeline: Timeline
    say: Callable[[str], None]
    report: Callable[[Results, Path], object] | None
    target_modules: frozenset[str] = frozenset()

    def progress(self, message: str) -> None:
        """One step begins: said to the caller and marked on the timeline."""
        self.timeline.mark(message)
        self.say(message)


@dataclass(frozen=True)
class Prepared:
    """What every later stage judges against: the signature, the trials and the jax.jit reference.

    device: where each backend runs (`run.devices.DevicePlan`; backends it excludes get a no-gpu row).
    sig: the target's named leaves.
    trials: the parity feeds (the given inputs, or the example and seeded trials per size setting).
    bench_feeds: (batch size, feed) per size to time; empty without a benchmark.
    ref_device: where jax.jit runs ("cpu" or "gpu").
    ref_runner: jax.jit of the target, weights lifted as the exports lift them.
    ref_outputs: the reference's outputs per trial (leaf name -> array), in trial order.
    excluded: trials whose outputs left the model's domain (non-finite): no evidence for any backend.
    truth: per trial, the float64 outputs (`--reference float64`), else None.
    reference: the reference's record for results.json, its benchmark not yet measured.
    environment: the producer's environment (versions, machine) for results.json.
    fingerprint: the target's example values and weights, which every export worker must reproduce
        (None without a TARGET string).
    sensitivity: per float output leaf, how far rounding alone moves it (measure/rounding.py); empty when
        not measured.
    nondeterministic: why two runs of the reference (or two traces) disagreed, else None: every row then
        gets that verdict and nothing else runs.
    calibration: the samples int8 rows calibrate from (the given file, checked, or synthetic ones written
        to the output directory), or None when no row calibrates.
    reference_pending: True while only the first trial's reference outputs are in (`prepare.prepare`):
        the other trials', the trials that are no evidence, the rounding floor and the float64 truth come
        with `prepare.finish_reference`. Only the exports start from such a Prepared.
    """

    device: DevicePlan
    sig: Signature
    trials: Sequence[Trial]
    bench_feeds: Sequence[tuple[int | None, dict[str, np.ndarray]]]
    ref_device: str
    ref_runner: ReferenceRunner
    ref_outputs: Sequence[Mapping[str, np.ndarray]]
    excluded: Sequence[Any]
    truth: Sequence[Mapping[str, np.ndarray]] | None
    reference: Reference
    environment: Mapping[str, Any]
    fingerprint: str | None
    sensitivity: Mapping[str, float]
    nondeterministic: str | None
    calibration: Calibration | None = None
    reference_pending: bool = False


@dataclass(frozen=True)
class Workers:
    """The paired workers started before the exports (each imports its runtime meanwhile).

    servers: the live workers, or None (pairing off, a GPU plan not yet known, or too little memory).
    available_before: memory available to new processes before they started, in bytes (None: unknown):
        what the timing plan sizes every runner against.
    """

    servers: Servers | None
    available_before: int | None


@dataclass(frozen=True)
class Timing:
    """How the runners are timed, decided once every artifact is on disk.

    pairing: paired or sequential with the reason (None without a benchmark).
    servers: one live worker per runner in paired mode (each row's parity and cold start come from it
        too), else None: each row runs in a fresh worker, one after another.
    baseline: the baseline artifacts timed beside the new ones in the rounds (comparison.baseline), or None.
    """

    pairing: Pairing | None
    servers: Servers | None
    baseline: BaselineArtifacts | None = None

    @property
    def paired(self) -> bool:
        return self.servers is not None
