"""The native decode loops: pjrt_run --steps (the KV cache carried on the device) and ov_run --steps (OpenVINO's C
API, the cache two tensors swapped between the request's ports) generate jax.jit's greedy tokens from the exported
prefill and decode-step artifacts (tiny config), and their flags fail with one line."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from benchmarks import llm_native
from benchmarks.real_models import llm
from multiexport.api import export
from multiexport.backends.xla.runtime import find_pjrt_plugin
from multiexport.errors import MultiexportError
from multiexport.native.run import command, run as native_run

CFG = llm.CONFIGS["tiny"]
STEPS = 31  # 32 tokens with the prefill's


def _exported(root, backend):
    for step in ("prefill", "decode"):
        export(f"benchmarks.real_models.llm:llm_tiny_{step}", out_dir=root / step, backend=backend, check_load=False)
    return root


@pytest.fixture(scope="module")
def xla_artifacts(tmp_path_factory):
    try:
        find_pjrt_plugin()
    except MultiexportError as exc:
        pytest.skip(str(exc))
    return _exported(tmp_path_factory.mktemp("llm-xla"), "xla")


@pytest.fixture(scope="module")
def openvino_artifacts(tmp_path_factory):
    pytest.importorskip("openvino")
    return _exported(tmp_path_factory.mktemp("llm-openvino"), "openvino")


@pytest.fixture(params=["xla", "openvino"])
def artifacts(request):
    """Each loop consumer's prefill and decode artifacts (pjrt_run's, ov_run's)."""
    return request.getfixturevalue(f"{request.param}_artifacts")


def _generate(artifacts, tmp_path, carry=True):
    return llm_native.native_greedy(artifacts / "prefill", artifacts / "decode", llm.init_params(CFG),
                                    llm.example_prompt(CFG), CFG.layers, STEPS, tmp_path, carry=carry)


@pytest.fixture(scope="module")
def want():
    return llm.greedy(CFG, llm.init_params(CFG), llm.example_prompt(CFG), STEPS)


def test_32_native_greedy_tokens_equal_jax_jit(artifacts, want, tmp_path):
    got = _generate(artifacts, tmp_path)
    assert got["tokens"].shape == (1, 32)
    np.testing.assert_array_equal(got["tokens"], want)
    assert got["decode"]["steps"] == STEPS and got["decode"]["carried"] == 2 * CFG.layers
    assert got["decode"]["calls"] == STEPS and got["decode"]["median_ms"] > 0


def test_a_loop_that_does_not_carry_the_cache_generates_other_tokens(artifacts, want, tmp_path):
    # The planted fault: every step reads the prefill's cache again (nothing carried), so the positions past
    # the prompt stay empty; the comparison above must be able to fail.
    want = llm.greedy(CFG, llm.init_params(CFG), llm.example_prompt(CFG), STEPS)
    got = _generate(artifacts, tmp_path, carry=False)
    assert not np.array_equal(got["tokens"], want)


@pytest.mark.parametrize("flags, message", [
    (["--steps", "2", "--carry", "out.nope=cache.layer_0.k"], "--carry | 'out.nope' is no output leaf"),
    (["--steps", "2", "--carry", "out.cache.layer_0.k=token"], "differ in shape or dtype"),
    (["--steps", "2", "--greedy", "out.logits=cache.layer_0.k"], "expected int32 token ids"),
    (["--steps", "0"], "--steps | got '0'"),
    (["--steps", "2", "--carry", "novalue"], "expected OUTPUT_LEAF=INPUT_LEAF"),
])
def test_bad_loop_flags_fail_with_one_line(artifacts, flags, message):
    argv, env = command(artifacts / "decode")
    done = subprocess.run(argv + flags, env=env, cwd=artifacts / "decode", capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_donated_cache_is_aliased_and_repeated_calls_still_read_it(xla_artifacts):
    # The decode target is jax.jit(..., donate_argnames="cache"): the module aliases each cache leaf to its
    # output, and the manifest says so. pjrt_run outside its loop reuses every input for --iters calls, so it
    # must not donate them (a donated buffer is gone after the first call).
    import json

    artifacts = xla_artifacts
    manifest = json.loads((artifacts / "decode" / "manifest.json").read_text())
    assert manifest["format"]["aliases"] == {f"cache.layer_{i}.{kv}": f"out.cache.layer_{i}.{kv}"
                                             for i in range(CFG.layers) for kv in "kv"}
    target = llm.llm_tiny_decode()
    params, token, pos, cache = target.args
    feed = dict(llm_native._leaves("params", params))
    feed.update({"token": token, "pos": pos}, **dict(llm_native._leaves("cache", cache)))
    got = native_run(artifacts / "decode", feed, iters=3, warmup=2).outputs
    want = llm.decode(CFG, params, token, pos, cache)
    np.testing.assert_allclose(got["out.logits"], want["logits"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["out.cache.layer_1.v"], want["cache"]["layer_1"]["v"], rtol=1e-5, atol=1e-6)
