"""flax.nnx models of the zoo: `fn(state, x)` after `graphdef, state = nnx.split(model)`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from multiexport import Target


def _nnx_target(model: nnx.Module, x, name: str, **target_kwargs) -> Target:
    """The nnx docs' functional form: `graphdef, state = nnx.split(model)`; `nnx.merge(graphdef, state)(x)`."""
    graphdef, state = nnx.split(model)

    def nnx_apply(state, x):
        return nnx.merge(graphdef, state)(x)

    nnx_apply.__name__ = name
    return Target(nnx_apply, args=(state, x), name=name, **target_kwargs)


class NnxMLP(nnx.Module):
    def __init__(self, din: int, dmid: int, dout: int, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dmid, rngs=rngs)
        self.linear3 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        x = nnx.relu(self.linear2(x))
        return self.linear3(x)


def nnx_mlp() -> Target:
    """flax.nnx MLP of nnx.Linear layers, `fn(state, x)` after nnx.split."""
    model = NnxMLP(32, 64, 10, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (8, 32), jnp.float32)
    return _nnx_target(model, x, "nnx_mlp")


class NnxBNNet(nnx.Module):
    """Linear -> BatchNorm -> relu, twice, and a Linear head (nnx.BatchNorm's docstring layer, in a net)."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(16, 32, rngs=rngs)
        self.bn1 = nnx.BatchNorm(32, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.linear2 = nnx.Linear(32, 32, rngs=rngs)
        self.bn2 = nnx.BatchNorm(32, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn1(self.linear1(x)))
        x = nnx.relu(self.bn2(self.linear2(x)))
        return self.head(x)


def nnx_batchnorm() -> Target:
    """nnx.BatchNorm in eval mode (`model.eval()`), its running mean/var (after 20 train steps) in the state."""
    model = NnxBNNet(rngs=nnx.Rngs(0))
    model.train()
    feature_scale = jnp.exp(1.5 * jax.random.normal(jax.random.key(199), (16,)))  # real data: unequal features
    for i in range(20):
        model(feature_scale * jax.random.normal(jax.random.key(200 + i), (32, 16)) - 0.3)
    model.eval()
    x = jax.random.normal(jax.random.key(1), (8, 16), jnp.float32)
    return _nnx_target(model, x, "nnx_batchnorm")


class NnxDropoutMLP(nnx.Module):
    """nnx.Dropout's docstring model: Linear + Dropout(0.5, rngs=rngs); its Rngs live in the module's state."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(in_features=16, out_features=32, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.head = nnx.Linear(32, 4, rngs=rngs)

    def __call__(self, x):
        return self.head(self.dropout(nnx.relu(self.linear(x))))


def nnx_dropout() -> Target:
    """Dropout in eval mode after a plain `nnx.split(model)`: the state holds a typed PRNG key and a uint32 count."""
    model = NnxDropoutMLP(rngs=nnx.Rngs(0))
    model.eval()
    x = jax.random.normal(jax.random.key(1), (4, 16), jnp.float32)
    return _nnx_target(model, x, "nnx_dropout")


def nnx_dropout_params_only() -> Target:
    """The same model split as `graphdef, params, rest = nnx.split(model, nnx.Param, ...)`: only Params are inputs.

    What a user does once they know that the RNG state must not be an input: the key and count are
    closed over (baked), the weights stay named input leaves.
    """
    model = NnxDropoutMLP(rngs=nnx.Rngs(0))
    model.eval()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    x = jax.random.normal(jax.random.key(1), (4, 16), jnp.float32)

    def nnx_dropout_params_apply(params, x):
        return nnx.merge(graphdef, params, rest)(x)

    return Target(nnx_dropout_params_apply, args=(params, x), name="nnx_dropout_params_only")


class NnxAttentionBlock(nnx.Module):
    """Pre-norm decoder block: nnx.MultiHeadAttention with a causal mask (nnx.make_causal_mask), then an MLP."""

    def __init__(self, dim: int, heads: int, *, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(dim, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=dim, decode=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(dim, rngs=rngs)
        self.up = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.down = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x):
        mask = nnx.make_causal_mask(x[..., 0])
        h = self.norm1(x)
        x = x + self.attn(h, h, h, mask=mask)
        return x + self.down(nnx.gelu(self.up(self.norm2(x))))


def nnx_attention() -> Target:
    """nnx.MultiHeadAttention (causal mask) in a pre-norm block on float32[2, 16, 64]."""
    model = NnxAttentionBlock(64, 4, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 16, 64), jnp.float32)
    return _nnx_target(model, x, "nnx_attention")


def nnx_attention_dynamic() -> Target:
    """The nnx attention block with a symbolic batch b on x (the state stays static)."""
    model = NnxAttentionBlock(64, 4, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 16, 64), jnp.float32)
    return _nnx_target(model, x, "nnx_attention_dynamic", symbolic_batch="b", batch_leaves=("x",))
