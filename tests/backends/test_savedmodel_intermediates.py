"""SavedModel's intermediates for `locate` (#48): the StableHLO module inside the shipped saved_model.pb,
instrumented and run by TensorFlow's own XlaCallModule. A wrong padding planted in that module (a real edit of
the artifact's protobuf) is located at the convolution and source line of the example CNN; lifted weights are
read from the SavedModel's checkpoint; a module with a symbolic batch is refined to the feed's shapes first."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from multiexport import api
from multiexport.backends.savedmodel import SavedModelBackend
from multiexport.backends.savedmodel.convert import tf_stablehlo_version
from multiexport.examples.flax_models import cnn, mlp_dynamic
from multiexport.exporting import Manifest, RunOptions
from multiexport.exporting.intermediates import IntermediatesRequest
from multiexport.exporting.stablehlo import ir_context
from multiexport.leaves import build_signature
from multiexport.locate.engine import LocateConfig, locate
from multiexport.locate.pairing import align
from multiexport.locate.reference import build_reference

from .test_litert_intermediates import cnn_baked

_status = SavedModelBackend().available()
pytestmark = [pytest.mark.skipif(not _status.ok, reason=f"savedmodel backend unavailable: {_status.reason}"),
              pytest.mark.slow]  # three exports and a locate: ~60 s


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    target = cnn()
    return target, api.export(target, out_dir=tmp_path_factory.mktemp("savedmodel-locate") / "cnn",
                              backend="savedmodel").directory


def planted(src: Path, dst: Path, edit) -> Path:
    """A copy of the artifact whose XlaCallModule module is `edit(module text)`, written for TF's StableHLO, and
    its manifest's inventory updated as a faulty export would write it."""
    from jax.extend import mlir as jmlir
    from jax.extend.mlir.dialects import stablehlo as jhlo
    from tensorflow.core.protobuf import saved_model_pb2

    shutil.copytree(src, dst)
    path = dst / "saved_model.pb"
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(path.read_bytes())
    graph = proto.meta_graphs[0]
    (node,) = [n for f in graph.graph_def.library.function for n in f.node_def if n.op == "XlaCallModule"]
    with ir_context() as ctx:
        text = jmlir.deserialize_portable_artifact(bytes(node.attr["module"].s), ctx).operation.get_asm(
            enable_debug_info=True)
    changed = edit(text)
    assert changed != text
    node.attr["module"].s = bytes(jhlo.serialize_portable_artifact_str(changed, tf_stablehlo_version()))
    blob = proto.SerializeToString()
    path.write_bytes(blob)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["inventory"]["saved_model.pb"] = len(blob)
    manifest["inventory_sha256"]["saved_model.pb"] = hashlib.sha256(blob).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dst


def test_every_op_of_the_shipped_module_holds_the_reference_value(artifact, tmp_path):
    target, directory = artifact
    sig = build_signature(target)
    feed = sig.example_feed()
    reference = build_reference(target.fn, sig, feed, {})
    got = SavedModelBackend().intermediates(IntermediatesRequest(directory, Manifest.read(directory), feed,
                                                                 reference.sites, tmp_path, RunOptions(threads=1)))
    assert got.recompiled and got.own_sites is not None and "re-compile of the shipped module" in got.how
    assert [(s.op, s.shape) for s in got.own_sites] == [(s.op, s.shape) for s in reference.sites]
    assert set(got.values) == {s.key for s in got.own_sites}
    for own, ref in zip(got.own_sites, reference.sites):
        np.testing.assert_allclose(got.values[own.key], reference.values[ref.key], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{own.key} {own.op}")
    np.testing.assert_allclose(got.outputs["out.logits"], reference.outputs["out.logits"], rtol=1e-5, atol=1e-6)


def test_locate_names_a_wrong_padding_in_the_shipped_module(artifact, tmp_path):
    target, directory = artifact

    def shifted(text: str) -> str:  # Conv_1 (stride 2) pads [0, 1] in H and W: the wrong side instead
        new, count = re.subn(r"pad = \[\[0, 1\], \[0, 1\]\]", "pad = [[1, 0], [1, 0]]", text, count=1)
        assert count == 1
        return new

    bad = planted(directory, tmp_path / "bad", shifted)
    config = LocateConfig(backends=("savedmodel",), out_dir=tmp_path / "out", artifacts={"savedmodel": bad},
                          trials=1, trial="example")
    (answer,) = locate(target, config, say=lambda line: None).backends
    assert not answer.error, answer.error
    assert answer.failing and answer.recompiled and answer.mapped == answer.total
    site = answer.culprit.site
    assert (site.op, site.scope) == ("stablehlo.convolution", "jit(cnn)/CNN/Conv_1/conv_general_dilated")
    assert site.location.endswith("flax_models.py:92")
    assert answer.first.site.key == site.key  # Conv_0 and its ReLU agree


def test_lifted_weights_are_read_from_the_checkpoint(tmp_path):
    target = cnn_baked()
    directory = api.export(target, out_dir=tmp_path / "lifted", backend="savedmodel",
                           external_weights="always").directory
    assert (directory / "variables" / "variables.index").is_file()
    sig = build_signature(target)
    feed = sig.example_feed()
    reference = build_reference(target.fn, sig, feed, {})
    got = SavedModelBackend().intermediates(IntermediatesRequest(directory, Manifest.read(directory), feed,
                                                                 reference.sites, tmp_path, RunOptions(threads=1)))
    np.testing.assert_allclose(got.outputs["out.logits"], reference.outputs["out.logits"], rtol=1e-5, atol=1e-6)
    convolutions = [k for k, s in zip(got.values, got.own_sites or ()) if s.op == "stablehlo.convolution"]
    assert len(convolutions) == 2


def test_a_symbolic_module_is_refined_to_the_feeds_shapes(tmp_path):
    target = mlp_dynamic()
    directory = api.export(target, out_dir=tmp_path / "poly", backend="savedmodel").directory
    sig = build_signature(target)
    feed = dict(sig.example_feed())
    feed["batch.x"] = np.concatenate([feed["batch.x"], feed["batch.x"][:3]])
    rows = feed["batch.x"].shape[0]  # 11: neither the example's batch nor a size the module was traced at
    reference = build_reference(target.fn, sig, feed, {"b": rows})
    got = SavedModelBackend().intermediates(IntermediatesRequest(directory, Manifest.read(directory), feed,
                                                                 reference.sites, tmp_path, RunOptions(threads=1)))
    assert f"refined to this feed's sizes (b={rows})" in got.how
    keys, _ = align(reference.sites, got.own_sites or ())
    computing = [s for s in reference.sites if s.op in ("stablehlo.dot_general", "stablehlo.add", "stablehlo.maximum")]
    assert computing and all(s.key in keys for s in computing)
    for site in reference.sites:
        if site.key in keys:
            np.testing.assert_allclose(got.values[keys[site.key]], reference.values[site.key], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{site.key} {site.op}")
    np.testing.assert_allclose(got.outputs["out.logits"], reference.outputs["out.logits"], rtol=1e-5, atol=1e-6)
