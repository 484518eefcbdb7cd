"""XLA's intermediates for `multiexport locate`: the module the artifact runs (the StableHLO inside its
model.jax_exported, what the runner's `Exported.call` compiles) instrumented to return every op's result,
compiled by the XLA CPU client jax itself uses, and run with the arguments the manifest binds (the platform index,
the leaves, the lifted weights from the artifact's weights file).

A re-compile of the shipped module with outputs added (XLA keeps no intermediate values of a compiled
executable); the report says so. A module with symbolic dimensions is first refined to the feed's sizes, as JAX
refines one before it compiles it (`refine_module`); one that takes effect tokens is not mapped here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np

from multiexport.sdk import (
    ArtifactError,
    Intermediates,
    IntermediatesRequest,
    instrument_module,
    iter_safetensors,
    refine_module,
    run_module,
)


def xla_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Instrument, compile and run the shipped module; values keyed by its own sites (`own_sites`)."""
    import jax
    from jax import export

    manifest, directory = request.manifest, Path(request.artifact_dir)
    facts = manifest.format
    try:
        exported = export.deserialize(bytearray(manifest.path(directory, "exported").read_bytes()))
    except Exception as exc:
        raise ArtifactError(f"Artifact '{directory}' | cannot deserialize its module with jax {jax.__version__}: "
                            f"{type(exc).__name__}: {exc}") from exc
    weights = dict(iter_safetensors(manifest.path(directory, "weights"), manifest.external_weights())) \
        if manifest.external_weights() else {}
    platforms = [str(p) for p in cast(list, facts.get("platforms") or ["cpu"])]
    args: list[Any] = []
    for arg in cast(list[dict[str, Any]], facts.get("module_args") or []):
        kind, name = str(arg.get("kind")), str(arg.get("name"))
        if kind == "platform_index":
            args.append(np.asarray(platforms.index("cpu") if "cpu" in platforms else 0, np.int32))
        elif kind == "leaf":
            args.append(np.asarray(request.feed[name]))
        elif kind == "weight":
            args.append(np.asarray(weights[name]))
        else:
            why = f"cannot map: the shipped module takes a {kind} argument, which locate does not pass"
            return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
    module, refined = bytes(exported.mlir_module_serialized), ""
    if facts.get("uses_shape_polymorphism"):
        try:
            module = refine_module(module, [np.shape(a) for a in args])
        except ValueError as exc:
            why = f"cannot map: the shipped module {exc}"
            return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
        refined = "; its symbolic dimensions refined to this feed's sizes by JAX's shape refinement"
    instrumented = instrument_module(module)
    results = run_module(instrumented, args)  # compiled by jax's XLA CPU client, as the reference is
    outputs = {leaf.name: r for leaf, r in zip(manifest.outputs, results[:instrumented.n_results])}
    values = {s.key: r for s, r in zip(instrumented.sites, results[instrumented.n_results:])}
    how = ("re-compile of the shipped module (model.jax_exported) with every op result returned, by jax's XLA CPU "
           f"client (jaxlib {jax.__version__}){refined}")
    return Intermediates(values=values, how=how, outputs=outputs, own_sites=instrumented.sites, recompiled=True)
