"""What a compare can be asked: `CompareConfig`, validated as a whole before any work starts, and the same
fields as the typed keyword arguments of `multiexport.compare` (`CompareOptions`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, TypedDict

import numpy as np

from ..errors import UsageError
from ..exporting.contract import usable_cpus
from ..exporting.options import ExportOptions
from ..exporting.precision import check_precision, needs_calibration, split_variant, variant_name
from ..exporting.registry import backend_class, names
from ..leaves.weights import check_policy
from ..measure.accuracy import check_accuracy
from ..measure.bench import BenchConfig
from ..measure.inputs import check_value_ranges
from ..measure.tolerance import check_tolerances
from ..report.deploy import NATIVE as NATIVE_CONSUMER, target as deploy_target
from ..run.devices import CHOICES
from .baseline import BASELINE_ROUNDS, find_baseline

REFERENCES = ("jax", "float64")


@dataclass(frozen=True)
class CompareConfig:
    """Everything a compare can be asked to do, validated before any work starts.

    backends: backend names, in report order (every one must be registered).
    out_dir: the output directory (default: multiexport-out/<target name>).
    trials: seeded trials per size setting, besides the example. seed: their seed (>= 0).
    val_ranges: leaf pattern -> (low, high) for the trials. dim_sizes: symbol -> sizes to check.
    tolerances: leaf pattern -> Tolerance overrides. inputs: a feed to use instead of generated trials.
    reference: "jax" (jax.jit) or "float64" (also each backend's error against the float64 truth).
    matmul_precision: jax.jit's matmul precision for the parity reference ("default", "high", "highest"): a TPU's
        default runs float32 matmuls in bf16 passes (`measure.reference.MATMUL_PRECISIONS`).
    platforms: the platforms the XLA artifact is lowered for, as `export --platforms` (None: the device's own);
        the device's platform is always among them, so the compare's rows run what was lowered.
    deploy: deployment targets to judge (`report.deploy.TARGETS`, e.g. cpp-server, browser; aliases resolved to
        their names): the compare adds the backends their consumers need (onnx-web for a browser) and turns on
        `native` where a consumer is a native one; the report then gives a verdict per target.
    keep_unused: every leaf a parameter. external_weights: auto / always / never.
    backend_options: backend -> {option: value}, each validated against the backend's declared options.
    device: cpu / gpu / auto. threads: intra-op threads for every runtime (None: the usable cores).
    timeout: seconds before a worker is stopped (> 0). bench: how long to time (None: parity only).
    batch_sizes: sizes of the symbolic batch to time.
    export_jobs: exports run at once (None: as many as cores and memory allow).
    native: also run every artifact that has a native consumer in it (parity and in-program latency);
        a symbolic XLA export then carries refined static modules for every size checked or timed.
    native_plugin: the PJRT plugin for the XLA consumer (None: the installed one, see native.build).
    paired: time every runner loaded at once in interleaved rounds when they fit in memory together, so
        ratios are measured over the same seconds of machine noise (False: one worker after another).
    rounds: interleaved rounds per batch size in paired mode (each runner gets bench_time / rounds each).
    floor: also time the per-call floor of every timed runtime (measure.floor, one add on 8 floats, through
        the same calling path), so a small model's latency reads as overhead vs compute.
    precisions: the precisions to make of every backend (exporting.precision): "fp32" is the float artifact;
        each other adds a row BACKEND@PRECISION per backend ("onnx@int8"), `unsupported-precision` where the
        format has none. `backends` holds the expanded rows once validated.
    calibration: an .npz of sample inputs for int8 (leaf name -> array with a leading sample axis); None:
        synthetic samples in the example's domain (the compare says so).
    accuracy: leaf pattern -> {metric: value} overriding the precision's default budget (measure.accuracy).
    baseline_artifacts: a previous compare's output directory whose artifacts are timed in the same rounds as
        the new ones (comparison.baseline: the paired A/B a regression gate rests on), or None; with it,
        rounds is at least comparison.baseline.BASELINE_ROUNDS.
    """

    backends: tuple[str, ...] = ("xla",)
    out_dir: Path | None = None
    trials: int = 2
    seed: int = 0
    val_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    dim_sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    tolerances: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, np.ndarray] | None = None
    reference: str = "jax"
    keep_unused: bool = False
    external_weights: str = "auto"
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    device: str = "cpu"
    threads: int | None = None
    timeout: float = 600.0
    bench: BenchConfig | None = BenchConfig()
    batch_sizes: tuple[int, ...] | None = None
    export_jobs: int | None = None
    native: bool = False
    native_plugin: str | None = None
    paired: bool = True
    rounds: int = 5
    floor: bool = False
    precisions: tuple[str, ...] = ("fp32",)
    calibration: Path | None = None
    accuracy: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    baseline_artifacts: Path | None = None
    matmul_precision: str = "default"
    platforms: tuple[str, ...] | None = None
    deploy: tuple[str, ...] = ()

    def __post_init__(self):
        backends = tuple(self.backends) if not isinstance(self.backends, str) else (self.backends,)
        if not backends or not all(isinstance(b, str) and b for b in backends):
            raise UsageError(f"Option 'backends' | got {list(backends)!r}, expected at least one of: {', '.join(names())}")
        backends = _with_precisions(backends, self.precisions)
        object.__setattr__(self, "precisions", tuple(self.precisions))
        unknown = [b for b in backends if split_variant(b)[0] not in names()]
        if unknown:
            raise UsageError(f"Backend '{unknown[0]}' | unknown, expected one of: {', '.join(names())}")
        if len(set(backends)) != len(backends):
            raise UsageError(f"Option 'backends' | got {', '.join(backends)}, expected each backend once")
        object.__setattr__(self, "backends", backends)
        _check_deploy(self)  # the deployment targets' consumers join the rows (their options are then valid too)
        backends = self.backends
        _int("trials", self.trials, 1)
        _int("rounds", self.rounds, 2)
        if not isinstance(self.floor, bool) or (self.floor and self.bench is None):
            raise UsageError(f"Option 'floor' | got {self.floor!r} with bench {self.bench!r}, expected a bool, and "
                             "a benchmark to set the floor beside")
        if not isinstance(self.paired, bool):
            raise UsageError(f"Option 'paired' | got {self.paired!r}, expected true or false")
        _int("seed", self.seed, 0)
        if self.threads is not None:
            _int("threads", self.threads, 1)
        if self.export_jobs is not None:
            _int("export_jobs", self.export_jobs, 1)
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not math.isfinite(
                self.timeout) or self.timeout <= 0:
            raise UsageError(f"Option 'timeout' | got {self.timeout!r}, expected a finite number of seconds > 0")
        if self.reference not in REFERENCES:
            raise UsageError(f"Option 'reference' | got {self.reference!r}, expected one of {', '.join(REFERENCES)}")
        if self.matmul_precision not in ("default", "high", "highest"):
            raise UsageError(f"Option 'matmul_precision' | got {self.matmul_precision!r}, expected one of default, high, "
                             "highest")
        if self.device not in CHOICES:
            raise UsageError(f"Option 'device' | got {self.device!r}, expected one of {', '.join(CHOICES)}")
        if self.platforms is not None:  # validated as export's are (known names, each once)

            object.__setattr__(self, "platforms", ExportOptions(platforms=self.platforms).platforms)
        check_policy(self.external_weights)
        if self.bench is not None and not isinstance(self.bench, BenchConfig):
            raise UsageError(f"Option 'bench' | got {type(self.bench).__name__}, expected a BenchConfig or None")
        if self.batch_sizes is not None:
            sizes = tuple(self.batch_sizes)
            if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
                raise UsageError(f"Option 'batch_sizes' | got {list(sizes)!r}, expected sizes >= 1 such as 1,8,64")
            object.__setattr__(self, "batch_sizes", sizes)
        object.__setattr__(self, "val_ranges", check_value_ranges(self.val_ranges))
        object.__setattr__(self, "tolerances", check_tolerances(self.tolerances))
        _check_calibration(self, backends)
        object.__setattr__(self, "accuracy", check_accuracy(self.accuracy))
        for name, given in self.backend_options.items():
            if name not in {split_variant(b)[0] for b in backends}:
                raise UsageError(f"Option '{name}.*' | names a backend not selected, expected one of {', '.join(backends)}")
            backend_class(name)().resolve_options(given)
        if self.out_dir is not None:
            object.__setattr__(self, "out_dir", Path(self.out_dir))
        if not isinstance(self.native, bool):
            raise UsageError(f"Option 'native' | got {self.native!r}, expected true or false")
        if self.native_plugin is not None and not self.native:
            raise UsageError("Option 'native_plugin' | given without native, expected --native as well")
        if self.baseline_artifacts is not None:  # refused now, before any export: DIR/ROW manifests validated

            object.__setattr__(self, "baseline_artifacts", Path(self.baseline_artifacts))
            find_baseline(self.baseline_artifacts, backends, self.out_dir)
            # more, shorter slices against a baseline: a disturbed round weighs less in the ratio's interval
            object.__setattr__(self, "rounds", max(self.rounds, BASELINE_ROUNDS))

    def runtime_threads(self) -> int:
        """The intra-op threads every runtime gets: `threads`, else the cores this process may use."""
        return self.threads or usable_cpus()

    def to_json(self) -> dict[str, Any]:
        skip = {"inputs", "tolerances", "bench", "out_dir", "calibration", "baseline_artifacts"}
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        data["tolerances"] = {k: {"rtol": t.rtol, "atol": t.atol, "scale": t.scale} for k, t in self.tolerances.items()}
        data["bench"] = self.bench.to_json() if self.bench else None
        data["inputs"] = "given" if self.inputs is not None else None
        data["calibration"] = str(self.calibration) if self.calibration is not None else None
        data["baseline_artifacts"] = str(self.baseline_artifacts) if self.baseline_artifacts is not None else None
        return data


class CompareOptions(TypedDict, total=False):
    """`CompareConfig`'s fields as keyword arguments of `multiexport.compare` (typed for checkers; each one
    is validated by CompareConfig as the CLI's are). See CompareConfig for what each field means."""

    backends: tuple[str, ...]
    out_dir: Path | None
    trials: int
    seed: int
    val_ranges: Mapping[str, tuple[float, float]]
    dim_sizes: Mapping[str, tuple[int, ...]]
    tolerances: Mapping[str, Any]
    inputs: Mapping[str, np.ndarray] | None
    reference: str
    keep_unused: bool
    external_weights: str
    backend_options: Mapping[str, Mapping[str, Any]]
    device: str
    threads: int | None
    timeout: float
    bench: BenchConfig | None
    batch_sizes: tuple[int, ...] | None
    export_jobs: int | None
    native: bool
    native_plugin: str | None
    paired: bool
    rounds: int
    floor: bool
    precisions: tuple[str, ...]
    calibration: Path | None
    accuracy: Mapping[str, Mapping[str, float]]
    baseline_artifacts: Path | None
    matmul_precision: str
    platforms: tuple[str, ...] | None
    deploy: tuple[str, ...]


def _with_precisions(backends: tuple[str, ...], precisions: Any) -> tuple[str, ...]:
    """The rows: each backend at each precision, grouped by backend ("onnx", "onnx@int8", "xla", "xla@int8").
    Names that already are variants stay as they are, so expanding twice changes nothing."""
    if isinstance(precisions, str) or not precisions or not all(isinstance(p, str) for p in precisions):
        raise UsageError(f"Option 'precisions' | got {precisions!r}, expected a list such as fp32,int8")
    for precision in precisions:
        check_precision(precision)
    if len(set(precisions)) != len(precisions):
        raise UsageError(f"Option 'precisions' | got {', '.join(precisions)}, expected each precision once")
    rows: list[str] = []
    for name in backends:
        base, given = split_variant(name)
        for row in ([name] if given != "fp32" else [variant_name(base, p) for p in precisions]):
            if row not in rows:
                rows.append(row)
    return tuple(rows)


def _check_calibration(config: "CompareConfig", backends: tuple[str, ...]) -> None:
    if config.calibration is None:
        return
    object.__setattr__(config, "calibration", Path(config.calibration))
    if not any(needs_calibration(split_variant(b)[1]) for b in backends):
        raise UsageError(f"Option 'calibration' | given ({config.calibration}) without an int8 row, expected "
                         "--precisions with int8 (static quantization is what calibrates)")
    if not Path(config.calibration).is_file():
        raise UsageError(f"Calibration file '{config.calibration}' | is missing, expected an .npz of input leaves "
                         "with a leading sample axis")


def _int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"Option '{name}' | got {value!r}, expected an integer >= {low}")


def _check_deploy(config: "CompareConfig") -> None:
    """Resolve `deploy`'s target names and add what their consumers need: each consumer's backend (an fp32 row)
    and `native` where one is a native consumer (a C++ server is judged on the C programs, not on Python)."""
    given = (config.deploy,) if isinstance(config.deploy, str) else tuple(config.deploy)
    if not all(isinstance(name, str) for name in given):
        raise UsageError(f"Option 'deploy' | got {list(given)!r}, expected target names such as cpp-server, browser")
    try:
        chosen = [deploy_target(name) for name in given]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    names_ = tuple(dict.fromkeys(t.name for t in chosen))
    object.__setattr__(config, "deploy", names_)
    needed = [c.backend for t in chosen for c in t.consumers if c.backend not in config.backends]
    if needed:
        object.__setattr__(config, "backends", config.backends + tuple(dict.fromkeys(needed)))
    if any(c.kind == NATIVE_CONSUMER for t in chosen for c in t.consumers) and not config.native:
        object.__setattr__(config, "native", True)


__all__ = ["CompareConfig", "CompareOptions"]

