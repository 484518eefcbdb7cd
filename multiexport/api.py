"""The Python API: the same jobs as the CLI, from a script or a test, with one calling convention.

Every verb that works on a function takes it in any of three forms, alike:
    verb(f, *example_args, kwargs={...}, <options by keyword>)   a function and its example arguments
    verb(Target(f, args=...), <options by keyword>)                a Target
    verb("pkg.module:target", <options by keyword>)                a TARGET string, as the CLI takes it
and returns an object with the next verbs on it (as iree-turbine's `aot.export` does):
    signature(f, p, x)                      -> TargetSignature (a Signature) with .export(...), .compare(...)
    export(f, p, x, backend=, out_dir=)     -> Exported (an Artifact) with .run(feed), .load(), .compare(...)
    compare(f, p, x, backends=, out_dir=)   -> Results
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from .comparison import CompareConfig, compare as run_compare
from .errors import ArtifactError, BackendUnavailable, TargetError, UsageError
from .exporting.contract import Artifact, ExportOptions, RunOptions, Runner
from .exporting.manifest import Manifest
from .exporting.pipeline import export_artifact
from .exporting.precision import (
    DEFAULT_CALIBRATION_SAMPLES,
    FP32,
    Calibration,
    check_precision,
    needs_calibration,
    split_variant,
    variant_name,
    write_calibration,
)
from .exporting.registry import get_backend, names, register
from .exporting.stablehlo import export_module, leaf_binding, module_interface
from .files.npz import load_npz
from .files.temporary import make_temporary
from .leaves import Signature, Target, build_signature, load_target as resolve_target
from .leaves.factory_cache import FactoryCache
from .leaves.target import looks_like_file, top_level_packages
from .measure.inputs import DEFAULT_DIM_SIZES, synthetic_samples
from .measure.timeline import Timeline
from .results import Results
from .versions import base_versions

if TYPE_CHECKING:
    from typing import Unpack

    import numpy as np

    from .comparison import CompareOptions

TargetLike = Target | Callable[..., Any] | str
"""What every verb takes: a Target, a function (followed by its example arguments) or a TARGET string."""


def as_target(target: TargetLike, *args: Any, **kwargs: Any) -> Target:
    """The Target of any of the three forms: a Target as is, a function with its example arguments wrapped
    into one, a TARGET string ("path/to/file.py:attr" or "package.module:attr") loaded in this process."""
    if isinstance(target, Target):
        if args or kwargs:
            raise TargetError(f"Target '{target.name}' | got extra example arguments, expected them inside the Target")
        return target
    if isinstance(target, str):
        if args or kwargs:
            raise TargetError(f"Target '{target}' | got example arguments with a TARGET string, expected the string alone")
        return resolve_target(target)
    if callable(target):
        return Target(target, args=args, kwargs=kwargs)
    raise TargetError(f"Target | got {type(target).__name__}, expected a multiexport.Target, a function or a TARGET "
                      "string")


@dataclasses.dataclass(frozen=True, eq=False)
class TargetSignature(Signature):
    """A Signature that remembers its target, so the next verbs need no arguments again.

    target: the Target the signature was built from (`export` and `compare` use it).
    """

    target: Target | None = dataclasses.field(default=None, repr=False)

    def export(self, *, out_dir: str | os.PathLike, backend: str = "xla", **options: Any) -> Exported:
        """`multiexport.export` of this signature's target: one backend into `out_dir`."""
        return export(self._target(), out_dir=out_dir, backend=backend, **options)

    def compare(self, **options: Any) -> Results:
        """`multiexport.compare` of this signature's target, with its options by keyword."""
        return compare(self._target(), **options)

    def describe(self, *, keep_unused: bool = False) -> dict[str, Any]:
        """`multiexport.describe` of this signature's target: the XLA binding per leaf."""
        return describe(self._target(), keep_unused=keep_unused)

    def _target(self) -> Target:
        if self.target is None:
            raise TargetError(f"Signature '{self.name}' | has no target, expected one made by multiexport.signature")
        return self.target


