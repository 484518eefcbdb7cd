"""Options as data: what every export takes (ExportOptions), how a runner runs (RunOptions), and a backend's
own declared options (Option), each validated when it is made, so a bad value fails before any work."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import UsageError
from ..leaves.weights import check_policy
from .precision import FP32, Calibration, check_precision, needs_calibration

DEVICES = ("cpu", "gpu", "tpu")
# A runner's device -> the jax.export platform an artifact must have been lowered for.
PLATFORM_OF_DEVICE = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
# The formats whose runner runs on a TPU: XLA (JAX's PJRT on libtpu). The others have no TPU runtime here.
TPU_FORMATS = ("xla",)


def check_run_device(manifest: Any, device: str, where: str) -> None:
    """Refuse, in one line before any runtime loads, a device the artifact cannot run on here: the TPU for a format
    other than XLA (no TPU runtime), or a platform its module was not lowered for (`export --platforms`). `manifest`:
    the artifact's Manifest; `where` names the artifact."""
    if device == "tpu" and manifest.backend not in TPU_FORMATS:
        raise UsageError(f"{where} | is a '{manifest.backend}' artifact, which has no TPU runtime here, expected device "
                         "cpu (or an XLA artifact exported with --platforms cpu,tpu for --device tpu)")
    lowered = [str(p).lower() for p in manifest.supports.get("platforms") or []]
    wanted = PLATFORM_OF_DEVICE.get(device, device)
    if lowered and wanted not in lowered:
        raise UsageError(f"{where} | lowered for {', '.join(lowered)}, expected {wanted} for --device {device}: "
                         f"re-export with --platforms {','.join([*lowered, wanted])}")


@dataclass(frozen=True)
class Option:
    """One backend option, declared as data: validated, recorded in the manifest, settable from the CLI.

    name: the key (`opset`), given on the CLI as `--backend-option BACKEND.NAME=VALUE`.
    default: the value used when none is given.
    kind: the Python type the value must have (int, float, str, bool).
    help: what it changes, in one line.
    choices: the allowed values, if the option is an enumeration.
    minimum: the smallest allowed number, if any.
    """

    name: str
    default: Any
    kind: type[Any]
    help: str
    choices: tuple[Any, ...] = ()
    minimum: float | None = None

    def validate(self, backend: str, value: Any) -> Any:
        where = f"Option '{backend}.{self.name}'"
        if isinstance(value, str) and self.kind is not str:
            value = _parse(where, value, self.kind)
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.kind) or (self.kind is not bool and isinstance(value, bool)):
            raise UsageError(f"{where} | got {value!r}, expected a {self.kind.__name__}")
        if self.kind is float and not math.isfinite(value):
            raise UsageError(f"{where} | got {value!r}, expected a finite number")
        if self.choices and value not in self.choices:
            raise UsageError(f"{where} | got {value!r}, expected one of {', '.join(map(str, self.choices))}")
        if self.minimum is not None and value < self.minimum:
            raise UsageError(f"{where} | got {value!r}, expected >= {self.minimum:g}")
        return value


@dataclass(frozen=True)
class NoOptions:
    """The options of a backend that declares none."""


def option(default: Any, help: str, *, choices: tuple[Any, ...] = (), minimum: float | None = None) -> Any:
    """A field of a backend's options dataclass (`BackendFacts.options_type`): its default, and what the CLI's help,
    its validation and the manifest's `options` need (`Option`'s fields)."""
    return field(default=default, metadata={"help": help, "choices": choices, "minimum": minimum})


def declared_options(options_type: type) -> tuple[Option, ...]:
    """The `Option`s of an options dataclass, in field order: each field's name, default and `option` metadata;
    its kind is its default's type (int, float, str, bool)."""
    return tuple(Option(f.name, f.default, type(f.default), f.metadata.get("help", ""),
                        tuple(f.metadata.get("choices", ())), f.metadata.get("minimum"))
                 for f in dataclasses.fields(options_type))


def _parse(where: str, text: str, kind: type) -> Any:
    try:
        if kind is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        return kind(text)
    except ValueError:
        raise UsageError(f"{where} | got {text!r}, expected a {kind.__name__}") from None


