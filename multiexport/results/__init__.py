"""The results of a compare: typed on the way out and on the way in (`Results.from_json`).

Schema `multiexport.results/2`. Everything the reports, the recommendation and the regression gate read
comes from these dataclasses, so "the worst leaf", a status's meaning and an exit code are each defined
once. The report side imports this package and no JAX and no backend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from ..files import write_text_atomic
from ..files.bounded import read_json
from ..status import MEANING, Status
from .accuracy import AccuracyVerdict, Budget, LeafAccuracy
from .bench import BenchResult, LatencyStats, Pairing, Ratio, SizeResult
from .legacy import LEGACY_SCHEMA, upgrade
from .native import NATIVE_SUFFIX, NativeResult, NativeSize
from .parity import ExcludedTrial, LeafStats, LeafVerdict, ParityVerdict, Tolerance
from .schema import from_data, to_data

RESULTS_SCHEMA = "multiexport.results/2"
_MAX_RESULTS = 512 << 20

__all__ = ["RESULTS_SCHEMA", "AccuracyVerdict", "Budget", "LeafAccuracy", "BackendResult", "BenchResult", "ExcludedTrial", "LatencyStats", "LeafStats",
           "LeafVerdict", "MEANING", "NATIVE_SUFFIX", "NativeResult", "NativeSize", "Pairing", "ParityVerdict", "Ratio", "Reference", "Results", "SizeResult", "Status", "Tolerance",
           "TrialInfo", "Binding", "LeafData", "SignatureData", "WeightsData", "load_results"]


@dataclass
class LeafData:
    """One leaf of the signature as results.json records it (see signature.Leaf)."""

    name: str
    alias: str
    shape: list[int | str]
    dtype: str
    weak_type: bool = False
    key_impl: str | None = None


@dataclass
class WeightsData:
    """How the target carries its weights: `mode` "baked" (closed over) or "inputs", and the byte counts."""

    mode: str = "inputs"
    baked_bytes: int = 0
    baked_arrays: int = 0
    input_bytes: int = 0


@dataclass
class SignatureData:
    """The target's named leaves (Signature.to_json())."""

    name: str
    inputs: list[LeafData]
    outputs: list[LeafData]
    symbolic_dims: list[str] = field(default_factory=list)
    alias_collisions: list[str] = field(default_factory=list)
    weights: WeightsData = field(default_factory=WeightsData)
    x64: bool = False
    warnings: list[str] = field(default_factory=list)


@dataclass
class Binding:
    """How one format binds one input leaf: read or not, its parameter, and a key still to feed."""

    name: str
    used: bool
    param: int | str | None = None
    caller_key: str | None = None