@dataclasses.dataclass(frozen=True)
class Exported(Artifact):
    """An Artifact written by `export`, with the next verbs on it.

    target: the Target it was exported from (what `compare` compares again).
    options: the export's keyword options as given (precision, keep_unused, backend_options, ...), so
        `compare` measures the same variant of the same format.
    """

    target: Target | None = dataclasses.field(default=None, repr=False, compare=False)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def load(self, device: str = "cpu", *, threads: int | None = None, trust_artifact: bool = False) -> Runner:
        """A runner for this artifact, loaded from disk alone (see `multiexport.load`)."""
        return load(self.directory, device, threads=threads, trust_artifact=trust_artifact)

    def run(self, feed: Mapping[str, Any] | None = None, *, device: str = "cpu",
            threads: int | None = None) -> dict[str, np.ndarray]:
        """Run the artifact from disk on `feed` (named input leaves; default: its example inputs) and return
        the named outputs. Loads it for each call: for many calls, `load()` once and call the runner."""
        if feed is None:
            if "example_inputs" not in self.manifest.files:
                raise UsageError(f"Artifact '{self.directory}' | has no example_inputs.npz, expected a feed")
            feed = load_npz(self.manifest.path(self.directory, "example_inputs"))
        return self.load(device, threads=threads)(dict(feed))

    def compare(self, **options: Any) -> Results:
        """`multiexport.compare` of the same target with this backend at this precision (and the export's
        format options), in a compare's own directory: parity against jax.jit per leaf, and latency. The
        compare exports again, in its workers, so that it measures as every compare does."""
        if self.target is None:
            raise TargetError(f"Artifact '{self.directory}' | has no target, expected one made by multiexport.export")
        base, named = split_variant(self.backend)
        precision = named if named != FP32 else self.options.get("precision", FP32)
        given: dict[str, Any] = {"backends": (variant_name(base, precision),)}
        for name in ("keep_unused", "external_weights", "platforms"):
            if self.options.get(name) is not None:
                given[name] = self.options[name]
        if self.options.get("backend_options"):
            given["backend_options"] = {base: dict(self.options["backend_options"])}
        if self.options.get("calibration") is not None:
            given["calibration"] = Path(self.options["calibration"])
        return compare(self.target, **{**given, **options})


def signature(target: TargetLike, *args: Any, **kwargs: Any) -> TargetSignature:
    """Named input and output leaves of `target` (see `multiexport.leaves.Signature`): a function followed by
    its example arguments (keyword arguments of the function by keyword), a Target, or a TARGET string.
    Returns a TargetSignature, a Signature with `.export(...)`, `.compare(...)` and `.describe()`."""
    resolved = as_target(target, *args, **kwargs)
    built = build_signature(resolved)
    fields = {f.name: getattr(built, f.name) for f in dataclasses.fields(built) if f.init}
    return TargetSignature(**fields, target=resolved)


def export(
    target: TargetLike,
    *args: Any,
    out_dir: str | os.PathLike | None = None,
    backend: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    keep_unused: bool = False,
    platforms: Sequence[str] | None = None,
    external_weights: str = "auto",
    static_sizes: Mapping[str, Sequence[int]] | None = None,
    backend_options: Mapping[str, Any] | None = None,
    check_load: bool = True,
    precision: str = "fp32",
    calibration: str | os.PathLike | None = None,
) -> Exported:
    """Export `target` with one backend into `out_dir` (artifact files + manifest.json); see ExportOptions.

    Args:
        target: a function followed by its example arguments (`*args`; its keyword arguments in `kwargs`),
            a `Target`, or a TARGET string. After a Target or a string, two positional arguments are still
            read as `out_dir, backend` (the call of the release before).
        out_dir: the artifact directory to write (keyword; required).
        backend: the format (default "xla"); it may name a precision as a variant ("onnx@int8").
        precision: "fp32", or a reduced precision the backend makes (fp16, int8-dynamic, int8).
        calibration: for int8, an .npz of input leaves with a leading sample axis; None: synthetic samples
            in the example's domain (the manifest says so).

    Returns:
        The `Exported` artifact (an `Artifact`: its directory and manifest) with `.run(feed)`, `.load()`
        and `.compare()`.

    Raises:
        TypeError: out_dir missing or given twice. UsageError: an option is invalid.
    """
    out_dir, backend, example = _export_call(target, args, out_dir, backend)
    resolved = as_target(target, *example, **dict(kwargs or {}))
    base, named = split_variant(backend)
    if named != FP32 and check_precision(precision) not in (FP32, named):
        raise UsageError(f"Option 'precision' | got {precision} with backend '{backend}', expected one precision")
    precision = named if named != FP32 else precision
    chosen = get_backend(base)
    sig = build_signature(resolved)
    with _calibration(sig, precision, calibration) as source:
        options = ExportOptions(keep_unused=keep_unused, platforms=tuple(platforms) if platforms else None,
                                external_weights=external_weights,
                                static_sizes={k: tuple(v) for k, v in (static_sizes or {}).items()},
                                backend_options=dict(backend_options or {}), check_load=check_load,
                                precision=precision, calibration=source)
        artifact = export_artifact(chosen, resolved.fn, sig, Path(out_dir), options)
    given = dict(keep_unused=keep_unused, platforms=tuple(platforms) if platforms else None,
                 external_weights=external_weights, backend_options=dict(backend_options or {}), precision=precision,
                 calibration=os.fspath(calibration) if calibration is not None else None)
    fields = {f.name: getattr(artifact, f.name) for f in dataclasses.fields(artifact) if f.init}
    return Exported(**fields, target=resolved, options=given)


