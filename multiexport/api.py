"""The Python API: the same jobs as the CLI, from a script or a test."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from .comparison import CompareConfig
from .errors import ArtifactError, BackendUnavailable, TargetError, UsageError
from .exporting.contract import Artifact, ExportOptions, RunOptions, Runner
from .leaves import Target
from .results import Results

if TYPE_CHECKING:
    from typing import Unpack

    from .comparison import CompareOptions
    from .exporting.precision import Calibration


def as_target(target: Target | Callable[..., Any], *args: Any, **kwargs: Any) -> Target:
    """A Target as is, or a plain function with example arguments wrapped into one."""
    if isinstance(target, Target):
        if args or kwargs:
            raise TargetError(f"Target '{target.name}' | got extra example arguments, expected them inside the Target")
        return target
    if callable(target):
        return Target(target, args=args, kwargs=kwargs)
    raise TargetError(f"Target | got {type(target).__name__}, expected a multiexport.Target or a function")


def signature(target: Target | Callable[..., Any], *args: Any, **kwargs: Any):
    """Named input and output leaves of `target` (see `multiexport.leaves.Signature`)."""
    from .leaves import build_signature

    return build_signature(as_target(target, *args, **kwargs))


def export(
    target: Target,
    out_dir: str | os.PathLike,
    backend: str = "xla",
    *,
    keep_unused: bool = False,
    platforms: Sequence[str] | None = None,
    external_weights: str = "auto",
    static_sizes: Mapping[str, Sequence[int]] | None = None,
    backend_options: Mapping[str, Any] | None = None,
    check_load: bool = True,
    precision: str = "fp32",
    calibration: str | os.PathLike | None = None,
) -> Artifact:
    """Export `target` with one backend into `out_dir` (artifact files + manifest.json); see ExportOptions.

    precision: "fp32", or a reduced precision the backend makes (fp16, int8-dynamic, int8); `backend` may also
        name it as a variant ("onnx@int8"). calibration: for int8, an .npz of input leaves with a leading sample
        axis; None: synthetic samples in the example's domain (the manifest says so).
    Returns the Artifact written (its directory and manifest).
    """
    from .exporting.precision import FP32, check_precision, split_variant
    from .exporting.registry import get_backend
    from .leaves import build_signature

    target = as_target(target)
    base, named = split_variant(backend)
    if named != FP32 and check_precision(precision) not in (FP32, named):
        raise UsageError(f"Option 'precision' | got {precision} with backend '{backend}', expected one precision")
    precision = named if named != FP32 else precision
    chosen = get_backend(base)
    signature = build_signature(target)
    with _calibration(signature, precision, calibration) as source:
        options = ExportOptions(keep_unused=keep_unused, platforms=tuple(platforms) if platforms else None,
                                external_weights=external_weights,
                                static_sizes={k: tuple(v) for k, v in (static_sizes or {}).items()},
                                backend_options=dict(backend_options or {}), check_load=check_load,
                                precision=precision, calibration=source)
        return chosen.export(target.fn, signature, Path(out_dir), options)


@contextlib.contextmanager
def _calibration(signature, precision: str, given: str | os.PathLike | None) -> Iterator[Calibration | None]:
    """The calibration of an int8 export: the given file, or synthetic samples in a temporary directory
    (removed afterwards); None for the other precisions (UsageError when a file is given to them)."""
    from .exporting.precision import DEFAULT_CALIBRATION_SAMPLES, Calibration, needs_calibration, write_calibration

    if not needs_calibration(precision):
        if given is not None:
            raise UsageError(f"Option 'calibration' | given for precision {precision}, expected it only with int8")
        yield None
        return
    if given is not None:
        yield Calibration(str(Path(given).resolve()), False, f"given in {Path(given).name}")
        return
    import shutil

    from .files.temporary import make_temporary
    from .measure.inputs import DEFAULT_DIM_SIZES, synthetic_samples

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


def load(artifact_dir: str | os.PathLike, device: str = "cpu", *, threads: int | None = None,
         trust_artifact: bool = False) -> Runner:
    """A runner for an artifact directory; the backend is read from its manifest.

    trust_artifact: load a format that carries code (a SavedModel) without checking its graph first; only
    for artifacts you trust like your own code.
    """
    from .exporting.manifest import Manifest
    from .exporting.registry import get_backend, names

    manifest = Manifest.read(artifact_dir)
    try:
        backend = get_backend(manifest.backend)
    except BackendUnavailable:
        if manifest.backend in names():
            raise
        raise ArtifactError(f"Artifact '{artifact_dir}' | its manifest names backend '{manifest.backend}', expected one "
                            f"of: {', '.join(names())}") from None
    return backend.load(artifact_dir, RunOptions(device=device, threads=threads, trust_artifact=trust_artifact))


def describe(target: Target | Callable[..., Any], *args: Any, keep_unused: bool = False, **kwargs: Any) -> dict[str, Any]:
    """The signature with the XLA binding per leaf, as JSON-ready data (what `multiexport signature` shows).

    Each input row has name, alias, shape, dtype, used (the XLA module reads it) and xla_param (its argument
    position in the module, or None when XLA pruned it); the truth comes from the exported module itself.
    """
    from .exporting.stablehlo import export_module, leaf_binding, module_interface
    from .leaves import build_signature
    from .versions import base_versions

    target = as_target(target, *args, **kwargs)
    sig = build_signature(target)
    exported = export_module(target.fn, sig, keep_unused=keep_unused)
    names = [leaf.name for leaf in sig.inputs]
    used, params = leaf_binding(module_interface(exported, names), names)
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


def compare(target: Target | Callable[..., Any] | str, *args: Any, config: CompareConfig | None = None,
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
    from .comparison import compare as run_compare
    from .leaves.factory_cache import FactoryCache

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
        from .measure.timeline import Timeline

        spec = target_spec(target)
        timeline = Timeline()
        timeline.mark(BUILD_STEP)
        with FactoryCache() as cache:  # the export workers build the target from the programs this load compiles
            return run_compare(load_target(spec, cache), config, target_spec=spec, progress=say, timeline=timeline)
    return run_compare(as_target(target, *args, **dict(kwargs or {})), config, progress=say)


BUILD_STEP = "build the target (import its module, make its arguments)"


def target_spec(target: str, cwd: str | os.PathLike | None = None) -> str:
    """The TARGET string a worker resolves: a file made absolute against `cwd` (default: the working directory
    now), since workers start wherever the target's factory left the working directory."""
    from .leaves.target import looks_like_file

    module, colon, attr = target.rpartition(":") if ":" in target else (target, "", "")
    if not looks_like_file(module):
        return target
    return os.path.join(os.fspath(cwd) if cwd is not None else os.getcwd(), os.path.expanduser(module)) + colon + attr


def load_target(spec: str, cache: Any = None) -> Target:
    """The Target a TARGET string names (through `cache`, a FactoryCache, when given)."""
    from .leaves import load_target as resolve

    return cache.load(spec) if cache is not None else resolve(spec)


def register_backend(name: str, locator: str) -> None:
    """Add a backend from outside multiexport, for this process and the workers it starts.

    Args:
        name: the backend's name, as `--backend` and `backends=` take it (not a built-in one).
        locator: "package.module:Class", a subclass of `multiexport.exporting.contract.Backend`.
    """
    from .exporting.registry import register

    register(name, locator)
