"""Repeated layers on ONNX's default route (jax2onnx): BERT's layer class twice (benchmarks/realistic/models.py's
BertLayer, seq 8, dim 32). Every op of one layer shares its source line, shape and inputs with its twin in the
other, so `locate` tells them apart by name stack and data flow (multiexport/exporting/equation_sites.py); and
jax2onnx's optimizer drops the Reshape pair around each FFN's Gelu, which the equation table reads through
(backends/onnx/equations.py). Before both, 3 of the 336 op results were mapped, none past the first FFN; now 27."""

from __future__ import annotations

import shutil

import onnx
import pytest

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.leaves import Target
from multiexport.locate import LocateConfig, locate

from . import plant

pytestmark = pytest.mark.slow  # one jax2onnx export and two locates: ~40 s


def _stack() -> Target:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from benchmarks.realistic.models import BertLayer

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x, mask):
            for i in range(2):
                x = BertLayer(heads=2, ffn=64, name=f"layer_{i}")(x, mask)
            return x

    model = Stack()
    x = jax.random.normal(jax.random.key(0), (1, 8, 32), jnp.float32)
    mask = jnp.ones((1, 1, 8, 8), bool)
    params = model.init(jax.random.key(1), x, mask)["params"]

    def stack2(x):
        return model.apply({"params": params}, x, mask)

    return Target(stack2, args=(x,), name="stack2")


@pytest.fixture(scope="module")
def target():
    return _stack()


@pytest.fixture(scope="module")
def clean(target, tmp_path_factory):
    result = locate(target, LocateConfig(backends=("onnx",), out_dir=tmp_path_factory.mktemp("stack")),
                    say=lambda line: None)
    return result.backends[0]


def test_both_layers_equations_are_mapped_and_agree(clean):
    assert not clean.error and clean.total == 336
    # per layer 13: the query, key, value and out Dense, the scaled query, both einsums, the where, both residual
    # adds, both LayerNorms, the output Dense; and the scale's sqrt once. Not the softmax (inside one equation),
    # the FFN's first Dense and its Gelu (jax2onnx keeps them 2-D, on the Gemm's output: a value the module never
    # holds in that shape) nor the ops inside those equations
    assert clean.mapped >= 27
    assert clean.first is None and clean.culprit is None and not clean.failing and "agrees" in clean.verdict


def test_a_fault_in_the_second_layer_is_located_there(target, clean, tmp_path):
    # the second layer's output Dense scaled by 1.5 (its Gemm's alpha) in the shipped model.onnx: the op at fault
    # is that layer's Dense, not its twin in the first layer, which shares its line, shape and inputs
    artifact = tmp_path / "planted"
    shutil.copytree(clean.artifact, artifact)
    model = onnx.load(str(artifact / "model.onnx"))
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert len(gemms) == 12  # q, k, v, out, intermediate, output per layer
    next(a for a in gemms[11].attribute if a.name == "alpha").f = 1.5
    onnx.save(model, str(artifact / "model.onnx"))
    plant.reseal(artifact)
    result = locate(target, LocateConfig(backends=("onnx",), out_dir=tmp_path / "out", artifacts={"onnx": artifact}),
                    say=lambda line: None)
    answer = result.backends[0]
    culprit = answer.culprit
    assert answer.failing and culprit is not None
    assert culprit.site.scope.endswith("/Stack/layer_1/output/add"), culprit.site.scope
    assert culprit.replay is not None and culprit.replay.verdict == "op-differs"
    assert "linen.dense" in culprit.error.note
