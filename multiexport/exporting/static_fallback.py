"""The static-size fallback: one model per size when a format's converter cannot keep a symbolic dimension.

Converters break on symbolic shapes in ways that have nothing to do with the format: jax2onnx meets
Python shape logic in a model's code, the TFLite converter has no `stablehlo.dynamic_gather`, IREE
cannot compile some dynamic modules. The format can still run the model at fixed sizes, so instead of
an honest but unhelpful "no", the pipeline exports the same function once per requested size (the
signature specialised by `specialize`) into `static/<b8>/` sub-artifacts, each a complete artifact
with its own manifest, and writes a top-level manifest whose `supports.dims` lists exactly the sizes
built. `StaticSizesRunner` runs such an artifact: it picks the sub-artifact by the sizes the feed
binds and refuses the others as `size-unsupported`, so compare checks and times only what exists.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import ArtifactError, UsageError
from ..versions import utc_now
from .facts import FallbackFacts, StaticSizesFacts
from .inventory import EXAMPLE_INPUTS, inventory, inventory_sha256, write_example_inputs
from .manifest import LeafBinding, Manifest
from .manifest_records import Supports
from .native_section import MAX_STATIC_MODULES, static_size_sets
from .stablehlo import concrete_specs, evaluate_dim
from .static_runner import (  # noqa: F401  (re-exported: they were defined here)
    FORMAT_KEY,
    STATIC_MODELS_DIR,
    StaticSizesRunner,
    models_of,
    parse_key,
    size_dir,
    size_key,
)

if TYPE_CHECKING:
    from ..leaves import Signature
    from .contract import Backend, ExportOptions
    from .manifest import Manifest

# Failures a fixed size cannot avoid: trying every size again would only repeat them.
NOT_SHAPE_RELATED = frozenset({"unavailable", "unsupported-dtype", "size-limit", "unsupported-platform",
                               "nondeterministic-target", "internal-error", "interrupted", "timeout",
                               "out-of-memory"})


@dataclass(frozen=True)
class FallbackPlan:
    """What the fallback builds after the symbolic export failed.

    sizes: the size bindings to export, the example's first (its failure ends the fallback).
    dropped: bindings asked for but not attempted, with why (more than the format may hold).
    """

    sizes: tuple[dict[str, int], ...]
    dropped: tuple[str, ...] = ()





def plan(backend: "Backend", signature: "Signature", options: "ExportOptions", category: str) -> FallbackPlan | None:
    """The sizes to try after `backend`'s symbolic export failed with `category`, or None when a fixed size
    cannot help (no symbolic dims, the backend keeps every dim itself, a failure no shape causes)."""

    if not signature.symbolic_dims or not backend.static_fallback or category in NOT_SHAPE_RELATED:
        return None
    example = signature.example_sizes()
    requested = dict(options.fallback_sizes or options.static_sizes)
    requested = {d: v for d, v in requested.items() if d in signature.symbolic_dims}
    try:
        combos = static_size_sets(signature.symbolic_dims, requested, example)
        dropped: tuple[str, ...] = ()
    except UsageError:  # more bindings than an artifact may hold: the example's, and say what was left out
        combos = static_size_sets(signature.symbolic_dims, {}, example)
        dropped = (f"{', '.join(f'{d}={list(v)}' for d, v in requested.items())}: more than "
                   f"{MAX_STATIC_MODULES} models",)
    if not combos:
        return None
    first = [c for c in combos if example is not None and c == example]
    ordered = first + [c for c in combos if c not in first]
    return FallbackPlan(tuple(ordered), dropped)


def specialize(signature: "Signature", sizes: Mapping[str, int]) -> "Signature":
    """`signature` with every symbolic dimension fixed at `sizes`: static specs, concrete leaf shapes, and
    example values tiled (or cut) along the symbolic axes so they stay in the example's domain."""

    sizes = dict(sizes)
    example_sizes = signature.example_sizes() or {}

    def concrete(leaf):
        return dataclasses.replace(leaf, shape=tuple(d if isinstance(d, int) else evaluate_dim(d, sizes)
                                                     for d in leaf.shape))

    examples = []
    for leaf, example in zip(signature.inputs, signature.examples):
        if example is None or not leaf.is_symbolic:
            examples.append(example)
            continue
        value = np.asarray(example)
        for axis, dim in enumerate(leaf.shape):
            if isinstance(dim, int):
                continue
            want = evaluate_dim(dim, sizes)
            have = value.shape[axis] if not example_sizes else evaluate_dim(dim, example_sizes)
            if want != have and have > 0:
                value = np.take(value, np.arange(want) % have, axis=axis)
        examples.append(value)
    return dataclasses.replace(
        signature,
        inputs=tuple(concrete(leaf) for leaf in signature.inputs),
        outputs=tuple(concrete(leaf) for leaf in signature.outputs),
        symbolic_dims=(),
        examples=tuple(examples),
        specs=tuple(concrete_specs(signature, sizes)),
    )