def _export_call(target: TargetLike, args: tuple, out_dir: Any, backend: str | None) -> tuple[Any, str, tuple]:
    """(out_dir, backend, example arguments) of an export call. After a function, positional arguments are
    its example arguments; after a Target or TARGET string, at most two: the legacy `out_dir, backend`."""
    example: tuple = args
    if isinstance(target, (Target, str)) and args:
        if len(args) > 2:
            raise TypeError(f"export() | got {len(args)} positional arguments after a Target, expected at most "
                            "out_dir and backend (or out_dir=..., backend=... by keyword)")
        legacy = dict(zip(("out_dir", "backend"), args))
        for name, value in (("out_dir", out_dir), ("backend", backend)):
            if name in legacy and value is not None:
                raise TypeError(f"export() | got multiple values for '{name}' (positional and keyword), expected one")
        out_dir, backend, example = legacy.get("out_dir", out_dir), legacy.get("backend", backend), ()
    if out_dir is None:
        hint = ""
        if any(isinstance(a, (str, os.PathLike)) for a in example):
            hint = ("; a path or name was among the example arguments: after a function they are its arguments, "
                    "give out_dir= and backend= by keyword")
        raise TypeError(f"export() | missing out_dir, expected the artifact directory to write: "
                        f"export(f, *example_args, backend=..., out_dir=...){hint}")
    return out_dir, backend or "xla", example

@contextlib.contextmanager
def _calibration(signature, precision: str, given: str | os.PathLike | None) -> Iterator[Calibration | None]:
    """The calibration of an int8 export: the given file, or synthetic samples in a temporary directory
    (removed afterwards); None for the other precisions (UsageError when a file is given to them)."""
    if not needs_calibration(precision):
        if given is not None:
            raise UsageError(f"Option 'calibration' | given for precision {precision}, expected it only with int8")
        yield None
        return
    if given is not None:
        yield Calibration(str(Path(given).resolve()), False, f"given in {Path(given).name}")
        return
    sizes = signature.example_sizes()
    setting = sizes if sizes is not None else {d: DEFAULT_DIM_SIZES[0] for d in signature.symbolic_dims}
    feeds = synthetic_samples(signature.inputs, signature.example_feed(), setting, 1009, DEFAULT_CALIBRATION_SAMPLES)
    scratch = make_temporary("calibration")
    try:
        path = write_calibration(scratch / "calibration.npz", feeds)
        yield Calibration(str(path), True, f"{len(feeds)} synthetic samples in the example's domain (seed 1009); "
                                           "give real data with --calibration")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def load(artifact_dir: str | os.PathLike | Artifact, device: str = "cpu", *, threads: int | None = None,
         trust_artifact: bool = False) -> Runner:
    """A runner for an artifact directory (or an `Artifact`, e.g. what `export` returned); the backend is
    read from its manifest.

    trust_artifact: load a format that carries code (a SavedModel) without checking its graph first; only
    for artifacts you trust like your own code.
    """
    if isinstance(artifact_dir, Artifact):
        artifact_dir = artifact_dir.directory
    manifest = Manifest.read(artifact_dir)
    try:
        backend = get_backend(manifest.backend)
    except BackendUnavailable:
        if manifest.backend in names():
            raise
        raise ArtifactError(f"Artifact '{artifact_dir}' | its manifest names backend '{manifest.backend}', expected one "
                            f"of: {', '.join(names())}") from None
    return backend.load(artifact_dir, RunOptions(device=device, threads=threads, trust_artifact=trust_artifact))


