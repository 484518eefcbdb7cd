"""The Python API: the same jobs as the CLI, from a script or a test."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .errors import ArtifactError, BackendUnavailable, TargetError
from .export.contract import Artifact, ExportOptions, RunOptions, Runner
from .signature import Target


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
    """Named input and output leaves of `target` (see `multiexport.signature.Signature`)."""
    from .signature import build_signature

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
) -> Artifact:
    """Export `target` with one backend into `out_dir` (artifact files + manifest.json); see ExportOptions."""
    from .export.registry import get_backend
    from .signature import build_signature

    target = as_target(target)
    options = ExportOptions(keep_unused=keep_unused, platforms=tuple(platforms) if platforms else None,
                            external_weights=external_weights,
                            static_sizes={k: tuple(v) for k, v in (static_sizes or {}).items()},
                            backend_options=dict(backend_options or {}), check_load=check_load)
    chosen = get_backend(backend)
    return chosen.export(target.fn, build_signature(target), Path(out_dir), options)


def load(artifact_dir: str | os.PathLike, device: str = "cpu", *, threads: int | None = None,
         trust_artifact: bool = False) -> Runner:
    """A runner for an artifact directory; the backend is read from its manifest.

    trust_artifact: load a format that carries code (a SavedModel) without checking its graph first; only
    for artifacts you trust like your own code.
    """
    from .export.manifest import Manifest
    from .export.registry import get_backend, names

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
    from .export.stablehlo import export_module, leaf_binding, module_interface
    from .signature import build_signature
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


def compare(target: Target | Callable[..., Any], *args: Any, backends: Sequence[str] = ("xla",), **options: Any):
    """Export with each backend, check parity against jax.jit, benchmark; returns `results.Results`.

    `target` is a Target, or a function followed by its example arguments. Options are the fields of
    `multiexport.comparison.CompareConfig` (out_dir, trials, tolerances, bench, batch_sizes, threads, ...),
    plus target_spec and progress.
    """
    from .comparison import compare as run_compare

    kwargs = options.pop("kwargs", {})
    return run_compare(as_target(target, *args, **kwargs), backends=tuple(backends), **options)
