"""benchmarks/tpu_llm.py rehearsed on the CPU (CI has no TPU): the decoder exported for the device with the weights
as inputs, jax.jit in its own process on saved weights, pjrt_run's decode loop on the same plugin, and the tokens
compared; a decode artifact that does not carry the cache must show as `tokens-differ`, not as ok."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import llm_native, tpu_llm
from multiexport.backends.xla.runtime import find_pjrt_plugin
from multiexport.errors import MultiexportError


@pytest.fixture(scope="module")
def plugin():
    try:
        find_pjrt_plugin()
    except MultiexportError as exc:
        pytest.skip(str(exc))


def test_weights_round_trip_through_the_flat_names():
    tree = {"layer_0": {"wq": np.ones((2, 2)), "norm": np.zeros(2)}, "embed": np.arange(3)}
    flat = dict(llm_native._leaves("params", tree))
    assert sorted(flat) == ["params.embed", "params.layer_0.norm", "params.layer_0.wq"]
    back = tpu_llm._nest(flat)
    assert back.keys() == tree.keys() and np.array_equal(back["layer_0"]["wq"], tree["layer_0"]["wq"])


@pytest.mark.slow
def test_the_cpu_rehearsal_generates_jax_jits_tokens_and_a_loop_without_the_cache_does_not(plugin, tmp_path,
                                                                                         monkeypatch):
    assert tpu_llm.main([str(tmp_path / "ok"), "--device", "cpu", "--sizes", "tiny", "--steps", "6"]) == 0
    row = json.loads((tmp_path / "ok" / "tpu_llm.json").read_text())["rows"][0]
    assert row["status"] == "ok" and row["equal"] and len(row["pjrt"][0]) == 6
    assert row["jit_platform"] == "cpu" and row["pjrt_decode"]["steps"] == 5 and row["pjrt_decode"]["carried"] > 0
    real = llm_native.native_greedy
    monkeypatch.setattr(llm_native, "native_greedy", lambda *a, **k: real(*a, **{**k, "carry": False}))
    assert tpu_llm.main([str(tmp_path / "bad"), "--device", "cpu", "--sizes", "tiny", "--steps", "6"]) == 1
    row = json.loads((tmp_path / "bad" / "tpu_llm.json").read_text())["rows"][0]
    assert row["status"] == "tokens-differ" and row["jax_jit"] != row["pjrt"]
