"""The built-in flax.linen examples: an MLP (also with a symbolic batch and in bfloat16), a transformer block,
a CNN, a masked embedding on a flax.struct dataclass, and a small or large transformer LM.

Imported by `multiexport.examples` on first use of one of these names, so the core and the seed example
need no flax (`pip install 'multiexport[flax]'` for these).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..leaves.target import Target


class MLP(nn.Module):
    """Dense -> relu -> Dense -> relu -> Dense; flax names the layers Dense_0, Dense_1, ..."""

    features: tuple = (32, 16, 4)

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(self.features):
            x = nn.Dense(width)(x)
            if i < len(self.features) - 1:
                x = nn.relu(x)
        return x


def mlp(batch: int = 8, in_features: int = 16, symbolic_batch: bool = False) -> Target:
    """A flax.linen MLP called as `fn(params, batch)`, `batch = {"x": float32[batch, in_features]}`."""
    model = MLP()
    x = jax.random.normal(jax.random.key(1), (batch, in_features), jnp.float32)
    params = model.init(jax.random.key(0), x)["params"]

    def mlp_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["x"])}

    return Target(
        mlp_apply,
        args=(params, {"x": x}),
        name="mlp_dynamic" if symbolic_batch else "mlp",
        symbolic_batch="b" if symbolic_batch else False,
        batch_leaves=("batch.*",),
    )


def mlp_dynamic() -> Target:
    """The MLP with a symbolic leading batch dimension `b` on `batch.x`."""
    return mlp(symbolic_batch=True)


class TransformerBlock(nn.Module):
    """Pre-norm self-attention + MLP block, the shape of one layer of a small encoder."""

    heads: int = 4
    dim: int = 64

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.dim)(h, h)
        h = nn.LayerNorm()(x)
        h = nn.Dense(4 * self.dim)(h)
        return x + nn.Dense(self.dim)(nn.gelu(h))


def transformer(batch: int = 2, seq: int = 16, dim: int = 64, symbolic_batch: bool = False) -> Target:
    """One transformer block as `fn(params, batch)` with `batch.x: float32[batch, seq, dim]`."""
    model = TransformerBlock(dim=dim)
    x = jax.random.normal(jax.random.key(2), (batch, seq, dim), jnp.float32)
    params = model.init(jax.random.key(0), x)["params"]

    def transformer_apply(params, batch):
        return model.apply({"params": params}, batch["x"])

    return Target(transformer_apply, args=(params, {"x": x}), name="transformer",
                  symbolic_batch="b" if symbolic_batch else False, batch_leaves=("batch.*",))


class CNN(nn.Module):
    """Two 3x3 convolutions, global mean pooling, a Dense head (no avg_pool: see the ONNX notes)."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2))(x))
        return nn.Dense(10)(x.mean(axis=(1, 2)))


def cnn(batch: int = 2) -> Target:
    """A small convolutional classifier on NHWC images `batch.image: float32[batch, 16, 16, 3]`."""
    model = CNN()
    image = jax.random.normal(jax.random.key(3), (batch, 16, 16, 3), jnp.float32)
    params = model.init(jax.random.key(0), image)["params"]

    def cnn_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["image"])}

    return Target(cnn_apply, args=(params, {"image": image}), name="cnn", batch_leaves=("batch.*",))


@struct.dataclass
class TokenBatch:
    """Token ids with a padding mask; `vocab` is static structure, not an input."""

    tokens: jnp.ndarray
    mask: jnp.ndarray
    vocab: int = struct.field(pytree_node=False, default=50)


def embedding(batch: int = 3, seq: int = 7, vocab: int = 50) -> Target:
    """Masked mean of token embeddings, then a projection; `batch.tokens` must stay in [0, vocab)."""
    k1, k2 = jax.random.split(jax.random.key(4))
    params = {"embed": jax.random.normal(k1, (vocab, 16)), "proj": jax.random.normal(k2, (16, 4))}
    tokens = jax.random.randint(jax.random.key(5), (batch, seq), 0, vocab, jnp.int32)
    mask = jnp.arange(seq)[None, :] < jnp.array([[seq], [seq - 2], [3]])[:batch]

    def embed_apply(params, batch: TokenBatch):
        emb = params["embed"][batch.tokens]
        weights = batch.mask[..., None].astype(emb.dtype)
        pooled = (emb * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1.0)
        return {"pooled": pooled @ params["proj"], "length": batch.mask.sum(axis=1)}

    return Target(embed_apply, args=(params, TokenBatch(tokens, mask, vocab)), name="embedding", batch_leaves=("batch.*",))