@dataclass(frozen=True)
class BackendResult:
    """One backend's row, built once from what the compare's stages returned (`comparison.row.build_row`)
    and never changed after (its bench and native records are the measurements' own).

    backend: its name.
    status: what happened (see `Status.meaning`); reason: why, and what to do, when not ok.
    display: the backend's summary and chart colour, so reports need no backend installed.
    artifact: the artifact directory.
    export_seconds: wall time of the export (in its worker); export_cpu_seconds: CPU time it used, the
        processes it started and waited for included (iree-compile; exports may overlap in time, so wall time
        alone would overstate each).
    binding: per input leaf: used, param, and the key a caller must still feed (caller_key).
    parity: the parity verdict over the trials it was checked on.
    error_vs_float64: per output leaf, max |error| / max |truth| against the function run in float64.
    bench: latency, cold start and memory.
    native: the native, Python-free consumer's parity and latency, where it was run.
    warnings: the artifact's warnings.
    export_setup: one-time setup the export paid (e.g. jax2onnx's plugin import).
    export_peak_rss_bytes: the export worker's peak resident memory.
    export_child_peak_rss_bytes: the most resident memory the processes the export started held (LiteRT's
        prepare child, iree-compile): at once, or one alone at its own peak; sampled every 0.1 s while they
        ran, so a lower bound for a peak shorter than that; None when it started none or ran in this process.
    weights: where the artifact keeps the weights.
    versions: the producer versions the artifact records; requires: what a consumer needs.
    supports: what the artifact accepts (sizes, platforms).
    precision: the artifact's precision ("fp32", or a reduced one: exporting.precision).
    accuracy: a reduced-precision row's accuracy verdict against jax.jit (its status), else None.
    precision_facts: what the reduced-precision export did (the manifest's `precision`), else None.
    artifact_bytes: the artifact's size on disk (every file the export wrote).
    """

    backend: str
    status: Status
    reason: str = ""
    display: dict[str, str] = field(default_factory=dict)
    artifact: str | None = None
    export_seconds: float | None = None
    export_cpu_seconds: float | None = None
    binding: list[Binding] = field(default_factory=list)
    parity: ParityVerdict | None = None
    error_vs_float64: dict[str, float] | None = None
    bench: BenchResult | None = None
    native: NativeResult | None = None
    warnings: list[str] = field(default_factory=list)
    export_setup: dict[str, Any] | None = None
    export_peak_rss_bytes: int | None = None
    export_child_peak_rss_bytes: int | None = None
    weights: dict[str, Any] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    requires: dict[str, Any] = field(default_factory=dict)
    supports: dict[str, Any] = field(default_factory=dict)
    precision: str = "fp32"
    accuracy: AccuracyVerdict | None = None
    precision_facts: dict[str, Any] | None = None
    artifact_bytes: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def dropped(self) -> list[str]:
        return [b.name for b in self.binding if not b.used]

    def worst_err_scale(self) -> float | None:
        """The worst compared leaf's error relative to its scale (what a one-cell summary shows), or None when
        no leaf was compared."""
        worst = self.parity.headline() if self.parity else None
        return worst.stats.err_scale if worst is not None and worst.stats.compared else None

    def first_measured(self) -> SizeResult | None:
        """The first size with a latency of an ok row (what a one-cell summary times), or None."""
        measured = self.bench.measured() if self.bench and self.ok else []
        return measured[0] if measured else None


@dataclass
class TrialInfo:
    """One parity trial: its name, the symbolic sizes it used, and how its inputs were made."""

    name: str
    dims: dict[str, int] = field(default_factory=dict)
    origin: str = ""


@dataclass
class Step:
    """One step of a compare as the supervising process saw it: it began `at_s` seconds after the command
    started (the target build included) and the process moved on `seconds` later. Exports and paired workers
    overlap in other processes: a step's seconds are what this process waited, not CPU time."""

    at_s: float
    what: str
    seconds: float


@dataclass
class Reference:
    """The jax.jit reference every backend is judged against.

    kind: "jax.jit"; jax_version; device.
    lifted_weights: how many baked weights were passed as arguments (large targets).
    deterministic: whether two runs of the reference (and two traces of the target) agreed.
    jax_error_vs_float64: per output leaf, jax.jit's own error against the float64 truth.
    no_float64_truth: float output leaves the float64 run still computed in a narrower type (the function
        casts back): no error against float64 exists for them, and none is reported.
    bench: the reference's latency, measured like every backend's.
    rounding_sensitivity: per float output leaf, how far jax.jit's output moves (max |change| / max |ref|)
        when every float input and weight moves by one rounding step (measure/rounding.py): the floor
        under parity, to which default tolerances widen. None when not measured.
    """

    kind: str = "jax.jit"
    jax_version: str = ""
    device: str = "cpu"
    lifted_weights: int = 0
    deterministic: bool | None = None
    jax_error_vs_float64: dict[str, float] | None = None
    no_float64_truth: list[str] = field(default_factory=list)
    bench: BenchResult | None = None
    rounding_sensitivity: dict[str, float] | None = None


