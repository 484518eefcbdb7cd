"""The TPU check's models, in plain JAX (the lent TPU machine has no flax): the seed, an MLP, a conv net and a
transformer block. Weights come from numpy's generator, so every process (the CPU parent, the TPU worker) builds
the same values whatever its JAX platform; each is a `multiexport.Target` at a fixed, modest size.
"""

from __future__ import annotations

import numpy as np

MODELS = ("seed", "mlp", "conv", "transformer")


def _init(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[0] if len(shape) == 2 else np.prod(shape[:-1]))).astype(
        np.float32)


def mlp():
    """256 -> 1024 -> 1024 -> 10, gelu: the matmuls the TPU's default precision runs in bf16 passes."""
    import jax
    import jax.numpy as jnp

    from multiexport import Target

    rng = np.random.default_rng(1)
    w1, w2, w3 = _init(rng, 256, 1024), _init(rng, 1024, 1024), _init(rng, 1024, 10)

    def fn(x):
        h = jax.nn.gelu(x @ w1)
        h = jax.nn.gelu(h @ w2)
        return {"logits": h @ w3}

    x = jnp.asarray(rng.standard_normal((64, 256)).astype(np.float32))
    return Target(fn, args=(x,), name="mlp")


def conv():
    """Two 3x3 convolutions (NHWC, the second strided), mean pool, a dense head."""
    import jax
    import jax.numpy as jnp

    from multiexport import Target

    rng = np.random.default_rng(2)
    k1, k2, w = _init(rng, 3, 3, 3, 32), _init(rng, 3, 3, 32, 64), _init(rng, 64, 10)
    dims = ("NHWC", "HWIO", "NHWC")

    def fn(images):
        h = jax.nn.relu(jax.lax.conv_general_dilated(images, k1, (1, 1), "SAME", dimension_numbers=dims))
        h = jax.nn.relu(jax.lax.conv_general_dilated(h, k2, (2, 2), "SAME", dimension_numbers=dims))
        return {"logits": jnp.mean(h, axis=(1, 2)) @ w}

    images = jnp.asarray(rng.standard_normal((16, 32, 32, 3)).astype(np.float32))
    return Target(fn, args=(images,), name="conv")


def transformer():
    """One pre-norm transformer block: 4-head self-attention and a 4x MLP, residuals, at 8 x 128 x 256."""
    import jax
    import jax.numpy as jnp

    from multiexport import Target

    rng = np.random.default_rng(3)
    d, heads, hidden = 256, 4, 1024
    wq, wk, wv, wo = (_init(rng, d, d) for _ in range(4))
    w1, w2 = _init(rng, d, hidden), _init(rng, hidden, d)

    def norm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-6)

    def fn(x):
        b, t, _ = x.shape
        h = norm(x)
        split = [(h @ w).reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for w in (wq, wk, wv)]
        q, k, v = split
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), axis=-1)
        x = x + (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ wo
        return {"hidden": x + jax.nn.gelu(norm(x) @ w1) @ w2}

    x = jnp.asarray(rng.standard_normal((8, 128, d)).astype(np.float32))
    return Target(fn, args=(x,), name="transformer")


def make(name: str):
    """The Target of one of MODELS."""
    if name == "seed":
        from multiexport.examples import seed

        return seed()
    builders = {"mlp": mlp, "conv": conv, "transformer": transformer}
    if name not in builders:
        raise SystemExit(f"error: Model '{name}' | unknown, expected one of {', '.join(MODELS)}")
    return builders[name]()
