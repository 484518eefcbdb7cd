"""Transformer-shaped flax.linen models: a GPT decoder with grouped-query attention (float32, bfloat16), a ViT, a BERT encoder."""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from multiexport import Target

from ._init import init


def rope(x, positions, base: float = 10000.0):
    """Rotary position embedding on [..., seq, heads, head_dim] (the GPT-NeoX / Llama half-split form)."""
    half = x.shape[-1] // 2
    freq = 1.0 / (base ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions[..., :, None].astype(jnp.float32) * freq  # [..., seq, half]
    sin, cos = jnp.sin(angle)[..., None, :], jnp.cos(angle)[..., None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class GQAttention(nn.Module):
    """Causal self-attention with `kv_heads` < `heads` (grouped-query attention) and RoPE."""

    heads: int
    kv_heads: int
    head_dim: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, positions):
        dense = functools.partial(nn.DenseGeneral, use_bias=False, dtype=self.dtype, param_dtype=self.dtype)
        q = dense((self.heads, self.head_dim), name="q_proj")(x)
        k = dense((self.kv_heads, self.head_dim), name="k_proj")(x)
        v = dense((self.kv_heads, self.head_dim), name="v_proj")(x)
        q, k = rope(q, positions), rope(k, positions)
        group = self.heads // self.kv_heads
        k, v = jnp.repeat(k, group, axis=-2), jnp.repeat(v, group, axis=-2)
        seq = x.shape[-2]
        causal = jnp.tril(jnp.ones((seq, seq), jnp.bool_))[None, None]
        out = nn.dot_product_attention(q, k, v, mask=causal, dtype=self.dtype)
        return dense(x.shape[-1], axis=(-2, -1), name="o_proj")(out)


class DecoderBlock(nn.Module):
    heads: int
    kv_heads: int
    head_dim: int
    mlp_dim: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, positions):
        norm = functools.partial(nn.RMSNorm, dtype=self.dtype, param_dtype=self.dtype)
        x = x + GQAttention(self.heads, self.kv_heads, self.head_dim, self.dtype, name="attn")(norm()(x), positions)
        h = norm()(x)
        dense = functools.partial(nn.Dense, use_bias=False, dtype=self.dtype, param_dtype=self.dtype)
        gated = nn.silu(dense(self.mlp_dim, name="gate")(h)) * dense(self.mlp_dim, name="up")(h)  # SwiGLU
        return x + dense(x.shape[-1], name="down")(gated)


class GPT(nn.Module):
    """Token embedding, `layers` pre-norm GQA decoder blocks, final RMSNorm, tied output projection."""

    vocab: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    mlp_dim: int = 172
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.dim, dtype=self.dtype, param_dtype=self.dtype, name="embed")
        x = embed(tokens)
        positions = jnp.arange(tokens.shape[-1])[None, :]
        for i in range(self.layers):
            x = DecoderBlock(self.heads, self.kv_heads, self.dim // self.heads, self.mlp_dim, self.dtype,
                             name=f"block_{i}")(x, positions)
        x = nn.RMSNorm(dtype=self.dtype, param_dtype=self.dtype, name="final_norm")(x)
        return embed.attend(x)


def _gpt(name: str, dtype) -> Target:
    model = GPT(dtype=dtype)
    tokens = jax.random.randint(jax.random.key(6), (2, 16), 0, model.vocab, jnp.int32)
    params = init(model, jax.random.key(0), tokens)["params"]

    def gpt_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["tokens"])}

    gpt_apply.__name__ = name
    return Target(gpt_apply, args=(params, {"tokens": tokens}), name=name, batch_leaves=("batch.*",))


def gpt_gqa() -> Target:
    """GPT-style decoder (RMSNorm, RoPE, GQA 4 query / 2 kv heads, SwiGLU, tied embeddings), float32."""
    return _gpt("gpt_gqa", jnp.float32)


def gpt_bf16() -> Target:
    """The same decoder with bfloat16 params, activations and logits (dtype=param_dtype=bfloat16)."""
    return _gpt("gpt_bf16", jnp.bfloat16)


