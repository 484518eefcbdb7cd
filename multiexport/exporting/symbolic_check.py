"""A symbolic artifact computes what the function computes at the example, or the static sizes are tried.

A converter can take a module with symbolic dimensions and write a model that runs but is wrong: LiteRT's
converter turned keras-hub's LlamaBackbone with a symbolic batch into a model off by 1.1x its output's max
on every element, while the same model converted at a static batch was right (benchmarks/real_models/
MATRIX.md, class 6). Parity would report `parity-failed`, an honest no where a working artifact was within
reach. So the export's load check of a symbolic artifact compares its outputs with jax.jit's on the
example, and a gross difference fails the export, which the static-size fallback then answers. jax.jit's
outputs come from the compare where it hands them (`remember`); an export worker that did not build the target
(leaves/handed.py) runs the compare's module of the function instead.

Only gross errors count here (beyond GROSS of a leaf's max |ref|, or a different NaN pattern): the
compare's parity check, with its tolerances and every trial, still judges whatever is kept. A reduced-
precision artifact (fp16, int8) is off by design, by more than GROSS (int8: ~5 % of the max measured on a
ResNet): for it, gross is a cosine similarity below GROSS_COSINE, far outside any accuracy budget (the
compare's budget for int8 is 0.99), so quantization error alone never sends it to the static fallback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from ..dtypes import is_float
from ..leaves.handed import CPU, is_handed
from .jit_runner import enable_x64_if_needed

if TYPE_CHECKING:
    from ..leaves import Signature

GROSS = 1e-2
GROSS_COSINE = 0.9
_MEMO: dict[tuple, dict[str, np.ndarray]] = {}  # one jax.jit per function and shapes in an export worker


def wrong_result(fn: Callable[..., Any], signature: "Signature", feed: Mapping[str, np.ndarray],
                 got: Mapping[str, Any], precision: str = "fp32") -> str | None:
    """Why the artifact's outputs `got` on `feed` are grossly wrong against jax.jit of `fn`, naming the
    leaf; None when they agree or cannot be compared (`feed` is not the signature's example). precision:
    the artifact's (exporting.precision); a reduced one is judged by cosine (GROSS_COSINE)."""
    examples = signature.example_feed()
    if any(name not in examples or not np.array_equal(np.asarray(value), examples[name]) for name, value in feed.items()):
        return None
    expected = _reference(fn, signature)
    if expected is None:
        return None
    for name, ref in expected.items():
        if name not in got or not is_float(ref.dtype):
            continue
        have = np.asarray(got[name]).astype(np.float64)
        want = ref.astype(np.float64)
        if have.shape != want.shape:
            return f"Output '{name}' | got shape {have.shape}, expected {want.shape} at the example"
        if not np.array_equal(np.isnan(have), np.isnan(want)):
            return f"Output '{name}' | NaN pattern differs from jax.jit's at the example"
        finite = np.isfinite(want) & np.isfinite(have)
        top = float(np.abs(want[finite]).max()) if finite.any() else 0.0
        err = float(np.abs(have[finite] - want[finite]).max()) if finite.any() else 0.0
        if precision != "fp32":
            norms = float(np.linalg.norm(have[finite]) * np.linalg.norm(want[finite]))
            cosine = float(np.dot(have[finite], want[finite]) / norms) if norms else float(err == 0)
            if cosine < GROSS_COSINE:
                return (f"Output '{name}' | cosine similarity {cosine:.3g} with jax.jit at the example, expected at "
                        f"least {GROSS_COSINE:g} even at {precision}")
            continue
        if top and err > GROSS * top:
            return (f"Output '{name}' | max err {err:.3g} ({err / top:.3g} of the leaf's max |ref|) against jax.jit "
                    f"at the example, expected within {GROSS:g} of it")
    return None


def remember(fn: Callable[..., Any], signature: "Signature", outputs: Mapping[str, np.ndarray]) -> bool:
    """Take `outputs` as jax.jit's outputs of `fn` at the signature's example, computed elsewhere: the
    compare's reference on its first trial when that is the example (the export worker's target reproduces
    the compare's example values and weights, or its fingerprint refuses every export it makes). Each export
    worker then skips compiling the target for this check (keras_hub_gpt2: ~0.5 CPU s per worker; a model
    with baked weights: a compile holding them as constants). Returns False, keeping nothing, for outputs
    that are not one array per output leaf with the leaf's dtype and rank (and its fixed dimensions)."""
    key = _key(fn, signature)
    if key is None:
        return False
    kept = {}
    for leaf in signature.outputs:
        value = outputs.get(leaf.name)
        if value is None:
            return False
        value = np.asarray(value)
        if (value.dtype.name != leaf.dtype or value.ndim != len(leaf.shape)
                or any(isinstance(d, int) and d != n for d, n in zip(leaf.shape, value.shape))):
            return False
        kept[leaf.name] = value
    _MEMO[key] = kept
    return True


def _key(fn: Callable[..., Any], signature: "Signature") -> tuple | None:
    """The memo's key: the function, the target and the example's shapes; None without example values."""
    examples = signature.example_feed()
    if any(leaf.name not in examples for leaf in signature.inputs):
        return None
    return (id(fn), signature.name, tuple((np.shape(examples[leaf.name]), np.asarray(examples[leaf.name]).dtype.str)
                                          for leaf in signature.inputs))


def _reference(fn: Callable[..., Any], signature: "Signature") -> dict[str, np.ndarray] | None:
    import jax


    key = _key(fn, signature)
    if key is None:
        return None
    examples = signature.example_feed()
    args = [np.asarray(examples[leaf.name]) for leaf in signature.inputs]
    if key not in _MEMO:
        if is_handed(fn):  # an export worker that did not build the target: the compare's module of it, run here
            call = fn.module(False, CPU, False).call  # its symbolic module, at this signature's (fixed) sizes
        else:
            call = jax.jit(signature.flat_function(fn))
        with jax.default_device(jax.devices("cpu")[0]):
            outs = enable_x64_if_needed(signature.x64)(call)(*args)
        _MEMO[key] = {leaf.name: np.asarray(o) for leaf, o in zip(signature.outputs, outs)}
    return _MEMO[key]