@dataclass
class Results:
    """Everything a compare measured.

    target: the target's name; signature: its named leaves (Signature.to_json()).
    trials: the parity trials; backends: one row per backend, in the order asked for.
    reference: the jax.jit reference; environment: machine, versions, threads.
    out_dir: where the artifacts and reports are; device: the device plan.
    interrupted: the run was stopped before it finished (rows not reached say so).
    state: "running" while a compare writes it, "finished" or "interrupted" after.
    config: the options the compare ran with.
    pairing: how latency was measured across runners (paired rounds or sequential), with every ratio.
    timeline: the compare's own steps in order (target build, exports, loads, parity, rounds), so a slow
        compare says where its seconds went.
    memory: the memory plan made before the exports (comparison.memory_plan.MemoryPlan.to_json: the weights,
        the memory available, each backend's expected export and runner peak, exports at once, early workers
        closed, the backends not started and why); empty when no export was planned.
    """

    target: str
    signature: SignatureData
    trials: list[TrialInfo]
    backends: dict[str, BackendResult]
    reference: Reference
    environment: dict[str, Any]
    out_dir: str
    device: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    state: str = "finished"
    config: dict[str, Any] = field(default_factory=dict)
    pairing: Pairing | None = None
    timeline: list[Step] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)

    def exit_code_allowing(self, allow_fail: Sequence[str] = ()) -> int:
        """The worst row's exit code: 0 faithful, 1 parity failed, 2 target at fault, 3 backend failed, 70 bug;
        rows of `allow_fail` backends do not count (except multiexport's own bugs)."""
        codes = [r.status.exit_code for n, r in self.backends.items()
                 if n not in allow_fail or r.status is Status.INTERNAL_ERROR]
        # A native consumer asked for (compare --native) is a verdict too; one that is not installed here is not.
        codes += [r.native.status.exit_code for n, r in self.backends.items() if r.native is not None
                  and r.native.status is not Status.UNAVAILABLE and (n not in allow_fail or
                                                                   r.native.status is Status.INTERNAL_ERROR)]
        # The TPU rows (compare --device tpu, comparison.tpu_stage) are verdicts too; a no-tpu row is not.
        tpu_rows = (self.device.get("tpu_rows") or {}).get("rows", []) if "tpu" not in allow_fail else []
        codes += [{"parity-failed": 1, "failed": 3}.get(str(row.get("status")), 0) for row in tpu_rows]
        if not codes:
            return 0
        return 70 if 70 in codes else max(codes)

    @property
    def exit_code(self) -> int:
        return self.exit_code_allowing(())

    def to_json(self) -> dict[str, Any]:
        return {"schema": RESULTS_SCHEMA, **to_data(self)}

    @classmethod
    def from_json(cls, data: Any, where: str = "results.json", legacy: bool = False) -> "Results":
        """Results from parsed JSON, every field checked. legacy: also read schema 1 (multiexport 0.1), as
        `results.legacy` converts it (for `diff` across the upgrade; reports need this version's schema)."""
        if not isinstance(data, dict):
            raise InputError(f"Results '{where}' | got {type(data).__name__}, expected a JSON object")
        schema = data.get("schema")
        if legacy and schema == LEGACY_SCHEMA:
            data, schema = upgrade(data, RESULTS_SCHEMA), RESULTS_SCHEMA
        if schema != RESULTS_SCHEMA:
            raise InputError(f"Results '{where}' | got schema {schema!r}, expected {RESULTS_SCHEMA!r} (written by "
                             "`multiexport compare` of this version)")
        body = {k: v for k, v in data.items() if k != "schema"}
        return from_data(cls, body, f"Results '{where}'")

    def write(self, path: Path) -> None:
        write_text_atomic(path, json.dumps(self.to_json(), indent=1) + "\n")


def load_results(path: str | Path, legacy: bool = False) -> Results:
    """A results.json, validated field by field; anything unexpected is one InputError naming the file.
    legacy: also read schema 1 (see `Results.from_json`)."""
    data = read_json(Path(path), "Results", _MAX_RESULTS, InputError,
                     "expected a results.json written by `multiexport compare`")
    return Results.from_json(data, str(path), legacy=legacy)