class ViT(nn.Module):
    """A small Vision Transformer: Conv patch embedding, cls token, learned positions, encoder blocks."""

    patch: int = 4
    dim: int = 64
    depth: int = 2
    heads: int = 4
    classes: int = 10

    @nn.compact
    def __call__(self, images):
        x = nn.Conv(self.dim, (self.patch, self.patch), strides=(self.patch, self.patch), padding="VALID",
                    name="patch_embed")(images)
        b, h, w, c = x.shape
        x = x.reshape((b, h * w, c))
        cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
        x = jnp.concatenate([jnp.tile(cls, (b, 1, 1)), x], axis=1)
        x = x + self.param("pos_embedding", nn.initializers.normal(0.02), (1, h * w + 1, c))
        for i in range(self.depth):
            y = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, name=f"attn_{i}")(y, y)
            y = nn.LayerNorm()(x)
            x = x + nn.Dense(c)(nn.gelu(nn.Dense(2 * c)(y)))
        return nn.Dense(self.classes, name="head")(nn.LayerNorm()(x)[:, 0])


def vit() -> Target:
    """ViT on float32[b, 16, 16, 3] images, 4x4 patches, symbolic batch b (conv + reshape + attention)."""
    model = ViT()
    images = jax.random.normal(jax.random.key(9), (2, 16, 16, 3), jnp.float32)
    params = model.init(jax.random.key(0), images)["params"]  # eager: jit changes the last bits of these values

    def vit_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["images"])}

    return Target(vit_apply, args=(params, {"images": images}), name="vit", symbolic_batch="b",
                  batch_leaves=("batch.*",))


class BertEmbeddings(nn.Module):
    """BERT's input block: word + position + token-type embeddings (a 2-row table), LayerNorm."""

    vocab: int = 100
    dim: int = 64
    max_len: int = 32
    type_vocab: int = 2

    @nn.compact
    def __call__(self, input_ids, token_type_ids):
        positions = jnp.arange(input_ids.shape[-1])[None, :]
        x = (nn.Embed(self.vocab, self.dim, name="word_embeddings")(input_ids)
             + nn.Embed(self.max_len, self.dim, name="position_embeddings")(positions)
             + nn.Embed(self.type_vocab, self.dim, name="token_type_embeddings")(token_type_ids))
        return nn.LayerNorm(epsilon=1e-12, name="LayerNorm")(x)


class BertEncoder(nn.Module):
    """Embeddings, one post-norm encoder layer with a padding mask from an int attention_mask, a tanh pooler."""

    heads: int = 4

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask):
        x = BertEmbeddings(name="embeddings")(input_ids, token_type_ids)
        mask = nn.make_attention_mask(attention_mask > 0, attention_mask > 0)
        x = nn.LayerNorm(epsilon=1e-12)(x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(x, x, mask=mask))
        x = nn.LayerNorm(epsilon=1e-12)(x + nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(4 * x.shape[-1])(x))))
        return {"last_hidden_state": x, "pooler_output": jnp.tanh(nn.Dense(x.shape[-1], name="pooler")(x[:, 0]))}


def bert_encoder() -> Target:
    """A BERT-style encoder on (input_ids, token_type_ids, attention_mask), all int32[b, 12], symbolic batch b.

    token_type_ids index a 2-row table: any value outside {0, 1} is outside the model's domain (JAX
    clamps the gather, ONNX Runtime refuses it).
    """
    model = BertEncoder()
    input_ids = jax.random.randint(jax.random.key(11), (2, 12), 1, 100, jnp.int32)
    token_type_ids = jnp.concatenate([jnp.zeros((2, 6), jnp.int32), jnp.ones((2, 6), jnp.int32)], axis=1)
    attention_mask = jnp.ones((2, 12), jnp.int32).at[1, 9:].set(0)
    params = init(model, jax.random.key(0), input_ids, token_type_ids, attention_mask)["params"]

    def bert_apply(params, batch):
        return model.apply({"params": params}, batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])

    return Target(bert_apply, args=(params, {"input_ids": input_ids, "token_type_ids": token_type_ids,
                                             "attention_mask": attention_mask}),
                  name="bert_encoder", symbolic_batch="b", batch_leaves=("batch.*",))
