"""The reference side of `locate`: every op's value as XLA on the CPU computes the exported module, checked
against jax.jit on the final outputs.

The module is the one the StableHLO-based exports start from (`export_module` of the signature's flat function,
every leaf kept, the trial's sizes made concrete), instrumented so that `main` also returns each op's result
(`exporting.instrument`), compiled by the XLA CPU client jax.jit itself uses, and run on the trial's feed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..exporting.instrument import instrument_module, run_module
from ..exporting.intermediates import Site
from ..exporting.stablehlo import concrete_specs, export_module


@dataclass(frozen=True)
class Reference:
    """The reference values of one trial.

    sites: the module's sites, data-flow order. values: site key -> value.
    outputs: output leaf -> the instrumented module's result; jit_outputs: output leaf -> jax.jit's.
    agreement: one line saying how the instrumented module's outputs compare with jax.jit's.
    source: the exported module (a portable artifact): ops are isolated from it for replay and --reduce.
    arg_leaves: per argument of the module's `main`, the input leaf it takes.
    """

    sites: tuple[Site, ...]
    values: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    jit_outputs: Mapping[str, np.ndarray]
    agreement: str
    source: bytes
    arg_leaves: tuple[str, ...]


def build_reference(fn: Callable[..., Any], signature: Any, feed: Mapping[str, np.ndarray],
                    dims: Mapping[str, int]) -> Reference:
    """Export, instrument, compile and run the reference for `feed` (a trial with symbolic sizes `dims`)."""
    import jax

    specs = concrete_specs(signature, dict(dims)) if signature.symbolic_dims else None
    exported = export_module(fn, signature, keep_unused=True, platforms=("cpu",), specs=specs)
    source = bytes(exported.mlir_module_serialized)
    instrumented = instrument_module(source)
    leaves = tuple(leaf.name for leaf in signature.inputs)
    if len(instrumented.args) != len(leaves):
        raise ValueError(f"the reference module takes {len(instrumented.args)} arguments, expected one per input "
                         f"leaf ({len(leaves)})")
    args = [np.asarray(feed[name]) for name in leaves]
    results = run_module(instrumented, args)
    out_names = [leaf.name for leaf in signature.outputs]
    outputs = dict(zip(out_names, results[:instrumented.n_results]))
    values = {site.key: value for site, value in zip(instrumented.sites, results[instrumented.n_results:])}
    with jax.default_device(jax.devices("cpu")[0]):
        jit = [np.asarray(o) for o in jax.jit(signature.flat_function(fn))(*args)]
    jit_outputs = dict(zip(out_names, jit))
    return Reference(sites=instrumented.sites, values=values, outputs=outputs, jit_outputs=jit_outputs,
                     agreement=agreement(outputs, jit_outputs), source=source, arg_leaves=leaves)


def agreement(outputs: Mapping[str, np.ndarray], jit_outputs: Mapping[str, np.ndarray]) -> str:
    """'equal to jax.jit on every output' or the largest difference, relative to the output's max |value|."""
    worst, where = 0.0, ""
    for name, ref in jit_outputs.items():
        got = outputs[name]
        if got.shape != ref.shape:
            return f"differs from jax.jit in shape on {name}: {got.shape} vs {ref.shape}"
        a, b = got.astype(np.float64), ref.astype(np.float64)
        both = np.isfinite(a) & np.isfinite(b)
        if not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return f"differs from jax.jit in which elements are finite on {name}"
        if both.any():
            diff = float(np.max(np.abs(a[both] - b[both])))
            scale = float(np.max(np.abs(b[both]))) or 1.0
            if diff / scale > worst:
                worst, where = diff / scale, name
    if worst == 0.0:
        return "the instrumented module's outputs equal jax.jit's (bit for bit)"
    return f"the instrumented module's outputs differ from jax.jit's by at most {worst:.2g} of max|ref| ({where})"