def mlp_bf16() -> Target:
    """The MLP with bfloat16 parameters and inputs."""
    base = mlp()
    params, batch = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.bfloat16), base.args)
    return base.replace(args=(params, batch), name="mlp_bf16")


class TransformerLM(nn.Module):
    """A GPT-style stack: token + position embeddings, pre-norm blocks, tied output projection."""

    vocab: int = 512
    dim: int = 64
    layers: int = 2
    heads: int = 4
    seq: int = 32

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.dim, name="embed")
        positions = self.param("positions", nn.initializers.normal(0.02), (self.seq, self.dim))
        x = embed(tokens) + positions[: tokens.shape[1]]
        for i in range(self.layers):
            x = TransformerBlock(heads=self.heads, dim=self.dim, name=f"block_{i}")(x)
        return embed.attend(nn.LayerNorm(name="final_norm")(x))


LM_SIZES: dict[str, dict[str, Any]] = {  # TransformerLM's fields
    # about 0.2 M parameters: the size every backend runs in CI, in both weight modes
    "small": dict(vocab=512, dim=64, layers=2, heads=4, seq=32),
    # about 350 M parameters (1.4 GB in float32), random weights, no downloads: benchmarks/scale.py
    "large": dict(vocab=32000, dim=1024, layers=24, heads=16, seq=128),
}


def lm(size: str = "small", weights: str = "inputs", batch: int = 2, seq: int = 16) -> Target:
    """A transformer LM with seeded random weights, either as input leaves or baked in as constants.

    weights="inputs": `fn(params, batch)`, every weight a named input leaf.
    weights="baked": `fn(batch)` closes over the weights, which every artifact then carries as constants.
    """
    if size not in LM_SIZES or weights not in ("inputs", "baked"):
        raise ValueError(f"lm | got size={size!r}, weights={weights!r}, expected size in {list(LM_SIZES)} and "
                         "weights 'inputs' or 'baked'")
    model = TransformerLM(**LM_SIZES[size])
    tokens = jax.random.randint(jax.random.key(6), (batch, seq), 0, model.vocab, jnp.int32)
    params = _lm_params(model, tokens)
    name = f"lm_{size}_{weights}"
    if weights == "baked":
        def lm_baked(batch):
            return {"logits": model.apply({"params": params}, batch["tokens"])}

        return Target(lm_baked, args=({"tokens": tokens},), name=name, batch_leaves=("batch.*",))

    def lm_inputs(params, batch):
        return {"logits": model.apply({"params": params}, batch["tokens"])}

    return Target(lm_inputs, args=(params, {"tokens": tokens}), name=name, batch_leaves=("batch.*",))


def _lm_params(model: TransformerLM, tokens, seed: int = 0):
    """Seeded random weights shaped and scaled like `model.init`'s, drawn one leaf at a time.

    jax.jit(model.init) draws them all in one XLA program whose temporaries peaked at 3.72 GiB for the
    1.34 GB LM (2.8x): the example's own memory, which would hide the export's in benchmarks/scale.py.
    Here each leaf is drawn in float32 numpy (Lecun-normal kernels and embeddings, zero biases, unit
    norm scales, N(0, 0.02) positions, as flax initialises them) and moved to the device before the next.
    """
    import math


    rng = np.random.default_rng(seed)

    def draw(path, spec):
        name = jax.tree_util.keystr(path)
        if name.endswith("['bias']"):
            value = np.zeros(spec.shape, spec.dtype)
        elif name.endswith("['scale']"):
            value = np.ones(spec.shape, spec.dtype)
        else:
            if name.endswith("['positions']"):
                std = 0.02
            elif name.endswith("['embedding']"):
                std = 1 / math.sqrt(spec.shape[-1])
            elif any(k in name for k in ("['query']", "['key']", "['value']")):
                std = 1 / math.sqrt(spec.shape[0])  # DenseGeneral over the last axis: fan-in is the model dim
            else:
                std = 1 / math.sqrt(math.prod(spec.shape[:-1]))
            value = rng.standard_normal(spec.shape, dtype=np.float32)
            value *= np.float32(std)
        return jax.device_put(value.astype(spec.dtype, copy=False))

    shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    return jax.tree_util.tree_map_with_path(draw, shapes)


def lm_small_inputs() -> Target:
    return lm("small", "inputs")


def lm_small_baked() -> Target:
    return lm("small", "baked")


def lm_large_inputs() -> Target:
    return lm("large", "inputs")


def lm_large_baked() -> Target:
    return lm("large", "baked")
