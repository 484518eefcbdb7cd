"""The zoo's Llama-style decoder (benchmarks/real_models/llm.py) at its tiny config: the decode step and the
prefill agree, so the KV cache leaves carry what a decode loop needs, and they are named as the manifest says."""

from __future__ import annotations

import functools

import jax
import numpy as np

from benchmarks.real_models import llm
from multiexport.leaves import build_signature

CFG = llm.CONFIGS["tiny"]


def test_decoding_the_prompt_token_by_token_rebuilds_the_prefill_cache_and_logits():
    # Each step writes its keys/values at slot `pos` and attends to slots 0..pos: a wrong write position or
    # mask would leave the cache or the last logits different from the prefill of the whole prompt.
    params = llm.init_params(CFG)
    prompt = llm.example_prompt(CFG)
    want = jax.jit(functools.partial(llm.prefill, CFG))(params, prompt)
    step = jax.jit(functools.partial(llm.decode, CFG))
    cache = llm.empty_cache(CFG)
    for pos in range(CFG.prompt):
        got = step(params, prompt[:, pos], np.int32(pos), cache)
        cache = got["cache"]
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-5)
    for name, kv in want["cache"].items():
        for key in ("k", "v"):
            np.testing.assert_allclose(cache[name][key], kv[key], rtol=1e-4, atol=1e-5)
    # the slots past the prompt are untouched zeros, the prompt's are not
    assert not np.any(np.asarray(cache["layer_0"]["k"])[:, :, CFG.prompt:])
    assert np.all(np.abs(np.asarray(cache["layer_0"]["k"])[:, :, :CFG.prompt]).sum(axis=-1) > 0)


def test_greedy_tokens_depend_on_the_cache():
    params = llm.init_params(CFG)
    tokens = llm.greedy(CFG, params, llm.example_prompt(CFG), 15)
    assert tokens.shape == (1, 16) and tokens.dtype == np.int32
    assert len(set(tokens[0].tolist())) > 3  # not a constant output: parity on it is evidence
    other = llm.greedy(CFG, params, llm.example_prompt(CFG, seed=7), 15)
    assert not np.array_equal(tokens, other)


def test_the_cache_is_named_leaves_in_and_out():
    target = llm.llm_tiny_decode()
    sig = build_signature(target)
    inputs = {leaf.name: leaf for leaf in sig.inputs}
    outputs = {leaf.name: leaf for leaf in sig.outputs}
    for i in range(CFG.layers):
        for kv in ("k", "v"):
            assert tuple(inputs[f"cache.layer_{i}.{kv}"].shape) == CFG.cache_shape()
            assert tuple(outputs[f"out.cache.layer_{i}.{kv}"].shape) == CFG.cache_shape()
    assert tuple(inputs["pos"].shape) == () and inputs["token"].dtype == "int32"
    assert tuple(outputs["out.logits"].shape) == (CFG.batch, CFG.vocab)
    assert "params.layer_0.wq" in inputs
    baked = build_signature(llm.llm_tiny_decode_baked())
    assert not any(leaf.name.startswith("params.") for leaf in baked.inputs)


def test_the_1b_config_has_a_billion_parameters():
    cfg = llm.CONFIGS["1b"]
    assert 1.0e9 <= cfg.parameters <= 1.1e9
    assert cfg.dim % cfg.heads == 0 and cfg.heads % cfg.kv_heads == 0
    # the tiny config's count is the real number of weights
    leaves = jax.tree_util.tree_leaves(llm.init_params(CFG))
    assert sum(x.size for x in leaves) == CFG.parameters


def test_one_decode_export_serves_every_cache_length(tmp_path):
    # llm_tiny_decode_dynamic: the cache's length is the symbolic dimension t; one XLA export, run from disk at
    # two lengths, gives jax.jit's logits and cache at each (the mask follows the cache's own length).
    from multiexport.api import export, load

    target = llm.llm_tiny_decode_dynamic()
    assert tuple(build_signature(target).inputs[2].shape) == (1, CFG.kv_heads, "t", CFG.head_dim)
    export(target, out_dir=tmp_path / "xla", backend="xla")
    runner = load(tmp_path / "xla")
    params = llm.init_params(CFG)
    token, pos, cache = target.args
    for length in (16, 48):
        short = {n: {k: v[:, :, :length] for k, v in kv.items()} for n, kv in cache.items()}
        feed = {"token": token, "pos": pos, **{f"cache.{n}.{k}": v for n, kv in short.items() for k, v in kv.items()}}
        got = runner(feed)
        want = llm.decode(CFG, params, token, pos, short)
        assert got["out.cache.layer_1.v"].shape == (1, CFG.kv_heads, length, CFG.head_dim)
        np.testing.assert_allclose(got["out.logits"], want["logits"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["out.cache.layer_1.v"], want["cache"]["layer_1"]["v"], rtol=1e-5, atol=1e-6)
