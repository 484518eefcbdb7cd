"""The Python API: the same jobs as the CLI, from a script or a test."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from .backend import Artifact, ExportOptions, Runner
from .errors import TargetError
from .target import Target


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
) -> Artifact:
    """Export `target` with one backend into `out_dir` (artifact files + manifest.json)."""
    from .registry import get_backend
    from .signature import build_signature

    target = as_target(target)
    options = ExportOptions(keep_unused=keep_unused, platforms=tuple(platforms) if platforms else None,
                            external_weights=external_weights)
    return get_backend(backend).export(target.fn, build_signature(target), Path(out_dir), options)


def load(artifact_dir: str | os.PathLike, device: str = "cpu") -> Runner:
    """A runner for an artifact directory; the backend is read from its manifest."""
    from .manifest import Manifest
    from .registry import get_backend

    manifest = Manifest.read(artifact_dir)
    return get_backend(manifest.backend).load(artifact_dir, device=device)


def describe(target: Target | Callable[..., Any], *args: Any, keep_unused: bool = False, **kwargs: Any) -> dict[str, Any]:
    """The signature with the XLA binding per leaf, as JSON-ready data (what `multiexport signature` shows).

    Each input row has name, alias, shape, dtype, used (the XLA module reads it) and xla_param (its
    parameter index, or None when XLA pruned it); the truth comes from `Exported.module_kept_var_idx`.
    """
    from .backend import ExportOptions
    from .backends.xla import export_module, parameter_binding
    from .signature import build_signature

    target = as_target(target, *args, **kwargs)
    sig = build_signature(target)
    exported = export_module(target.fn, sig, ExportOptions(keep_unused=keep_unused))
    used, params = parameter_binding(exported, len(sig.inputs))
    data = sig.to_json()
    for row, u, p in zip(data["inputs"], used, params):
        row["used"] = u
        row["xla_param"] = p
    for i, row in enumerate(data["outputs"]):
        row["xla_result"] = i
    data["keep_unused"] = keep_unused
    data["module_kept_var_idx"] = sorted(exported.module_kept_var_idx)
    return data


def compare(target: Target | Callable[..., Any], *args: Any, backends: Sequence[str] = ("xla",), **options: Any):
    """Export with each backend, check parity against jax.jit, benchmark; returns `comparison.Results`.

    `target` is a Target, or a function followed by its example arguments. Options are those of
    `multiexport.comparison.compare` (out_dir, trials, tolerances, bench, batch_sizes, ...).
    """
    from .comparison import compare as run_compare

    kwargs = options.pop("kwargs", {})
    return run_compare(as_target(target, *args, **kwargs), backends=backends, **options)
