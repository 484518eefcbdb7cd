"""The backend contract: export to a directory, load a runner from that directory alone.

Public methods validate and then call `_impl` methods that do the work, so a new backend is one
file that fills in `_export_impl`, `_load_impl` and a `Runner` subclass.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.util
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from .errors import (
    ArtifactError,
    BackendUnavailable,
    ExportError,
    MultiexportError,
    RunError,
    leaf_message,
)
from .feed import check_feed
from .manifest import MANIFEST_NAME, LeafBinding, Manifest, current_umask
from .signature import Signature

DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here, and if not, why and what to install."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class ExportOptions:
    """Options every backend understands.

    keep_unused: make every input leaf a parameter, even those the function never reads.
    platforms: platforms to lower for (XLA: e.g. ("cpu", "cuda")); None means this machine's.
    external_weights: where baked (closed-over) weights go: "auto" (out of the module into the format's
        external storage once they reach 16 MiB), "always" (external whatever their size) or "never"
        (embedded as constants; ONNX refuses past its 2 GB protobuf limit). See weights.py.
    """

    keep_unused: bool = False
    platforms: tuple[str, ...] | None = None
    external_weights: str = "auto"

    def __post_init__(self):
        from .weights import check_policy

        check_policy(self.external_weights)

    @classmethod
    def for_device(cls, device: str, keep_unused: bool = False, external_weights: str = "auto") -> "ExportOptions":
        """GPU artifacts are lowered for both platforms, so one artifact runs (and is checked) on either."""
        return cls(keep_unused=keep_unused, platforms=("cpu", "cuda") if device == "gpu" else None,
                   external_weights=external_weights)


@dataclass(frozen=True)
class Artifact:
    """An exported artifact on disk: its directory and its manifest."""

    backend: str
    directory: Path
    manifest: Manifest


class Runner:
    """Runs one loaded artifact on named inputs; a backend subclasses the `_impl` methods.

    `prepare` validates a feed against the manifest and moves it into the runtime's own tensors once;
    `run_prepared` is the timed call and is synchronous; `__call__` does both and returns named outputs.
    """

    calling_path: ClassVar[str] = ""

    def __init__(self, manifest: Manifest, directory: Path, device: str):
        self.manifest = manifest
        self.directory = directory
        self.device = device

    def __call__(self, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        outputs = self._fetch_impl(self.prepare(feed))
        return self._name_outputs(outputs)

    def prepare(self, feed: Mapping[str, Any]) -> Any:
        arrays, _ = check_feed(self.manifest.inputs, feed)
        return self._prepare_impl(arrays)

    def run_prepared(self, prepared: Any) -> None:
        self._run_impl(prepared)

    def run_with_transfers(self, arrays: list[np.ndarray]) -> None:
        """End to end from host arrays (already checked by `prepare`) to host outputs: inputs copied to
        the device, the call, outputs copied back. What `--include-transfers` times."""
        self._fetch_impl(self._prepare_impl(arrays))

    def compile(self, prepared: Any) -> bool:
        """Compile ahead of the first call for these prepared inputs, if the runtime compiles lazily.

        Returns False when there is nothing to compile separately (the runtime compiled at load), so a
        benchmark can report compile time apart from the first call.
        """
        return bool(self._compile_impl(prepared))

    def compile_count(self) -> int | None:
        """How many executables the runner has compiled so far, or None when the runtime cannot say."""
        return None

    def native_figures(self, feed: Mapping[str, Any], budget_s: float) -> dict[str, Any] | None:
        """Latency measured by the runtime's own native tool on this feed (no Python in the loop), if it has one."""
        return None

    def describe(self) -> dict[str, Any]:
        """How this runner calls its runtime: calling path, device, thread settings where known."""
        return {"calling_path": self.calling_path, "device": self.device, **self._describe_impl()}

    def _name_outputs(self, outputs: Sequence[Any]) -> dict[str, np.ndarray]:
        expected = self.manifest.outputs
        if len(outputs) != len(expected):
            raise RunError(
                f"Artifact '{self.directory}' | got {len(outputs)} outputs, expected {len(expected)} "
                f"({', '.join(o.name for o in expected)})"
            )
        named = {}
        for leaf, value in zip(expected, outputs):
            value = np.asarray(value)
            if value.dtype.name != leaf.dtype:
                raise RunError(leaf_message("Output", leaf.name, value.dtype.name, leaf.dtype))
            named[leaf.name] = value
        return named

    # -- to implement -------------------------------------------------------------------------
    def _prepare_impl(self, arrays: list[np.ndarray]) -> Any:
        raise NotImplementedError

    def _run_impl(self, prepared: Any) -> None:
        raise NotImplementedError

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        raise NotImplementedError

    def _compile_impl(self, prepared: Any) -> bool:
        return False

    def _describe_impl(self) -> dict[str, Any]:
        return {}


