"""A Llama-style decoder with a KV cache, in plain JAX: prefill and decode step, from a config with random weights.

Two functions, as a server runs them:
    prefill(params, tokens)             tokens int32[B, P] -> {"logits": f32[B, V], "cache": ...}
    decode(params, token, pos, cache)   token int32[B], pos int32[] -> {"logits": f32[B, V], "cache": ...}
The cache is a dict of named leaves, `cache.layer_0.k` / `cache.layer_0.v` of shape [B, kv_heads, max_len,
head_dim] (a fixed maximum length; `pos` says where the step writes and how far attention reads), so every
format takes it as ordinary inputs and returns it as ordinary outputs. Weights are either input leaves
(`params.layer_0.wq`, ...: `*_decode`, `*_prefill`) or closed over (`*_baked`: lifted to a weights file by
`--external-weights`). The blocks are Llama's: RMSNorm, RoPE (half split), grouped-query attention, SwiGLU MLP,
untied output projection. Attention is written with rank-3 batch matmuls (batch x kv_heads folded), which
every converter here takes (the TFLite converter refuses rank-4 batch matmuls).

Configs: `tiny` (CI-sized, ~0.1 M parameters), `mid` (112 M parameters, 448 MB in float32: the size memory
ratios are measured at before a 1 B run) and `1b` (TinyLlama-shaped widths with 20 layers: 1.01 B parameters,
4.0 GiB in float32). Weights are seeded, never downloaded; a fresh worker builds the same values.
`greedy(...)` is the reference generation loop (jax.jit of the same functions): prefill, then argmax-fed decode.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from multiexport import Target


@dataclass(frozen=True)
class LlamaConfig:
    """The decoder's shape.

    vocab: vocabulary size (logits' last axis).
    dim: model width.
    layers: decoder blocks.
    heads: query heads; `dim` is `heads * head_dim`.
    kv_heads: key/value heads (grouped-query attention: `heads` is a multiple of it).
    ffn: SwiGLU hidden width.
    max_len: the KV cache's length (positions 0..max_len-1).
    prompt: the example prompt's length (prefill's static sequence length).
    batch: sequences per call.
    """

    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    max_len: int
    prompt: int
    batch: int = 1

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def parameters(self) -> int:
        """How many weights (every matrix and norm scale)."""
        kv = self.kv_heads * self.head_dim
        layer = 2 * self.dim + self.dim * self.dim * 2 + 2 * self.dim * kv + 3 * self.dim * self.ffn
        return self.layers * layer + 2 * self.vocab * self.dim + self.dim

    def cache_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.kv_heads, self.max_len, self.head_dim)


CONFIGS: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(vocab=256, dim=64, layers=2, heads=4, kv_heads=2, ffn=128, max_len=48, prompt=8),
    # Memory ratios (peak RSS over the weights) measured here carry over to 1b at a tenth of its memory.
    "mid": LlamaConfig(vocab=32000, dim=768, layers=10, heads=12, kv_heads=4, ffn=2048, max_len=128, prompt=16),
    # TinyLlama-1.1B's widths (dim 2048, 32/4 heads, SwiGLU 5632, vocab 32000) with 20 blocks: 1.01 B parameters.
    "1b": LlamaConfig(vocab=32000, dim=2048, layers=20, heads=32, kv_heads=4, ffn=5632, max_len=256, prompt=16),
}


def init_params(cfg: LlamaConfig, seed: int = 0) -> dict[str, Any]:
    """Random weights at Llama's init scale (normal, std 0.02; norm scales near 1), float32, seeded.

    One small computation per weight, so the peak is the weights plus one weight's random bits (one computation
    for them all held every weight's bits at once: 3.2x the weights at its peak); the values are the same."""
    keys = iter(jax.random.split(jax.random.key(seed), 9 * cfg.layers + 2))

    def w(shape, offset: float = 0.0):
        return _normal(next(keys), shape, offset)

    kv = cfg.kv_heads * cfg.head_dim
    params: dict[str, Any] = {"embed": w((cfg.vocab, cfg.dim))}
    for i in range(cfg.layers):
        params[f"layer_{i}"] = {
            "attn_norm": w((cfg.dim,), 1.0), "wq": w((cfg.dim, cfg.dim)), "wk": w((cfg.dim, kv)),
            "wv": w((cfg.dim, kv)), "wo": w((cfg.dim, cfg.dim)), "mlp_norm": w((cfg.dim,), 1.0),
            "w_gate": w((cfg.dim, cfg.ffn)), "w_up": w((cfg.dim, cfg.ffn)), "w_down": w((cfg.ffn, cfg.dim)),
        }
    params["norm"] = jnp.ones((cfg.dim,), jnp.float32)
    params["lm_head"] = w((cfg.dim, cfg.vocab))
    return params


