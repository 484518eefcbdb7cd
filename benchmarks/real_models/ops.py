"""dtypes and ops of the zoo: float64 (x64), 0-d inputs, top_k, sort, scatter, while_loop."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from multiexport import Target

from ._init import init

# --------------------------------------------------------------------------------------------------
# dtypes: float64 (x64) and scalar inputs
# --------------------------------------------------------------------------------------------------

def x64_mlp() -> Target:
    """A float64 linen MLP (param_dtype=dtype=float64) with an int64 class-id input and an int64 argmax output.

    Enables `jax_enable_x64` first, before any array exists (see the module docstring).
    """
    jax.config.update("jax_enable_x64", True)

    class MLP64(nn.Module):
        @nn.compact
        def __call__(self, x):
            for i, feat in enumerate((32, 32, 10)):
                x = nn.Dense(feat, dtype=jnp.float64, param_dtype=jnp.float64, name=f"layers_{i}")(x)
                if i != 2:
                    x = nn.tanh(x)
            return x

    model = MLP64()
    x = jax.random.normal(jax.random.key(1), (8, 16), jnp.float64)
    labels = jnp.array([0, 3, 9, 2, 5, 1, 7, 4], jnp.int64)
    params = init(model, jax.random.key(0), x)["params"]

    def x64_apply(params, batch):
        logits = model.apply({"params": params}, batch["x"])
        logp = jax.nn.log_softmax(logits)
        nll = -jnp.take_along_axis(logp, batch["labels"][:, None], axis=1)[:, 0]
        return {"logits": logits, "nll": nll, "pred": jnp.argmax(logits, axis=-1)}

    return Target(x64_apply, args=(params, {"x": x, "labels": labels}), name="x64_mlp", batch_leaves=("batch.*",))


def scalar_inputs() -> Target:
    """A sampling head with 0-d inputs: np.float32 temperature, np.int32 step, a Python-float (weak) penalty.

    Outputs include 0-d leaves (the mean entropy and the step echo).
    """
    logits = jax.random.normal(jax.random.key(1), (4, 50), jnp.float32) * 3.0
    temperature = np.float32(0.7)
    step = np.int32(3)
    penalty = 0.25  # a Python float: a weakly typed 0-d leaf

    def sample_head(logits, temperature, step, penalty):
        scaled = logits / temperature - penalty * jnp.log1p(step.astype(logits.dtype))
        probs = jax.nn.softmax(scaled, axis=-1)
        entropy = -jnp.sum(probs * jnp.log(probs + 1e-9), axis=-1)
        return {"probs": probs, "mean_entropy": jnp.mean(entropy), "next_step": step + 1}

    return Target(sample_head, args=(logits, temperature, step, penalty), name="scalar_inputs")


def scalar_only() -> Target:
    """The issue's item 3 shape: a function of one 0-d float32 input."""
    def scalar_fn(x):
        return jnp.sin(jnp.sin(x))

    return Target(scalar_fn, args=(np.float32(0.3),), name="scalar_only")


# --------------------------------------------------------------------------------------------------
# ops: top_k, sort, scatter, while_loop
# --------------------------------------------------------------------------------------------------

def ops_topk() -> Target:
    """Top-k sampling filter: `lax.top_k` values and indices of a Dense head's logits, and the masked logits."""
    model = nn.Dense(100)
    h = jax.random.normal(jax.random.key(1), (4, 32), jnp.float32)
    params = init(model, jax.random.key(0), h)["params"]

    def topk_apply(params, h):
        logits = model.apply({"params": params}, h)
        values, indices = lax.top_k(logits, 5)
        keep = logits >= values[:, -1:]
        masked = jnp.where(keep, logits, -jnp.inf)
        # The same filter with the finite sentinel many implementations use (flax's attention masks with
        # jnp.finfo(dtype).min): a leaf whose max|ref| is ~3.4e38.
        masked_min = jnp.where(keep, logits, jnp.finfo(logits.dtype).min)
        return {"values": values, "indices": indices, "masked": masked, "masked_min": masked_min}

    return Target(topk_apply, args=(params, h), name="ops_topk")


def ops_sort() -> Target:
    """Ranking head: jnp.sort / jnp.argsort of scores, and a nucleus (top-p) cumulative sum over sorted probs."""
    scores = jax.random.normal(jax.random.key(2), (4, 64), jnp.float32)

    def sort_apply(scores):
        order = jnp.argsort(-scores, axis=-1)
        probs = jax.nn.softmax(scores, axis=-1)
        sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
        keep = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs < 0.9
        return {"sorted": jnp.sort(scores, axis=-1), "order": order, "keep": keep}

    return Target(sort_apply, args=(scores,), name="ops_sort")


def ops_scatter() -> Target:
    """Scatter: a KV-cache write `cache.at[:, pos].set(new)` (0-d int32 pos) and a segment sum `.at[seg].add`."""
    cache = jax.random.normal(jax.random.key(3), (2, 16, 8), jnp.float32)
    new = jax.random.normal(jax.random.key(4), (2, 8), jnp.float32)
    pos = np.int32(5)
    values = jax.random.normal(jax.random.key(5), (20, 8), jnp.float32)
    segments = jax.random.randint(jax.random.key(6), (20,), 0, 6, jnp.int32)

    def scatter_apply(cache, new, pos, values, segments):
        updated = cache.at[:, pos].set(new)
        sums = jnp.zeros((6, values.shape[1]), values.dtype).at[segments].add(values)
        counts = jnp.zeros((6,), jnp.int32).at[segments].add(1)
        return {"cache": updated, "segment_sums": sums, "segment_counts": counts}

    return Target(scatter_apply, args=(cache, new, pos, values, segments), name="ops_scatter")


def ops_while() -> Target:
    """`lax.while_loop` with a data-dependent trip count: Newton's iteration for sqrt until converged (or 50 steps)."""
    x = jax.random.uniform(jax.random.key(7), (16,), jnp.float32, 0.5, 100.0)

    def newton_sqrt(x):
        def cond(state):
            i, y, delta = state
            return (i < 50) & (delta > 1e-6)

        def body(state):
            i, y, _ = state
            new = 0.5 * (y + x / y)
            return i + 1, new, jnp.max(jnp.abs(new - y) / new)

        i, y, _ = lax.while_loop(cond, body, (jnp.int32(0), jnp.maximum(x, 1.0), jnp.float32(jnp.inf)))
        return {"sqrt": y, "iterations": i}

    return Target(newton_sqrt, args=(x,), name="ops_while")