def describe(target: TargetLike, *args: Any, keep_unused: bool = False, **kwargs: Any) -> dict[str, Any]:
    """The signature with the XLA binding per leaf, as JSON-ready data (what `multiexport signature` shows);
    `target` in any of the three forms (a function with its example arguments, a Target, a TARGET string).

    Each input row has name, alias, shape, dtype, used (the XLA module reads it) and xla_param (its argument
    position in the module, or None when XLA pruned it); the truth comes from the exported module itself.
    """
    target = as_target(target, *args, **kwargs)
    sig = build_signature(target)
    exported = export_module(target.fn, sig, keep_unused=keep_unused)
    leaf_names = [leaf.name for leaf in sig.inputs]
    used, params = leaf_binding(module_interface(exported, leaf_names), leaf_names)
    data = sig.to_json()
    for row, u, p in zip(data["inputs"], used, params):
        row["used"] = u
        row["xla_param"] = p
    for i, row in enumerate(data["outputs"]):
        row["xla_result"] = i
    data["keep_unused"] = keep_unused
    data["module_kept_var_idx"] = sorted(exported.module_kept_var_idx)
    data["producer"] = {**base_versions(), "calling_convention_version": exported.calling_convention_version}
    return data


def compare(target: TargetLike, *args: Any, config: CompareConfig | None = None,
            progress: Callable[[str], None] | None = None, kwargs: Mapping[str, Any] | None = None,
            **options: Unpack[CompareOptions]) -> Results:
    """Export with each backend, check parity against jax.jit per named output leaf, and benchmark.

    Args:
        target: a TARGET string (`path/to/file.py:attr` or `package.module:attr`), a `Target`, or a function
            followed by its example arguments (`*args`, and `kwargs` for keyword arguments). Given a string,
            the compare measures exactly as `multiexport compare` does: every export in a worker process of
            its own, the jax.jit reference timed in a worker, paired rounds. Given an object, the exports run
            in this process (a function cannot be sent to a worker), the rest is the same.
        config: a `CompareConfig`; or give its fields as keyword `options` (backends, out_dir, trials,
            tolerances, bench, batch_sizes, threads, ...), validated the same way. Not both.
        progress: called with one line per step (the CLI prints them with the elapsed time).

    Returns:
        The `Results` also written to `out_dir/results.json` (with report.md and report.html beside it).

    Raises:
        UsageError: an option is invalid (before any work starts). TargetError: the target cannot be loaded.
        Interrupted: a signal stopped the run (the results of what finished are written first).
    """
    if config is None:
        given: dict[str, Any] = dict(options)
        if "backends" in given and not isinstance(given["backends"], str):  # a list is fine here; the config keeps a tuple
            given["backends"] = tuple(given["backends"])
        if given.get("out_dir") is not None:
            given["out_dir"] = Path(given["out_dir"])
        config = CompareConfig(**given)
    elif options:
        raise UsageError(f"compare | got a CompareConfig and options {', '.join(options)}, expected one or the other")
    say = progress or (lambda message: None)
    if isinstance(target, str):
        if args or kwargs:
            raise TargetError(f"Target '{target}' | got example arguments with a TARGET string, expected the string alone")
        spec = target_spec(target)
        timeline = Timeline()
        timeline.mark(BUILD_STEP)
        before = top_level_packages()
        with FactoryCache() as cache:  # the export workers build the target from the programs this load compiles
            built = load_target(spec, cache)
            return run_compare(built, config, target_spec=spec, progress=say, timeline=timeline,
                               target_modules=top_level_packages() - before)
    return run_compare(as_target(target, *args, **dict(kwargs or {})), config, progress=say)


BUILD_STEP = "build the target (import its module, make its arguments)"


def target_spec(target: str, cwd: str | os.PathLike | None = None) -> str:
    """The TARGET string a worker resolves: a file made absolute against `cwd` (default: the working directory
    now), since workers start wherever the target's factory left the working directory."""
    module, colon, attr = target.rpartition(":") if ":" in target else (target, "", "")
    if not looks_like_file(module):
        return target
    return os.path.join(os.fspath(cwd) if cwd is not None else os.getcwd(), os.path.expanduser(module)) + colon + attr


def load_target(spec: str, cache: Any = None) -> Target:
    """The Target a TARGET string names (through `cache`, a FactoryCache, when given)."""
    return cache.load(spec) if cache is not None else resolve_target(spec)


def register_backend(name: str, locator: str) -> None:
    """Add a backend from outside multiexport, for this process and the workers it starts.

    Args:
        name: the backend's name, as `--backend` and `backends=` take it (not a built-in one).
        locator: "package.module:Class", a subclass of `multiexport.exporting.contract.Backend`.
    """
    register(name, locator)
