"""The realistic models: ResNet-50, BERT-base, a GPT-2-small decode step, as flax.linen builds them.

Published sizes, seeded random weights (`jax.random.key`), nothing downloaded, weights baked (closed
over) so every artifact carries them as a deployment would (multiexport lifts those over 16 MiB to an
external weights file itself). Every factory is a TARGET, `benchmarks/realistic/models.py:NAME`:

- `resnet`, `bert`, `gpt2_step`: symbolic batch `b` (the example has batch 2); weights stay static.
- `resnet_b8`, `bert_b1`, ... (`<factory>_b<N>`, made on demand by the module's `__getattr__`): the same
  model with a static batch N. compare needs these while a symbolic batch with weights over 16 MiB
  fails in multiexport's jax.jit reference (see `benchmarks/realistic/__main__.py`).

Weights: every kernel and embedding is cut from one jitted `jax.random.normal(jax.random.key(0), ...)`
draw and scaled as flax (LeCun, ResNet) or BERT's and GPT-2's configs (N(0, 0.02)) initialise them.
Every export worker re-runs the factory, and `jax.jit(model.init)` compiled for 37 s for ResNet-50 on
this 2-core machine. The draw itself takes about 10 s for GPT-2's 124 M values here (load average ~7).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from multiexport import Target


def seeded_params(module: nn.Module, key: jax.Array, *example, std=None) -> Any:
    """`module.init`'s variables, drawn as one float32 normal vector from `key` and cut into the leaves.

    Shaped as `module.init` makes them (`jax.eval_shape`, no forward pass), valued as flax initialises
    them: zero biases, unit LayerNorm/BatchNorm scales, zero means / unit variances for batch_stats, and
    N(0, std(path, shape)) for every kernel and embedding (default: LeCun, 1/sqrt(fan_in)). One jitted
    draw: jax.jit(module.init) compiled for 37 s for ResNet-50 on this 2-core machine, and every export
    worker re-runs the factory.
    """
    shapes = jax.eval_shape(module.init, jax.random.key(0), *example)
    leaves, tree = jax.tree_util.tree_flatten_with_path(shapes)
    sizes = [math.prod(leaf.shape) for _, leaf in leaves]
    flat = np.asarray(jax.random.normal(key, (sum(sizes),), jnp.float32))
    values, at = [], 0
    for (path, leaf), size in zip(leaves, sizes):
        name = jax.tree_util.keystr(path)
        if name.endswith(("['bias']", "['mean']")):
            value = np.zeros(leaf.shape, np.float32)
        elif name.endswith(("['scale']", "['var']")):
            value = np.ones(leaf.shape, np.float32)
        else:
            scale = std(name, leaf.shape) if std else 1 / math.sqrt(math.prod(leaf.shape[:-1]))
            value = flat[at:at + size].reshape(leaf.shape) * np.float32(scale)
        at += size
        values.append(jnp.asarray(value))
    return jax.tree_util.tree_unflatten(tree, values)


def _gpt_std(name: str, shape) -> float:
    return 0.01 if "wpe" in name else 0.02  # initializer_range of BERT's and GPT-2's configs


# --------------------------------------------------------------------------------------------------
# ResNet-50 (flax examples/imagenet/models.py structure)
# --------------------------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    filters: int
    strides: int = 1
    train: bool = False
    momentum: float = 0.9

    @nn.compact
    def __call__(self, x):
        def norm(name: str) -> nn.BatchNorm:
            return nn.BatchNorm(use_running_average=not self.train, momentum=self.momentum, epsilon=1e-5, name=name)

        y = nn.relu(norm("bn1")(nn.Conv(self.filters, (1, 1), use_bias=False, name="conv1")(x)))
        y = nn.Conv(self.filters, (3, 3), (self.strides, self.strides), padding=((1, 1), (1, 1)), use_bias=False,
                    name="conv2")(y)
        y = nn.relu(norm("bn2")(y))
        y = norm("bn3")(nn.Conv(4 * self.filters, (1, 1), use_bias=False, name="conv3")(y))
        if x.shape[-1] != 4 * self.filters or self.strides != 1:
            x = norm("proj_bn")(nn.Conv(4 * self.filters, (1, 1), (self.strides, self.strides), use_bias=False,
                                        name="proj")(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    stages: Sequence[int] = (3, 4, 6, 3)
    classes: int = 1000
    train: bool = False
    momentum: float = 0.9

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False, name="conv_init")(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not self.train, momentum=self.momentum, epsilon=1e-5,
                                 name="bn_init")(x))
        # window_shape by keyword: jax2onnx 0.17.1's MaxPoolPlugin patch of nn.max_pool takes one positional
        # argument, so the ImageNet example's nn.max_pool(x, (3, 3), ...) fails to convert (TypeError).
        x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding="SAME")
        for i, blocks in enumerate(self.stages):
            for j in range(blocks):
                x = Bottleneck(64 * 2 ** i, strides=2 if i > 0 and j == 0 else 1, train=self.train,
                               momentum=self.momentum, name=f"stage{i + 1}_block{j}")(x)
        return nn.Dense(self.classes, name="fc")(jnp.mean(x, axis=(1, 2)))


def resnet(batch: int = 2, static: bool = False) -> Target:
    """ResNet-50 on float32[b, 224, 224, 3] NHWC, symbolic batch b (static: `batch`), weights and BatchNorm
    statistics baked."""
    images = jax.random.normal(jax.random.key(1), (batch, 224, 224, 3), jnp.float32)
    variables = seeded_params(ResNet(), jax.random.key(0), images[:1])
    # Trained-looking BatchNorm statistics: one train-mode pass with momentum 0 stores each layer's batch
    # statistics, so eval mode normalises every layer's activations to unit scale (not the init 0 / 1).
    calib = jax.random.normal(jax.random.key(2), (4, 224, 224, 3), jnp.float32)
    _, state = jax.jit(lambda v, x: ResNet(train=True, momentum=0.0).apply(v, x, mutable=["batch_stats"]))(
        variables, calib)
    variables = {"params": variables["params"], "batch_stats": state["batch_stats"]}
    model = ResNet()

    def resnet50(images):
        return {"logits": model.apply(variables, images)}

    return Target(resnet50, args=(images,), name=_name("resnet50", batch, static), symbolic_batch=not static and "b",
                  batch_leaves=("images",))


# --------------------------------------------------------------------------------------------------
# BERT-base encoder
# --------------------------------------------------------------------------------------------------



class BertLayer(nn.Module):
    heads: int = 12
    ffn: int = 3072

    @nn.compact
    def __call__(self, x, mask):
        attn = nn.MultiHeadDotProductAttention(num_heads=self.heads, name="attention")(x, x, mask=mask)
        x = nn.LayerNorm(epsilon=1e-12, name="attention_norm")(x + attn)
        y = nn.Dense(self.ffn, name="intermediate")(x)
        y = nn.Dense(x.shape[-1], name="output")(nn.gelu(y, approximate=False))
        return nn.LayerNorm(epsilon=1e-12, name="output_norm")(x + y)


class Bert(nn.Module):
    vocab: int = 30522
    dim: int = 768
    layers: int = 12
    heads: int = 12
    ffn: int = 3072
    max_len: int = 512

    @nn.compact
    def __call__(self, input_ids, attention_mask):
        positions = jnp.arange(input_ids.shape[-1])[None, :]
        x = (nn.Embed(self.vocab, self.dim, name="word_embeddings")(input_ids)
             + nn.Embed(self.max_len, self.dim, name="position_embeddings")(positions)
             + nn.Embed(2, self.dim, name="token_type_embeddings")(jnp.zeros_like(input_ids)))
        x = nn.LayerNorm(epsilon=1e-12, name="embeddings_norm")(x)
        mask = nn.make_attention_mask(attention_mask > 0, attention_mask > 0)
        for i in range(self.layers):
            x = BertLayer(self.heads, self.ffn, name=f"layer_{i}")(x, mask)
        pooled = jnp.tanh(nn.Dense(self.dim, name="pooler")(x[:, 0]))
        return {"last_hidden_state": x, "pooler_output": pooled}


def bert(batch: int = 2, static: bool = False, seq: int = 128) -> Target:
    """BERT-base on int32 input_ids / attention_mask [b, 128] (16 padding tokens in the example), symbolic batch b
    (static: `batch`), weights baked."""
    model = Bert()
    input_ids = jax.random.randint(jax.random.key(11), (batch, seq), 0, model.vocab, jnp.int32)
    attention_mask = (jnp.arange(seq)[None, :] < seq - 16).astype(jnp.int32).repeat(batch, 0)  # 16 padding tokens
    params = seeded_params(model, jax.random.key(0), input_ids[:1], attention_mask[:1], std=_gpt_std)["params"]

    def bert_base(batch):
        return model.apply({"params": params}, batch["input_ids"], batch["attention_mask"])

    return Target(bert_base, args=({"input_ids": input_ids, "attention_mask": attention_mask},),
                  name=_name("bert_base", batch, static),
                  symbolic_batch=not static and "b", batch_leaves=("batch.*",))


# --------------------------------------------------------------------------------------------------
# GPT-2-small decode step with an explicit KV cache
# --------------------------------------------------------------------------------------------------


class GPT2Block(nn.Module):
    heads: int = 12

    @nn.compact
    def __call__(self, x, pos, k_cache, v_cache):
        """x [b, 1, d]; pos [b]; k_cache, v_cache [b, T, h, d/h] -> x, updated k, v."""
        b, _, d = x.shape
        hd = d // self.heads
        qkv = nn.Dense(3 * d, name="c_attn")(nn.LayerNorm(epsilon=1e-5, name="ln_1")(x))
        q, k, v = (t.reshape(b, 1, self.heads, hd) for t in jnp.split(qkv, 3, axis=-1))
        slots = jnp.arange(k_cache.shape[1])
        write = (slots[None, :] == pos[:, None])[:, :, None, None]
        k_cache = jnp.where(write, k, k_cache)
        v_cache = jnp.where(write, v, v_cache)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k_cache) / np.float32(math.sqrt(hd))
        visible = (slots[None, :] <= pos[:, None])[:, None, None, :]
        scores = jnp.where(visible, scores, jnp.finfo(jnp.float32).min)
        attn = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v_cache).reshape(b, 1, d)
        x = x + nn.Dense(d, name="c_proj")(attn)
        y = nn.Dense(4 * d, name="c_fc")(nn.LayerNorm(epsilon=1e-5, name="ln_2")(x))
        x = x + nn.Dense(d, name="mlp_proj")(nn.gelu(y, approximate=True))
        return x, k_cache, v_cache


class GPT2Step(nn.Module):
    vocab: int = 50257
    dim: int = 768
    layers: int = 12
    heads: int = 12
    max_len: int = 1024

    @nn.compact
    def __call__(self, tokens, pos, k_cache, v_cache):
        """tokens, pos [b]; k_cache, v_cache [b, layers, T, heads, dim/heads]."""
        wte = nn.Embed(self.vocab, self.dim, name="wte")
        x = (wte(tokens) + nn.Embed(self.max_len, self.dim, name="wpe")(pos))[:, None, :]
        ks, vs = [], []
        for i in range(self.layers):
            x, k, v = GPT2Block(self.heads, name=f"h_{i}")(x, pos, k_cache[:, i], v_cache[:, i])
            ks.append(k)
            vs.append(v)
        x = nn.LayerNorm(epsilon=1e-5, name="ln_f")(x[:, 0])
        return {"logits": wte.attend(x), "k_cache": jnp.stack(ks, 1), "v_cache": jnp.stack(vs, 1)}


def gpt2_step(batch: int = 2, static: bool = False, cached: int = 127) -> Target:
    """GPT-2-small: one token per row attends to a 128-slot KV cache (127 filled) given as inputs, symbolic batch b
    (static: `batch`), weights baked."""
    model = GPT2Step()
    slots, hd = cached + 1, model.dim // model.heads
    tokens = jax.random.randint(jax.random.key(21), (batch,), 0, model.vocab, jnp.int32)
    pos = jnp.full((batch,), cached, jnp.int32)
    kk, kv = jax.random.split(jax.random.key(22))
    cache_shape = (batch, model.layers, slots, model.heads, hd)
    k_cache = jax.random.normal(kk, cache_shape, jnp.float32)
    v_cache = jax.random.normal(kv, cache_shape, jnp.float32)
    params = seeded_params(model, jax.random.key(0), tokens[:1], pos[:1], k_cache[:1], v_cache[:1],
                           std=_gpt_std)["params"]

    def gpt2_small_step(batch):
        return model.apply({"params": params}, batch["tokens"], batch["pos"], batch["k_cache"], batch["v_cache"])

    return Target(gpt2_small_step, args=({"tokens": tokens, "pos": pos, "k_cache": k_cache, "v_cache": v_cache},),
                  name=_name("gpt2_small_step", batch, static), symbolic_batch=not static and "b",
                  batch_leaves=("batch.*",))




FACTORIES = {"resnet": resnet, "bert": bert, "gpt2_step": gpt2_step}


def _name(base: str, batch: int, static: bool) -> str:
    return f"{base}_b{batch}" if static else base


def __getattr__(attr: str):
    """`resnet_b8` and the like: the factory with a static batch, as a zero-argument TARGET factory."""
    match = re.fullmatch(r"(\w+?)_b(\d+)", attr)
    if match and match.group(1) in FACTORIES and int(match.group(2)) >= 1:
        return functools.partial(FACTORIES[match.group(1)], batch=int(match.group(2)), static=True)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
