"""The backend contract: what a format backend implements, and what the core does for every backend.

A backend is one module under `multiexport.backends` holding only what is specific to its format:
`_export_impl` writes the format's files and returns a `FormatResult` (its facts, as documented
fields); `_load_impl` returns a `Runner` built from the artifact directory alone. The core
(`export.pipeline`) does everything else once for all: option checks, the staging directory, example
inputs, the manifest's common fields, the dtype audit, the load check, replacing an old artifact.

Public methods validate and then call `_impl` methods that do the work. A backend that builds on
another's export (LiteRT from the SavedModel, OpenVINO from the ONNX file) names it in `builds_on`;
the core exports that stage first and hands the backend its directory, so no backend imports another.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from ..errors import BackendUnavailable, InternalError, RunError, UsageError
from .artifact import Artifact, Availability
from .backend_facts import BackendFacts, Presentation, declare
from .facts import STATIC_FALLBACK_KEY, FormatFacts, StaticSizesFacts
from .feed import check_feed
from .format_result import FormatResult  # noqa: F401  (re-exported: what _export_impl returns)
from .intermediates import Intermediates
from .job import ExportJob
from .runner import Runner
from .static_runner import StaticSizesRunner, models_of

if TYPE_CHECKING:
    from ..leaves import Signature
    from .intermediates import IntermediatesRequest, Site
    from .manifest import Manifest
    from .native_consumer import NativeConsumer

from ..errors import ArtifactError, ExportError
from .manifest import Manifest
from .options import (  # noqa: F401  (re-exported: the contract's vocabulary)
    DEVICES,
    PLATFORMS,
    PLATFORM_OF_DEVICE,
    ExportOptions,
    NoOptions,
    Option,
    RunOptions,
    check_run_device,
    observed_threads,
    usable_cpus,
)


class Backend:
    """One export format: its facts declared as data, and two typed hooks.

    A backend sets `spec = BackendFacts(...)` (what it is: name, requirements, the stage it builds on, its
    options dataclass, precisions...; every field documented in `exporting.backend_facts`) and `presentation =
    Presentation(...)` (summary, colour, order), and implements:
    - `_export_impl(job: ExportJob) -> FormatResult`: write the format's files into `job.out_dir` and say what
      they are. Everything else of an export is the driver's (`exporting.pipeline`): the staging directory, the
      stage it builds on, the manifest, the static-size fallback, the symbolic check, the load check.
    - `_load_impl(manifest, directory, options) -> Runner`: a runner built from the artifact directory alone,
      after `load` checked the backend, device, platform, facts and trust.
    The records are also read into class attributes of the same names (`backend.name`, `cls.order`), which is
    what the core reads; a backend may still set those attributes one by one (`declare`).

    `native_consumer()` gives the format's Python-free consumer (`exporting.native_consumer.NativeConsumer`), or
    None; `classify` names a failure this backend recognises; `_check_untrusted_impl` is the trust gate of a
    format that `carries_code`; `_gpu_status_impl` says whether a GPU runs it here.
    """

    spec: ClassVar[BackendFacts]
    presentation: ClassVar[Presentation]
    options_type: ClassVar[type] = NoOptions
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = ""
    # The distributions whose versions say what wrote and ran this format's artifacts (pip names): recorded
    # in every compare's environment when installed, and listed in pyproject.toml under `extra`.
    distributions: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[tuple[Option, ...]] = ()
    builds_on: ClassVar[str | None] = None
    color: ClassVar[str] = "#7f7f7f"
    order: ClassVar[int] = 100
    carries_code: ClassVar[bool] = False
    # Left out of `--backends all` (the default set): a runner whose every load is costly or needs what few
    # machines have (onnx-web starts a headless browser); it runs when named.
    opt_in: ClassVar[bool] = False
    weight_storage: ClassVar[tuple[str, ...]] = ("embedded", "external")
    # Peak resident memory of the export and run workers, (x the weights, + GiB): the memory plan's figures.
    export_memory: ClassVar[tuple[float, float] | None] = None
    runner_memory: ClassVar[tuple[float, float] | None] = None
    export_cost: ClassVar[float] = 1.0
    needs_target: ClassVar[bool] = True
    export_modules: ClassVar[tuple[str, ...]] = ()
    runtime_modules: ClassVar[tuple[str, ...]] = ()
    static_fallback: ClassVar[bool] = True
    facts_type: ClassVar[type[FormatFacts]] = FormatFacts
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    precision_gaps: ClassVar[Mapping[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declare(cls)

    def options_object(self, resolved: Mapping[str, Any]) -> Any:
        """The backend's options as its `options_type` dataclass, from `resolve_options`' validated values (a
        backend that declares `Option`s without a dataclass gets the mapping itself)."""
        if self.options_type is NoOptions and self.options:
            return dict(resolved)
        return self.options_type(**resolved)

    def needs_target_for(self, backend_options: Mapping[str, Any], signature: "Signature") -> bool:
        """Whether an export of `signature` with these (unresolved) backend options needs the target's function
        itself, not only the compare's handed StableHLO modules: `needs_target` unless the backend knows better.
        Only where the compare plans the export depends on it; an export that needs the target anyway gets it."""
        return self.needs_target

    def check_precision(self, precision: str) -> None:
        """ExportError (category unsupported-precision) naming what is missing when this backend has no
        `precision` variant; returns when it has."""
        if precision not in self.precisions:

            why = self.precision_gaps.get(precision, f"no {precision} variant in this backend")
            raise ExportError(f"Backend '{self.name}' | has no {precision} artifact: {why} (it makes "
                              f"{', '.join(self.precisions)})", backend=self.name, category="unsupported-precision")

    def facts(self, manifest: "Manifest", where: str = "Artifact manifest") -> FormatFacts:
        """`manifest`'s format facts, typed: a `facts_type`, or `StaticSizesFacts` for a static-sizes artifact.
        Raises ArtifactError naming the field (after `where`) when one is missing or of the wrong type."""
        kind = StaticSizesFacts if STATIC_FALLBACK_KEY in manifest.format else self.facts_type
        return kind.from_json(manifest.format, where)

    def native_consumer(self) -> "NativeConsumer | None":
        """The format's native consumer, which the core runs, checks and bundles through; None: it has none.
        An override imports its consumer inside the method, so listing backends stays cheap."""
        return None

    def available(self) -> Availability:
        return self._installed(self.requires, "")

    def runtime_available(self) -> Availability:
        """Whether this backend's artifacts can be loaded and run here: its `runtime_modules` importable (a machine
        that only serves artifacts needs the runtime, not the converter), else its `requires` when it declares none."""
        return self._installed(self.runtime_modules or self.requires, ", the runtime its artifacts need")

    def _installed(self, modules: Sequence[str], what: str) -> Availability:
        """Available when every one of `modules` is importable; else which are not (`what` says what they are)
        and how to install them."""
        missing = [m for m in modules if _find_spec(m) is None]
        if missing:
            hint = f"pip install 'multiexport[{self.extra}]'" if self.extra else f"pip install {' '.join(missing)}"
            return Availability(False, f"{', '.join(missing)} not installed{what} ({hint})")
        return Availability(True)

    def resolve_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared option with its value: the given ones validated, the rest at their defaults."""
        declared = {o.name: o for o in self.options}
        unknown = [k for k in given if k not in declared]
        if unknown:
            known = ", ".join(declared) or "none"
            raise UsageError(f"Option '{self.name}.{unknown[0]}' | unknown, expected one of: {known}")
        return {name: (o.validate(self.name, given[name]) if name in given else o.default) for name, o in declared.items()}

    def export(self, fn: Callable[..., Any], signature: "Signature", out_dir: str | os.PathLike,
               options: ExportOptions = ExportOptions()) -> Artifact:
        """Export `fn` into `out_dir` with a manifest.json: the old spelling of
        `multiexport.exporting.export_artifact(backend, fn, signature, out_dir, options)`, kept for callers.

        The contract does not import the driver (that was the import cycle of exporting/): the driver
        (`exporting.pipeline`) installs itself in `EXPORT_DRIVER` when imported, which `exporting/__init__` does.
        """
        driver = EXPORT_DRIVER.get("export_artifact")
        if driver is None:
            raise InternalError("exporting.pipeline was not imported: call multiexport.exporting.export_artifact")
        return driver(self, fn, signature, Path(out_dir), options)

    def load(self, artifact_dir: str | os.PathLike, options: RunOptions | str = RunOptions()) -> Runner:
        """A runner for the artifact in `artifact_dir`, built from the directory alone; only the runtime need be
        installed (`runtime_available`), not the converter that wrote it."""
        self.require_runtime()
        if isinstance(options, str):
            options = RunOptions(device=options)
        manifest = Manifest.read(artifact_dir)
        if manifest.backend != self.name:

            raise ArtifactError(f"Artifact '{artifact_dir}' | got a '{manifest.backend}' artifact, expected '{self.name}'")
        if options.device == "tpu":  # only XLA has a TPU runtime: another format must not run on the CPU instead
            check_run_device(manifest, options.device, f"Artifact '{artifact_dir}'")
        platform = PLATFORM_OF_DEVICE[options.device]
        platforms = manifest.supports.get("platforms") or []
        if platforms and platform not in platforms:
            raise RunError(f"Artifact '{artifact_dir}' | exported for {', '.join(platforms)}, expected {platform}: "
                           f"re-export with --platforms {','.join([*platforms, platform])}", backend=self.name,
                           category="unsupported-platform")
        facts = self.facts(manifest, f"Artifact '{artifact_dir}'")  # refused here, not deep inside a runner
        if not options.trust_artifact:
            self.check_untrusted(artifact_dir, manifest)
        if isinstance(facts, StaticSizesFacts):  # one model per size: each loaded through this method on first use
            return StaticSizesRunner(self, manifest, Path(artifact_dir), options)
        return self._load_impl(manifest, Path(artifact_dir), options)

    def check_untrusted(self, artifact_dir: str | os.PathLike, manifest: "Manifest | None" = None) -> None:
        """Refuse an artifact whose files would run code beyond the model's math once loaded (ArtifactError, one
        line naming what was found and --trust-artifact); nothing is loaded or run to find out.

        The one trust gate: `load` (so `run`, compare's workers and the Python API) and the native consumers
        call it before any runtime reads the files, unless the caller trusts the artifact like its own code.
        A format that carries no code (`carries_code` False) passes as is. A static-sizes artifact is checked
        model by model.
        """

        directory = Path(artifact_dir)
        manifest = Manifest.read(directory) if manifest is None else manifest
        if not self.carries_code:
            return
        if STATIC_FALLBACK_KEY in manifest.format:
            for model in models_of(manifest, directory).values():
                self.check_untrusted(model)
            return
        self._check_untrusted_impl(manifest, directory)

    def device_status(self, device: str) -> Availability:
        """Whether this backend can run on `device` here, and what it found (imports the runtime).

        Call it in a worker process where the runtime's import or GPU initialisation must not touch the
        caller (compare does).
        """
        if device not in DEVICES:
            raise UsageError(f"Device '{device}' | unknown, expected one of {', '.join(DEVICES)}")
        status = self.runtime_available()
        if not status.ok:
            return status
        if device == "cpu":
            return Availability(True, "cpu")
        return self._gpu_status_impl()

    def import_runtime(self) -> None:
        """Import `runtime_modules` (the runner's library) now, so a later `load` does not pay for it."""
        self.require_runtime()
        for module in self.runtime_modules:
            importlib.import_module(module)

    def require(self) -> None:
        """Raise BackendUnavailable unless the converter (`requires`) is installed: exporting needs it."""
        status = self.available()
        if not status.ok:
            raise BackendUnavailable(f"Backend '{self.name}' | unavailable: {status.reason}")

    def require_runtime(self) -> None:
        """Raise BackendUnavailable unless the runtime (`runtime_available`) is installed: running an artifact, in
        `load`, a serve worker or a device probe, needs the runtime alone, not the converter that wrote it."""
        status = self.runtime_available()
        if not status.ok:
            raise BackendUnavailable(f"Backend '{self.name}' | cannot run artifacts here: {status.reason}")

    def stage_options(self, chosen: Any) -> dict[str, Any]:
        """The backend options the stage this one builds on (`builds_on`) is exported with, from this backend's
        options (`options_object`; default: none, the stage's defaults)."""
        return {}

    def classify(self, exc: BaseException, stage: str) -> tuple[str, str] | None:
        """(category, reason) for a failure this backend recognises (version skew, a missing kernel), else
        None. `stage` is "export", "load" or "run". The worker and the load check both ask, so one root
        cause gets one category wherever it surfaces."""
        return None

    def intermediates(self, request: "IntermediatesRequest") -> "Intermediates":
        """The artifact's value for each of `request.sites` (one trial), for `multiexport locate`: what the format
        can map, and a one-line reason for every site it cannot. Checks the request and the answer; the format's
        work is `_intermediates_impl` (multiexport/exporting/intermediates.py describes both types)."""
        self.require()
        if request.manifest.backend != self.name:
            raise ArtifactError(f"Artifact '{request.artifact_dir}' | got a '{request.manifest.backend}' artifact, "
                                f"expected '{self.name}'")
        check_feed(request.manifest.inputs, request.feed)  # one line naming the leaf, before any runtime
        got = self._intermediates_impl(request)
        if not isinstance(got, Intermediates):
            raise InternalError(f"Backend '{self.name}' | _intermediates_impl returned {type(got).__name__}, "
                                "expected Intermediates")
        keys = {s.key for s in (got.own_sites if got.own_sites is not None else request.sites)}
        stray = sorted(set(got.values) - keys)
        if stray:
            raise InternalError(f"Backend '{self.name}' | _intermediates_impl gave values for unknown sites "
                                f"{', '.join(stray[:5])}")
        return got

    def _intermediates_impl(self, request: "IntermediatesRequest") -> "Intermediates":
        """The artifact's intermediate values (see `intermediates`); by default the format maps none."""
        why = f"cannot map: backend '{self.name}' exposes no intermediate values"
        return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)

    def reduced_artifact(self, request: "IntermediatesRequest", site: "Site", operands: "Sequence[Site]",
                         op_module: bytes, out_dir: Path) -> str:
        """For `locate --reduce`: write into `out_dir` the smallest artifact of this format that computes `site`
        from `operands` (the sites it reads), cut from the artifact in `request` or made from `op_module` (the op
        alone as a StableHLO portable artifact); one line saying what was written, or "" when the format makes
        none (`_reduced_artifact_impl`)."""
        self.require()
        out_dir.mkdir(parents=True, exist_ok=True)
        return self._reduced_artifact_impl(request, site, operands, op_module, out_dir)

    def _reduced_artifact_impl(self, request: "IntermediatesRequest", site: "Site", operands: "Sequence[Site]",
                               op_module: bytes, out_dir: Path) -> str:
        return ""

    # -- to implement -------------------------------------------------------------------------
    def _export_impl(self, job: ExportJob[Any]) -> FormatResult:
        """Write the format's files for `job` into `job.out_dir`; return what they are."""
        raise NotImplementedError

    def _load_impl(self, manifest: "Manifest", directory: Path, options: RunOptions) -> Runner:
        raise NotImplementedError

    def _gpu_status_impl(self) -> Availability:
        return Availability(False, f"backend '{self.name}' has no GPU support")

    def _check_untrusted_impl(self, manifest: "Manifest", directory: Path) -> None:
        """Raise ArtifactError when the format's files in `directory` hold code (see `check_untrusted`)."""
        raise NotImplementedError(f"backend '{self.name}' sets carries_code and must implement _check_untrusted_impl")


# The export driver, installed by exporting.pipeline at its import (see `Backend.export`).
EXPORT_DRIVER: dict[str, Callable[..., Artifact]] = {}


def _find_spec(module: str):
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return None


declare(Backend)
