"""Targets for the reduced-precision tests, importable by TARGET string (`tests/precision_models.py:NAME`) so
compare's workers rebuild them. Weights are closed over (quantizers quantize what the model stores)."""

from __future__ import annotations

import jax
import numpy as np

from multiexport import Target


def two_inputs() -> Target:
    """Two inputs of very different ranges (image in [0, 1), extra ~ N(0, 50)) into one class-score head: a
    calibration that mixed the inputs up would calibrate each on the other's range."""
    rng = np.random.default_rng(0)
    w1 = (rng.normal(size=(64, 64)) / 8).astype(np.float32)
    w2 = (rng.normal(size=(64, 64)) / 400).astype(np.float32)
    w3 = (rng.normal(size=(64, 10)) / 8).astype(np.float32)

    def two_inputs_fn(image, extra):
        hidden = jax.nn.relu(image @ w1 + extra @ w2)
        return {"logits": hidden @ w3}

    image = rng.uniform(0, 1, size=(4, 64)).astype(np.float32)
    extra = (rng.normal(size=(4, 64)) * 50).astype(np.float32)
    return Target(two_inputs_fn, args=(image, extra), name="two_inputs")


def wide_range() -> Target:
    """One weight matrix whose columns span 1e4 (the first half ~100, the second ~0.01), split into two output
    leaves: per-tensor int8 weights keep the large half and round the small half to about zero."""
    rng = np.random.default_rng(1)
    w = rng.normal(size=(64, 64)).astype(np.float32)
    w[:, :32] *= 100.0
    w[:, 32:] *= 0.01

    def wide_range_fn(x):
        y = x @ w
        return {"large": y[:, :32], "small": y[:, 32:]}

    return Target(wide_range_fn, args=(rng.uniform(-1, 1, size=(4, 64)).astype(np.float32),), name="wide_range")