def describe_failure(exc: BaseException) -> str:
    """The converter's own words, on one line, without terminal escapes (they end up in reports)."""
    import re

    text = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?", "", str(exc))
    return " ".join(text.split())[:1500]


def manifest_for(backend: "Backend", signature: "Signature", options: "ExportOptions",
                 resolved: dict[str, Any], built: Mapping[str, "Manifest"], not_built: Mapping[str, str],
                 symbolic_error: BaseException, staging: Path) -> "Manifest":
    """The top-level manifest of a fallback artifact from its per-size manifests (`built`: size key -> the
    sub-artifact's manifest, the example's size first)."""

    first = next(iter(built.values()))
    for key, sub in built.items():  # one binding for every size, or the manifest could not state it
        if [(leaf.used, leaf.param) for leaf in sub.inputs] != [(leaf.used, leaf.param) for leaf in first.inputs]:
            raise ArtifactError(f"Backend '{backend.name}' | the model for {key} binds its inputs differently from "
                                f"the one for {next(iter(built))}, expected one binding for every size")

    def symbolic(leaves, subs) -> list[LeafBinding]:
        return [LeafBinding(name=leaf.name, alias=leaf.alias, shape=list(leaf.shape), dtype=leaf.dtype,
                            used=sub.used, param=sub.param, weak_type=leaf.weak_type, key_impl=leaf.key_impl)
                for leaf, sub in zip(leaves, subs)]

    files = {f"model {key}": f"{size_dir(parse_key(key))}/manifest.json" for key in built}
    if write_example_inputs(signature, staging):
        files["example_inputs"] = EXAMPLE_INPUTS
    dims: dict[str, list[int]] = {}
    for key in built:
        for d, n in parse_key(key).items():
            dims.setdefault(d, [])
            if n not in dims[d]:
                dims[d].append(n)
    why = describe_failure(symbolic_error)
    shown = "; ".join(key for key in built)
    failed = "compute right with" if getattr(symbolic_error, "category", "") == "parity-failed" else "export"
    warnings = [f"fixed sizes only: {backend.name} could not {failed} the symbolic "
                f"dimension{'s' if len(signature.symbolic_dims) > 1 else ''} {', '.join(signature.symbolic_dims)}, "
                f"so this artifact holds one model per size ({shown}) and takes no other size. The symbolic "
                f"export said: {why}"]
    warnings += [f"{key}: not built: {reason}" for key, reason in not_built.items()]
    warnings += [w for w in first.warnings if w not in signature.warnings]
    return Manifest(
        backend=backend.name,
        target=signature.name,
        inputs=symbolic(signature.inputs, first.inputs),
        outputs=symbolic(signature.outputs, first.outputs),
        keep_unused=options.keep_unused,
        symbolic_dims=list(signature.symbolic_dims),
        files=files,
        versions=dict(first.versions),
        created=utc_now(),
        inventory=inventory(staging),
        inventory_sha256=inventory_sha256(staging),
        requires=dict(first.requires),
        supports=Supports.coerce({"dims": {d: sorted(v) for d, v in dims.items()},
                                  "platforms": list(first.supports.get("platforms", ["cpu"])), "x64": signature.x64},
                                 "Manifest.supports"),
        format=StaticSizesFacts(static_fallback=FallbackFacts(
            why=why,
            category=str(getattr(symbolic_error, "category", "export-failed")),
            models={key: size_dir(parse_key(key)) for key in built},
            not_built=dict(not_built),
            note="each model is a complete artifact of this format with its own manifest.json; a consumer "
                 "picks the one whose sizes its inputs have",
        ), model_format=dict(first.format)).to_json(),
        warnings=[*signature.warnings, *warnings],
        weights=first.weights,
        options=resolved,
        native=None,
        precision=first.precision,  # each model's, made the same way (the first size's calibration facts)
    )
