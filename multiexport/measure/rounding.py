"""How far rounding alone moves each output leaf of this model: the floor under every parity check.

Two faithful float32 implementations of a network (another summation order, another convolution
algorithm, a fused multiply-add) differ by rounding, and a deep network amplifies rounding: on
Keras MobileNetV2, EfficientNetB0 and ResNet50 every converter's output was 1e-5 to 7e-5 of the
output's max |ref| from jax.jit, about as far as jax.jit itself is from a float64 build of the same
model, ten times the float32 default tolerance calibrated on shallower models (benchmarks/real_models/
MATRIX.md, class 5). A fixed tolerance is either too tight for such a model or too loose for a shallow one.

So the reference measures it: jax.jit of the same function, with every float input leaf and every float
constant it closes over (baked weights included) moved by one rounding step (x + x*u*N(0, 1), u the
dtype's unit roundoff, then rounded to the dtype), a few independent draws. The output's largest
change relative to its max |ref| is how much this model amplifies rounding of its operands: every
dot product is exactly the product of slightly perturbed operands (backward stability), so a faithful
implementation sits about that far from jax.jit. `measure.tolerance` widens the scale term of a leaf's
default tolerance to a multiple of it, capped, and the verdict says so.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..dtypes import is_float
from ..exporting.jit_runner import enable_x64_if_needed

DRAWS = 3


def rounding_sensitivity(target: Any, sig: Any, feed: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
                         device: str = "cpu", draws: int = DRAWS, seed: int = 0) -> dict[str, float]:
    """Per float output leaf: the largest max|moved - ref| / max|ref| over `draws` rounding-level moves of
    every float input leaf and closed-over float constant (module docstring).

    Args:
        target: the Target (its fn is traced once more, on `feed`'s shapes).
        sig: its Signature (the flat function and leaf order).
        feed: one trial's inputs by leaf name.
        reference: jax.jit's outputs on `feed` by leaf name.
        device: "cpu" or "gpu", where the reference ran.
        draws: independent moves; the worst is kept.
        seed: of the moves, so a compare is repeatable.
    Returns:
        leaf name -> relative move, for float leaves with a finite, nonzero max |ref| (others are absent).
    """
    import jax


    flat = sig.flat_function(target.fn)
    args = [np.asarray(feed[leaf.name]) for leaf in sig.inputs]
    jax_device = jax.devices("gpu" if device == "gpu" else "cpu")[0]

    def measure() -> list[list[np.ndarray]]:
        # The function as a jaxpr at these shapes, evaluated with its constants (baked weights, which
        # jax.closure_convert would leave embedded: it hoists tracers only) passed as arguments, so they are
        # moved like the input leaves. The moves are drawn here on the host: random numbers drawn inside the
        # compiled function cost a compile per leaf's generator (40 s for a ResNet of 120 leaves, 1 s without).
        closed = jax.make_jaxpr(flat)(*args)
        consts = list(closed.consts)
        moved_fn = jax.jit(lambda xs, cs: jax.core.eval_jaxpr(closed.jaxpr, cs, *xs))
        # One moved copy of the weights at a time: each array is moved and put on the device before the next is
        # drawn, and a draw's copy goes before the next draw's is made (a list of them all, kept across the loop,
        # held 3x a 4 GiB decoder's weights beside its own).
        outputs = []
        for i in range(draws):
            rng = np.random.default_rng([seed, i])
            xs = [jax.device_put(a, jax_device) for a in _moved(rng, args)]
            cs = [jax.device_put(c, jax_device) if hasattr(c, "shape") else c for c in _moved(rng, consts)]
            outputs.append([np.asarray(o) for o in moved_fn(xs, cs)])
            del xs, cs
        return outputs

    outputs = enable_x64_if_needed(sig.x64)(measure)()
    _return_freed_memory()
    found: dict[str, float] = {}
    for position, leaf in enumerate(sig.outputs):
        ref = np.asarray(reference.get(leaf.name))
        if not is_float(ref.dtype) or not ref.size:
            continue
        ref64 = ref.astype(np.float64)
        finite = np.isfinite(ref64)
        top = float(np.abs(ref64[finite]).max()) if finite.any() else 0.0
        if top == 0.0:
            continue
        worst = 0.0
        for draw in outputs:
            got = np.asarray(draw[position]).astype(np.float64)
            both = finite & np.isfinite(got)
            if both.any():
                worst = max(worst, float(np.abs(got[both] - ref64[both]).max()) / top)
        found[leaf.name] = worst
    return found


def _moved(rng: np.random.Generator, values: Sequence[Any]) -> Iterator[Any]:
    """Each float array moved by one rounding step (x + x*u*N(0,1), rounded to its dtype; a non-finite value
    stays as it is); anything else as it is. One at a time: the caller puts each on the device before the next."""
    for value in values:
        if not (isinstance(getattr(value, "dtype", None), np.dtype) and is_float(value.dtype)):  # not a key array
            yield value
            continue
        import ml_dtypes

        x = np.asarray(value)
        u = float(ml_dtypes.finfo(x.dtype).eps) / 2  # numpy's finfo knows no bfloat16 or float8
        wide = np.float64 if x.dtype == np.float64 else np.float32
        w = x.astype(wide)
        step = np.multiply(rng.standard_normal(x.shape), u).astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            moved = np.where(np.isfinite(w), w + np.multiply(w, step), w)
        del w, step
        yield moved.astype(x.dtype, copy=False)


def _return_freed_memory() -> None:
    """Give the moved copies' freed memory back to the system: glibc's allocator keeps freed blocks of this size
    in its heap (the compare process, which exports next, held ~1.3 GB more at 1 B parameters than before the
    measure). Where there is no glibc, nothing."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
