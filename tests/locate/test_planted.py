"""Planted faults in real artifacts of the example CNN (two flax Convs, a mean, a Dense): `locate` names the planted
op and the model's source line for ONNX, OpenVINO, IREE and XLA, and says the converter or runtime is at fault;
the same artifacts unplanted locate nothing. Each artifact is exported once, copied, and its shipped file edited
(tests/locate/plant.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.locate import LocateConfig, locate
from multiexport.report.locate import with_locate_section

from . import plant

pytestmark = pytest.mark.slow  # four exports and nine locates of a real CNN: ~100 s

CONV0, CONV1 = plant.CNN_CONV0, plant.CNN_CONV1
OPTIONS = {"onnx": {"route": "stablehlo"}, "openvino": {"onnx_route": "stablehlo"}}


@pytest.fixture(scope="module")
def exported(target, tmp_path_factory):
    """backend -> a clean artifact of the CNN, and locate's answer on it."""
    out = tmp_path_factory.mktemp("clean")
    result = locate(target, LocateConfig(backends=("onnx", "openvino", "iree", "xla"), out_dir=out,
                                         backend_options=OPTIONS), say=lambda line: None)
    return {b.backend: (Path(b.artifact), b) for b in result.backends}


def _planted(exported, backend, tmp_path, edit):
    where = tmp_path / f"{backend}-planted"
    shutil.copytree(exported[backend][0], where)
    edit(where)
    return where


def _locate(target, backend, artifact, tmp_path):
    result = locate(target, LocateConfig(backends=(backend,), out_dir=tmp_path / "out", artifacts={backend: artifact},
                                         reduce=True), say=lambda line: None)
    return result.backends[0]


@pytest.mark.parametrize("backend", ["onnx", "openvino", "iree", "xla"])
def test_a_clean_artifact_locates_nothing(exported, backend):
    answer = exported[backend][1]
    assert not answer.error and answer.mapped >= answer.total - 2  # const broadcasts folded away in ONNX graphs
    assert answer.first is None and answer.culprit is None and not answer.failing
    assert "agrees" in answer.verdict


def test_onnx_a_conv_padding_changed_in_the_shipped_graph(target, exported, tmp_path):
    artifact = _planted(exported, "onnx", tmp_path, lambda d: plant.onnx_conv_pads(d, 1, [1, 1, 0, 0]))
    answer = _locate(target, "onnx", artifact, tmp_path)
    assert answer.failing
    culprit = answer.culprit
    assert culprit is not None and culprit.site.op == "stablehlo.convolution"
    assert culprit.site.location.endswith(CONV1) and "Conv_1" in culprit.site.scope
    assert culprit.replay is not None and culprit.replay.verdict == "op-differs"
    assert answer.first is culprit and "at fault" in answer.verdict
    assert [f.site.op for f in answer.cone][:2] == ["stablehlo.add", "stablehlo.maximum"]  # its bias, its relu
    reduced = Path(answer.reduced)
    assert {"op.mlirbc", "inputs.npz", "expected.npz", "got.npz", "README.md", "versions.json"} <= {
        p.name for p in reduced.iterdir()}
    assert CONV1 in (reduced / "README.md").read_text()
    # the shipped graph cut to the op reproduces the fault on its own: ORT on op.onnx gives what the artifact gave
    import onnxruntime as ort

    names = json.loads((reduced / "op_inputs.json").read_text())
    values = np.load(reduced / "values.npz")
    session = ort.InferenceSession(str(reduced / "op.onnx"), providers=["CPUExecutionProvider"])
    (cut,) = session.run(None, {n: values[k] for n, k in names.items()})
    np.testing.assert_allclose(cut, np.load(reduced / "got.npz")["result0"], rtol=1e-5, atol=1e-5)
    assert np.abs(cut - np.load(reduced / "expected.npz")["result0"]).max() > 0.1  # and XLA's differs
    # compare --locate's report section reads the locate.json this run wrote
    report = tmp_path / "report"
    (report / "locate" / "onnx").mkdir(parents=True)
    shutil.copy(tmp_path / "out" / "locate.json", report / "locate" / "onnx" / "locate.json")
    markdown, page = with_locate_section(report, "# Report\n", "<html><body></body></html>")
    assert "## Where parity breaks" in markdown and CONV1 in markdown and "stablehlo.convolution" in markdown
    assert "<h2>Where parity breaks</h2>" in page and page.endswith("</body></html>")


def test_openvino_a_transposed_weight_in_the_shipped_model(target, exported, tmp_path):
    artifact = _planted(exported, "openvino", tmp_path,
                        lambda d: plant.onnx_transposed_kernel(d, "params.Conv_0.kernel"))
    answer = _locate(target, "openvino", artifact, tmp_path)
    culprit = answer.culprit
    assert culprit is not None and culprit.site.op == "stablehlo.convolution"
    assert culprit.site.location.endswith(CONV0) and "Conv_0" in culprit.site.scope
    assert "OpenVINO" in answer.how


def test_iree_a_padding_changed_in_the_compiled_stablehlo(target, exported, tmp_path):
    artifact = _planted(exported, "iree", tmp_path, lambda d: plant.iree_module(d, plant.first_conv_padding))
    answer = _locate(target, "iree", artifact, tmp_path)
    assert answer.recompiled and answer.failing
    culprit = answer.culprit
    assert culprit is not None and culprit.site.op == "stablehlo.convolution"
    assert culprit.site.location.endswith(CONV0)
    assert (Path(answer.reduced) / "op.vmfb").stat().st_size > 0  # the op alone, compiled with the artifact's flags


def test_iree_an_integer_rounding_inserted_after_a_conv(target, exported, tmp_path):
    artifact = _planted(exported, "iree", tmp_path, lambda d: plant.iree_module(d, plant.round_after_first_conv))
    answer = _locate(target, "iree", artifact, tmp_path)
    culprit = answer.culprit
    # the op right after the inserted rounding (the conv's bias add) is the first whose value departs, with
    # the conv itself agreeing; the alignment says what the shipped module has there that the reference has not
    assert culprit is not None and culprit.site.location.endswith(CONV0)
    assert "round_nearest_even" in culprit.error.note


def test_xla_a_padding_changed_in_the_shipped_module(target, exported, tmp_path):
    artifact = _planted(exported, "xla", tmp_path, lambda d: plant.xla_module(d, plant.first_conv_padding))
    answer = _locate(target, "xla", artifact, tmp_path)
    culprit = answer.culprit
    assert answer.recompiled and culprit is not None and culprit.site.op == "stablehlo.convolution"
    assert culprit.site.location.endswith(CONV0)
