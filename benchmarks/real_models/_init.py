"""`init(model, *args, **static)`: a linen module's `init`, jitted.

The same values as `model.init(...)` (one XLA program instead of one eager dispatch per op), at a
fraction of the time: a factory runs in every export worker that re-loads the TARGET, so its cost is
paid once per backend.
"""

from __future__ import annotations

import functools

import jax


def init(model, *args, **static):
    """`model.init(*args, **static)` under `jax.jit`; keyword arguments are static (e.g. `train=False`)."""
    return jax.jit(functools.partial(model.init, **static))(*args)
