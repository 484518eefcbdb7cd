"""jax2onnx's graph holds a value in another layout under the name it bound (its optimizer pushes transposes
through: a Relu of an NHWC conv computed in NCHW). With channels = height = width the two layouts have one
shape, so only the recorded permutation (backends/onnx/equations.py: canonical expressions of the graph before
and after jax2onnx's optimizer) tells them apart; locate reads the tensor back into the op's layout, and a clean
artifact agrees op by op."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.leaves import Target
from multiexport.locate import LocateConfig, locate

pytestmark = pytest.mark.slow  # one export and one locate: ~20 s


class Square(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Conv(4, (3, 3))(nn.relu(nn.Conv(8, (3, 3))(x))).sum(axis=(1, 2))


def square() -> Target:
    model = Square()
    image = jax.random.normal(jax.random.key(1), (1, 8, 8, 3), jnp.float32)
    params = model.init(jax.random.key(0), image)["params"]
    return Target(lambda params, image: model.apply({"params": params}, image), args=(params, image), name="square")


def test_a_transposed_tensor_of_the_same_shape_is_read_in_the_ops_layout(tmp_path):
    result = locate(square(), LocateConfig(backends=("onnx",), out_dir=tmp_path), say=lambda line: None)
    answer = result.backends[0]
    assert not answer.error and not answer.failing and answer.first is None
    table = json.loads(next(p.value for p in __import__("onnx").load(str(str(answer.artifact) + "/model.onnx")).metadata_props
                            if p.key == "multiexport.locate.jax2onnx"))
    relu = next(e for e in table["entries"] if e[4] == "jax.nn.relu")  # between the two convs
    assert relu[1] == [0, 2, 3, 1] and relu[2] == [1, 8, 8, 8]  # held in NCHW, the op's value is NHWC
    data = json.loads((tmp_path / "locate.json").read_text())["backends"][0]
    assert data["mapped"] >= 4  # each conv with its bias, the relu, the sum