@dataclass(frozen=True)
class ExportOptions:
    """Options every backend understands, plus the chosen backend's own (`backend_options`).

    keep_unused: make every input leaf a parameter, even those the function never reads.
    platforms: platforms to lower for (`("cpu", "cuda")`); None means this machine's
        (`jax.export.default_export_platform()`: "cuda" where JAX sees a GPU, else "cpu").
    external_weights: where baked (closed-over) weights go: "auto" (out of the module into the format's
        external storage once they reach 16 MiB), "always" (external whatever their size) or "never"
        (embedded as constants; ONNX refuses past its 2 GB protobuf limit).
    static_sizes: symbolic dimension -> sizes for which the artifact also carries modules refined to
        static shapes (what PJRT needs: it cannot compile a polymorphic module).
    fallback_sizes: symbolic dimension -> sizes to export one model each for when the format cannot take
        the symbolic dims (compare passes every size it checks); empty: `static_sizes`, else the example's.
    backend_options: the backend's declared `Option`s by name (unknown names are refused).
    check_load: after writing, load the artifact with the format's own runtime and run it once on the
        example inputs, so an artifact the installed consumer cannot read fails at export.
    stage_artifact: for a backend that builds on another (`Backend.builds_on`): a finished export of that
        stage to start from (compare passes the one it made of the same function), instead of exporting the
        stage again. Used only when its manifest shows it was made as the stage would be (same target and
        leaves, the stage backend's default options, the same keep_unused, weight policy and platforms);
        otherwise the stage is exported afresh. The manifest's format.stage says which happened.
    precision: "fp32" (the float artifact), or a reduced precision the backend declares in `precisions`
        (exporting.precision.PRECISIONS); the stage a backend builds on is always exported at fp32.
    calibration: the sample feeds static quantization ("int8") calibrates from, by leaf name; required
        for it, refused for the others (they would not use it).
    """

    keep_unused: bool = False
    platforms: tuple[str, ...] | None = None
    external_weights: str = "auto"
    static_sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    fallback_sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    check_load: bool = True
    stage_artifact: str | None = None
    precision: str = FP32
    calibration: Calibration | None = None

    def __post_init__(self):

        check_policy(self.external_weights)
        check_precision(self.precision)
        if needs_calibration(self.precision) and self.calibration is None:
            raise UsageError(f"Option 'calibration' | got none for precision {self.precision}, expected sample inputs "
                             "(an .npz of input leaves with a leading sample axis)")
        if self.calibration is not None and not needs_calibration(self.precision):
            raise UsageError(f"Option 'calibration' | given for precision {self.precision}, expected it only with "
                             "int8 (static quantization calibrates; the others do not)")
        if self.platforms is not None:
            platforms = tuple(self.platforms)
            bad = [p for p in platforms if p not in PLATFORMS]
            if bad or not platforms or len(set(platforms)) != len(platforms):
                raise UsageError(f"Option 'platforms' | got {', '.join(map(str, platforms)) or 'none'}, expected "
                                 f"distinct names among {', '.join(PLATFORMS)}")
            object.__setattr__(self, "platforms", platforms)
        for option, given in (("static_sizes", self.static_sizes), ("fallback_sizes", self.fallback_sizes)):
            for dim, sizes in given.items():
                if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
                    raise UsageError(f"Option '{option}' | got {dim}={sizes!r}, expected sizes >= 1, e.g. b=1,8")

    @classmethod
    def for_device(cls, device: str, **kwargs: Any) -> "ExportOptions":
        """GPU artifacts are lowered for both platforms, so one artifact runs (and is checked) on either; CPU
        artifacts for the CPU by name, since None would mean this machine's platform: cuda on a GPU machine,
        where a `--device cpu` compare would then export modules its CPU runners refuse."""
        return cls(platforms=("cpu", "cuda") if device == "gpu" else ("cpu",), **kwargs)


@dataclass(frozen=True)
class RunOptions:
    """How a runner runs an artifact.

    device: "cpu", "gpu" or "tpu" (XLA only: `check_run_device`).
    threads: intra-op threads for the runtime; None means the cores this process may use. Every runtime
        gets the same number, so a comparison compares formats, not thread pools.
    trust_artifact: skip the check of artifacts whose format carries code (a SavedModel's graph must
        hold only the ops multiexport exports): for artifacts you trust like your own code.
    """

    device: str = "cpu"
    threads: int | None = None
    trust_artifact: bool = False

    def __post_init__(self):
        if self.device not in DEVICES:
            raise UsageError(f"Option 'device' | got {self.device!r}, expected one of {', '.join(DEVICES)}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise UsageError(f"Option 'threads' | got {self.threads!r}, expected an integer >= 1")

    @property
    def thread_count(self) -> int:
        """The threads to give a runtime: the option, else the CPUs this process may run on."""
        return self.threads or usable_cpus()


def observed_threads(prefix: str, expect: int | None = None, wait_s: float = 2.0) -> int:
    """Threads of this process whose name starts with `prefix`: a runtime's own pool, as the OS sees it
    (XLA's CPU pool is `tf_XLAEigen`, IREE's `iree-worker-N`; neither has an API that reports its size).

    A pool's threads name themselves once they start, so a count taken right after the pool was made can
    miss those the OS has not scheduled yet (a loaded CI machine counted 1 of IREE's 2). With `expect`, the
    count is retaken for up to `wait_s` seconds until it reaches `expect`; what is returned is still the
    count observed, never `expect` itself."""
    count = _count_threads(prefix)
    deadline = time.monotonic() + wait_s
    while expect is not None and count < expect and time.monotonic() < deadline:
        time.sleep(0.01)
        count = _count_threads(prefix)
    return count


def _count_threads(prefix: str) -> int:
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                count += f.read().startswith(prefix)
        except OSError:
            continue
    return count


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), not all the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