class Backend:
    """One export format. Subclasses set `name`, `requires`, and implement the `_impl` methods."""

    name: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()  # importable modules, checked without importing them
    extra: ClassVar[str] = ""  # the pip extra that installs them

    def available(self) -> Availability:
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if missing:
            hint = f"pip install 'multiexport[{self.extra}]'" if self.extra else f"pip install {' '.join(missing)}"
            return Availability(False, f"{', '.join(missing)} not installed ({hint})")
        return Availability(True)

    def export(
        self, fn: Callable[..., Any], signature: Signature, out_dir: str | os.PathLike, options: ExportOptions = ExportOptions()
    ) -> Artifact:
        """Export `fn` into `out_dir` (replaced whole, atomically) with a manifest.json."""
        self._require()
        out_dir = Path(out_dir)
        if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / MANIFEST_NAME).is_file():
            raise ArtifactError(
                f"Artifact '{out_dir}' | exists and holds files that are not an artifact, expected an empty or new directory"
            )
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
        os.chmod(staging, 0o777 & ~current_umask())
        try:
            manifest = self._export_impl(fn, signature, staging, options)
            # The signature says how the target carries its weights; the backend adds where this artifact keeps them.
            manifest = dataclasses.replace(manifest, weights={**signature.weights, **manifest.weights})
            manifest.write(staging)
            _replace_dir(staging, out_dir)
        except MultiexportError:
            raise
        except Exception as exc:
            raise ExportError(f"Backend '{self.name}' | export failed: {type(exc).__name__}: {exc}", backend=self.name) from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return Artifact(self.name, out_dir, manifest)

    def load(self, artifact_dir: str | os.PathLike, device: str = "cpu") -> Runner:
        """A runner for the artifact in `artifact_dir`, built from the directory alone."""
        self._require()
        if device not in DEVICES:
            raise RunError(f"Device '{device}' | unknown, expected one of {', '.join(DEVICES)}")
        manifest = Manifest.read(artifact_dir)
        if manifest.backend != self.name:
            raise ArtifactError(
                f"Artifact '{artifact_dir}' | got a '{manifest.backend}' artifact, expected '{self.name}'"
            )
        return self._load_impl(manifest, Path(artifact_dir), device)

    def device_status(self, device: str) -> Availability:
        """Whether this backend can run on `device` here, and what it found (imports the runtime).

        Call it in a worker process where the runtime's import or GPU initialisation must not touch
        the caller (compare does).
        """
        if device not in DEVICES:
            raise RunError(f"Device '{device}' | unknown, expected one of {', '.join(DEVICES)}")
        status = self.available()
        if not status.ok:
            return status
        if device == "cpu":
            return Availability(True, "cpu")
        return self._gpu_status_impl()

    def _require(self) -> None:
        status = self.available()
        if not status.ok:
            raise BackendUnavailable(f"Backend '{self.name}' | unavailable: {status.reason}")

    # -- to implement -------------------------------------------------------------------------
    def _export_impl(self, fn: Callable[..., Any], signature: Signature, out_dir: Path, options: ExportOptions) -> Manifest:
        raise NotImplementedError

    def _load_impl(self, manifest: Manifest, directory: Path, device: str) -> Runner:
        raise NotImplementedError

    def _gpu_status_impl(self) -> Availability:
        return Availability(False, f"backend '{self.name}' has no GPU support")


def _replace_dir(staging: Path, out_dir: Path) -> None:
    """Move a finished staging directory into place; the old artifact goes only once the new one is whole."""
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(staging, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out_dir)


EXAMPLE_INPUTS = "example_inputs.npz"
EXAMPLE_LIMIT_BYTES = 64 << 20  # above this the artifact ships without example values


def write_example_inputs(signature: Signature, out_dir: Path) -> str | None:
    """The target's example values as OUT/example_inputs.npz, so `multiexport run DIR` works as is.

    Returns the file name, or None when there are no (complete) examples or they are too large to ship.
    """
    from .arrays_io import save_npz

    examples = signature.example_feed()
    if not examples or sum(a.nbytes for a in examples.values()) > EXAMPLE_LIMIT_BYTES:
        return None
    save_npz(out_dir / EXAMPLE_INPUTS, examples)
    return EXAMPLE_INPUTS


def bindings(leaves, used: Sequence[bool], params: Sequence[int | str | None]) -> list[LeafBinding]:
    """LeafBindings for signature leaves, with each format's used flags and parameter ids."""
    return [
        LeafBinding(
            name=leaf.name, alias=leaf.alias, shape=list(leaf.shape), dtype=leaf.dtype,
            used=bool(u), param=p, weak_type=leaf.weak_type,
        )
        for leaf, u, p in zip(leaves, used, params)
    ]


def base_versions() -> dict[str, str]:
    """Versions every manifest records."""
    from . import __version__

    return {"multiexport": __version__, "python": platform.python_version(), "numpy": np.__version__}


def dist_version(dist: str) -> str:
    """The installed version of a distribution, or "not installed"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