@functools.partial(jax.jit, static_argnums=(1, 2))
def _normal(key, shape: tuple[int, ...], offset: float):
    """offset + 0.02 * N(0, 1) of `shape`, float32."""
    x = 0.02 * jax.random.normal(key, shape, jnp.float32)
    return x + offset if offset else x


def empty_cache(cfg: LlamaConfig) -> dict[str, dict[str, jax.Array]]:
    """The cache before any token: zeros, `layer_i.k` / `layer_i.v` of [B, kv_heads, max_len, head_dim]."""
    zeros = np.zeros(cfg.cache_shape(), np.float32)
    return {f"layer_{i}": {"k": zeros, "v": zeros} for i in range(cfg.layers)}


def _rms_norm(x, scale, eps: float = 1e-5):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def _rope(x, positions, base: float = 10000.0):
    """Rotary embedding on [..., seq, heads, head_dim] at `positions` [..., seq] (Llama's half split)."""
    half = x.shape[-1] // 2
    freq = 1.0 / (base ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions[..., :, None].astype(jnp.float32) * freq
    sin, cos = jnp.sin(angle)[..., None, :], jnp.cos(angle)[..., None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _attend(cfg: LlamaConfig, q, k, v, mask):
    """q [B, S, H, hd] against k, v [B, kv_heads, T, hd] with mask [S, T] -> [B, S, H*hd], as rank-3 matmuls."""
    b, s = q.shape[0], q.shape[1]
    group = cfg.heads // cfg.kv_heads
    t = k.shape[2]
    # [B, S, kv, group, hd] -> [B, kv, group*S, hd] -> [B*kv, group*S, hd]
    qg = q.reshape(b, s, cfg.kv_heads, group, cfg.head_dim).transpose(0, 2, 3, 1, 4)
    qg = qg.reshape(b * cfg.kv_heads, group * s, cfg.head_dim)
    kk = k.reshape(b * cfg.kv_heads, t, cfg.head_dim)
    vv = v.reshape(b * cfg.kv_heads, t, cfg.head_dim)
    scores = jnp.matmul(qg, kk.transpose(0, 2, 1)) / np.float32(np.sqrt(cfg.head_dim))
    full_mask = jnp.tile(mask, (group, 1))[None]  # [1, group*S, T]
    scores = jnp.where(full_mask, scores, np.float32(-1e9))
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.matmul(probs, vv)  # [B*kv, group*S, hd]
    out = out.reshape(b, cfg.kv_heads, group, s, cfg.head_dim).transpose(0, 3, 1, 2, 4)
    return out.reshape(b, s, cfg.dim)


def _block(cfg: LlamaConfig, p, x, positions, k_cache, v_cache, start, mask):
    """One decoder block on x [B, S, D]: writes this step's keys/values at `start` into the cache, attends."""
    b, s = x.shape[0], x.shape[1]
    h = _rms_norm(x, p["attn_norm"])
    q = _rope((h @ p["wq"]).reshape(b, s, cfg.heads, cfg.head_dim), positions)
    k = _rope((h @ p["wk"]).reshape(b, s, cfg.kv_heads, cfg.head_dim), positions)
    v = (h @ p["wv"]).reshape(b, s, cfg.kv_heads, cfg.head_dim)
    zero = jnp.zeros((), jnp.int32)
    k_cache = jax.lax.dynamic_update_slice(k_cache, k.transpose(0, 2, 1, 3), (zero, zero, start, zero))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v.transpose(0, 2, 1, 3), (zero, zero, start, zero))
    x = x + _attend(cfg, q, k_cache, v_cache, mask) @ p["wo"]
    h = _rms_norm(x, p["mlp_norm"])
    x = x + (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
    return x, k_cache, v_cache


def _forward(cfg: LlamaConfig, params, tokens, start, cache):
    """tokens [B, S] at positions start..start+S-1 -> (last position's logits [B, V], updated cache)."""
    s = tokens.shape[1]
    x = params["embed"][tokens]
    positions = (start + jnp.arange(s, dtype=jnp.int32))[None, :]
    # Query i (absolute position start+i) reads cache slots 0..start+i; the cache's own length (symbolic in a
    # `*_decode_dynamic` export), not the config's.
    length = cache["layer_0"]["k"].shape[2]
    mask = jnp.arange(length, dtype=jnp.int32)[None, :] <= positions[0][:, None]
    new_cache = {}
    for i in range(cfg.layers):
        name = f"layer_{i}"
        x, k, v = _block(cfg, params[name], x, positions, cache[name]["k"], cache[name]["v"], start, mask)
        new_cache[name] = {"k": k, "v": v}
    logits = _rms_norm(x[:, -1], params["norm"]) @ params["lm_head"]
    return logits, new_cache


def prefill(cfg: LlamaConfig, params, tokens):
    """The prompt's forward pass: logits for the next token and the cache holding the prompt's keys/values."""
    zeros = jnp.zeros(cfg.cache_shape(), jnp.float32)
    empty = {f"layer_{i}": {"k": zeros, "v": zeros} for i in range(cfg.layers)}
    logits, cache = _forward(cfg, params, tokens, jnp.zeros((), jnp.int32), empty)
    return {"logits": logits, "cache": cache}


def decode(cfg: LlamaConfig, params, token, pos, cache):
    """One token at position `pos` (its keys/values written at slot `pos`): its logits and the new cache."""
    logits, cache = _forward(cfg, params, token[:, None], pos.astype(jnp.int32), cache)
    return {"logits": logits, "cache": cache}


def example_prompt(cfg: LlamaConfig, seed: int = 6) -> np.ndarray:
    """A seeded prompt of `cfg.prompt` token ids, int32[B, P]."""
    return np.asarray(jax.random.randint(jax.random.key(seed), (cfg.batch, cfg.prompt), 0, cfg.vocab, jnp.int32))


def greedy(cfg: LlamaConfig, params, prompt, steps: int) -> np.ndarray:
    """Greedy generation under jax.jit: prefill, then `steps` decode steps each fed the previous argmax.
    Returns int32[B, steps + 1]: the token after the prompt, then one per decode step."""
    run_prefill = jax.jit(functools.partial(prefill, cfg))
    run_decode = jax.jit(functools.partial(decode, cfg))
    out = run_prefill(params, prompt)
    token = jnp.argmax(out["logits"], axis=-1).astype(jnp.int32)
    tokens, cache = [token], out["cache"]
    for i in range(steps):
        out = run_decode(params, token, jnp.int32(cfg.prompt + i), cache)
        token = jnp.argmax(out["logits"], axis=-1).astype(jnp.int32)
        tokens.append(token)
        cache = out["cache"]
    return np.stack([np.asarray(t) for t in tokens], axis=1)


def _decode_example(cfg: LlamaConfig, params):
    """A realistic decode input: the cache after the example prompt, the prompt's next token, pos = P."""
    out = jax.jit(functools.partial(prefill, cfg))(params, example_prompt(cfg))
    token = np.asarray(jnp.argmax(out["logits"], axis=-1).astype(jnp.int32))
    cache = jax.tree_util.tree_map(np.asarray, out["cache"])
    return token, np.int32(cfg.prompt), cache


def decode_target(size: str, baked: bool = False, dynamic: bool = False) -> Target:
    """The decode step of config `size`: fn(params, token, pos, cache), or fn(token, pos, cache) when baked;
    `dynamic` (baked only): the cache length a symbolic dimension `t` (any length > pos, one export)."""
    cfg = CONFIGS[size]
    params = init_params(cfg)
    token, pos, cache = _decode_example(cfg, params)
    name = f"llm_{size}_decode" + ("_baked" if baked and not dynamic else "") + ("_dynamic" if dynamic else "")
    if baked:
        def decode_baked(token, pos, cache):
            return decode(cfg, params, token, pos, cache)

        decode_baked.__name__ = name
        shapes = {"cache.*": f"{cfg.batch}, {cfg.kv_heads}, t, {cfg.head_dim}"} if dynamic else {}
        return Target(decode_baked, args=(token, pos, cache), name=name, polymorphic_shapes=shapes,
                      description=f"Llama-style decode step ({cfg.parameters / 1e6:.1f} M parameters, closed over"
                                  + (", cache length symbolic)" if dynamic else ")"))

    def decode_step(params, token, pos, cache):
        return decode(cfg, params, token, pos, cache)

    decode_step.__name__ = name
    # The cache is donated, as a server jits its decode step: the XLA export keeps it as input/output aliases
    # (manifest format.aliases), so a PJRT loop updates it in place. (The baked variant stays a plain function:
    # its weights are found as the closure's arrays, which a jit wrapper would hide.)
    return Target(jax.jit(decode_step, donate_argnames=("cache",)), args=(params, token, pos, cache), name=name,
                  description=f"Llama-style decode step ({cfg.parameters / 1e6:.1f} M parameters as inputs)")


def prefill_target(size: str, baked: bool = False) -> Target:
    """The prefill of config `size`: fn(params, tokens), or fn(tokens) when baked."""
    cfg = CONFIGS[size]
    params = init_params(cfg)
    tokens = example_prompt(cfg)
    name = f"llm_{size}_prefill" + ("_baked" if baked else "")
    if baked:
        def prefill_baked(tokens):
            return prefill(cfg, params, tokens)

        prefill_baked.__name__ = name
        return Target(prefill_baked, args=(tokens,), name=name)

    def prefill_step(params, tokens):
        return prefill(cfg, params, tokens)

    prefill_step.__name__ = name
    return Target(prefill_step, args=(params, tokens), name=name)


def llm_tiny_decode() -> Target:
    """Tiny Llama decode step, weights as input leaves."""
    return decode_target("tiny")


def llm_tiny_decode_baked() -> Target:
    """Tiny Llama decode step, weights closed over."""
    return decode_target("tiny", baked=True)


def llm_tiny_decode_dynamic() -> Target:
    """Tiny Llama decode step, weights closed over, the cache's length a symbolic dimension `t`."""
    return decode_target("tiny", baked=True, dynamic=True)


def llm_tiny_prefill() -> Target:
    """Tiny Llama prefill, weights as input leaves."""
    return prefill_target("tiny")


def llm_1b_decode() -> Target:
    """The 1 B decode step, weights as input leaves (4.0 GiB float32)."""
    return decode_target("1b")


def llm_1b_decode_baked() -> Target:
    """The 1 B decode step, weights closed over."""
    return decode_target("1b", baked=True)


def llm_1b_prefill() -> Target:
    """The 1 B prefill, weights as input leaves."""
    return prefill_target("1b")


def llm_mid_decode_baked() -> Target:
    """The 112 M decode step, weights closed over (448 MB: memory measured at a tenth of 1b's)."""
    return decode_target("mid", baked=True)


def llm_mid_prefill_baked() -> Target:
    """The 112 M prefill, weights closed over."""
    return prefill_target("mid", baked=True)


def llm_tiny_prefill_baked() -> Target:
    """Tiny Llama prefill, weights closed over."""
    return prefill_target("tiny", baked=True)


def llm_1b_prefill_baked() -> Target:
    """The 1 B prefill, weights closed over."""
    return prefill_target("1b", baked=True)
