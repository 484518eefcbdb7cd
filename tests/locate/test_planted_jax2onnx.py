"""Planted faults on ONNX's default route (jax2onnx) and OpenVINO over its file: `locate` maps jax2onnx's
tensors to the reference's ops through the equation table the conversion records (backends/onnx/equations.py,
multiexport/exporting/equation_sites.py) and names the planted op's line. Without the table every op is
"cannot map" and nothing is located."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.locate import LocateConfig, locate

from . import plant

pytestmark = pytest.mark.slow  # two exports and four locates of a real CNN: ~60 s

CONV0, CONV1 = plant.CNN_CONV0, plant.CNN_CONV1


@pytest.fixture(scope="module")
def exported(target, tmp_path_factory):
    """backend -> a clean artifact of the CNN on the default route, and locate's answer on it."""
    out = tmp_path_factory.mktemp("clean")
    result = locate(target, LocateConfig(backends=("onnx", "openvino"), out_dir=out), say=lambda line: None)
    return {b.backend: (Path(b.artifact), b) for b in result.backends}


def _locate(target, backend, exported, tmp_path, edit):
    artifact = tmp_path / f"{backend}-planted"
    shutil.copytree(exported[backend][0], artifact)
    edit(artifact)
    result = locate(target, LocateConfig(backends=(backend,), out_dir=tmp_path / "out", artifacts={backend: artifact}),
                    say=lambda line: None)
    return result.backends[0]


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_every_equation_of_the_clean_cnn_is_mapped_and_agrees(exported, backend):
    answer = exported[backend][1]
    # the two convs with their bias (one linen.conv equation each), the two relus, the mean's sum and divide,
    # the Dense: every equation jax2onnx converted holds one op's value; the plain convolutions, the bias
    # broadcasts and the Dense's matmul are inside those equations
    assert not answer.error and (answer.mapped, answer.total) == (7, 19)
    assert answer.first is None and answer.culprit is None and not answer.failing
    assert "agrees" in answer.verdict
    assert any("inside a larger equation" in why for why in answer.unmapped)


def test_onnx_a_conv_padding_changed_in_the_shipped_jax2onnx_graph(target, exported, tmp_path):
    answer = _locate(target, "onnx", exported, tmp_path, lambda d: plant.onnx_conv_pads(d, 1, [1, 1, 0, 0]))
    assert answer.failing
    culprit = answer.culprit
    # the Conv node computes conv and bias (jax2onnx's linen.conv): its value is the module's bias add of Conv_1
    assert culprit is not None and culprit.site.op == "stablehlo.add"
    assert culprit.site.location.endswith(CONV1) and "Conv_1" in culprit.site.scope
    assert culprit.replay is not None and culprit.replay.verdict == "op-differs"
    assert "linen.conv" in culprit.error.note and "Conv_1" in culprit.error.note
    assert answer.first is culprit and "at fault" in answer.verdict


def test_openvino_a_transposed_weight_in_the_jax2onnx_file(target, exported, tmp_path):
    answer = _locate(target, "openvino", exported, tmp_path,
                     lambda d: plant.onnx_transposed_kernel(d, "params.Conv_0.kernel"))
    culprit = answer.culprit
    assert answer.failing and culprit is not None
    assert culprit.site.location.endswith(CONV0) and "Conv_0" in culprit.site.scope
    assert culprit.replay is not None and culprit.replay.verdict == "op-differs"
    assert "OpenVINO" in answer.how and "linen.conv" in culprit.error.note
