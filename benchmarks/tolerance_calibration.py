"""Measure what a faithful implementation's error looks like, per dtype, to set parity defaults.

For each model and dtype, the function runs under jax.jit in that dtype on seeded random inputs and is
compared with the same function in float64 (the true value). Two faithful implementations of one
model in one dtype (JAX and an export) each carry about this error, so they differ from each other by
up to about twice it. multiexport's defaults (multiexport/tolerance.py) are allclose bounds whose
margin (how many times the measured error still passes, at the worst element) is at least 4 on every
model here: twice the error of two faithful implementations, with room to spare.

Run: `.venv/bin/python benchmarks/tolerance_calibration.py` (about 20 s on 2 cores).
Figures printed: min_rtol = smallest rtol passing every element at the dtype's default atol;
norm = max |err| / max |truth|; margin = min over elements of (atol + scale*max|truth| + rtol*|truth|) / |err|.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from multiexport.examples import MLP
from multiexport.measure.tolerance import DEFAULTS

DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}


def mlp_model(rng):
    model = MLP(features=(256, 256, 10))
    x = rng.normal(size=(64, 128))
    params = model.init(jax.random.key(0), jnp.ones((1, 128)))["params"]
    params = jax.tree_util.tree_map(np.asarray, params)
    return (lambda p, x: model.apply({"params": p}, x)), (params, x)


def attention_model(rng):
    d, t = 64, 32
    w = {k: rng.normal(size=(d, d)) / np.sqrt(d) for k in ("q", "k", "v", "o")}
    x = rng.normal(size=(4, t, d))

    def block(w, x):
        q, k, v = x @ w["q"], x @ w["k"], x @ w["v"]
        att = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(d), axis=-1)
        h = x + (att @ v) @ w["o"]
        mu = h.mean(-1, keepdims=True)
        return (h - mu) / jnp.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5)

    return block, (w, x)


def conv_model(rng):
    kernel = rng.normal(size=(3, 3, 8, 16)) / 6.0
    x = rng.normal(size=(2, 32, 32, 8))

    def cnn(kernel, x):
        y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y).mean(axis=(1, 2))

    return cnn, (kernel, x)


def cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: np.asarray(a).astype(dtype), tree)


def main() -> None:
    rng = np.random.default_rng(0)
    models = {"mlp": mlp_model(rng), "attention": attention_model(rng), "conv": conv_model(rng)}
    with jax.enable_x64(True):
        truth = {name: np.asarray(jax.jit(fn)(*cast(args, np.float64)), np.float64) for name, (fn, args) in models.items()}
    print(f"{'model':>10} {'dtype':>9} {'max_abs':>10} {'norm':>10} {'min_rtol':>10} {'margin':>8}   default rtol/atol/scale")
    for dname in DTYPES:
        np_dtype = ml_dtypes.bfloat16 if dname == "bfloat16" else np.dtype(dname)
        atol, rtol, scale = DEFAULTS[dname].atol, DEFAULTS[dname].rtol, DEFAULTS[dname].scale
        for name, (fn, args) in models.items():
            got = np.asarray(jax.jit(fn)(*cast(args, np_dtype)), np.float64)
            want = truth[name]
            err = np.abs(got - want)
            with np.errstate(divide="ignore", invalid="ignore"):
                need = np.where(np.abs(want) > 0, (err - atol - scale * np.abs(want).max()) / np.abs(want), 0.0)
            with np.errstate(divide="ignore"):
                margin = np.min(np.where(err > 0, (atol + scale * np.abs(want).max() + rtol * np.abs(want)) / err, np.inf))
            print(f"{name:>10} {dname:>9} {err.max():10.2e} {err.max() / np.abs(want).max():10.2e} "
                  f"{max(0.0, need.max()):10.2e} {margin:8.1f}   {rtol:g}/{atol:g}/{scale:g}")


if __name__ == "__main__":
    main()
