"""LiteRT's intermediates for `locate` (#48): the shipped .tflite run with every tensor kept, its tensors paired
with the reference's ops by the names the TFLite converter writes, and faults planted in a real .tflite (a
transposed conv kernel, a changed constant) located at the op and source line of the example CNN.

The pairing rules are tested on their own too: a chain of same-named ops pairs in dependency order, parallel
ones or unequal counts do not pair, a fused tensor holds its root op's value only, and a tensor the converter
rewrote under an op's name (a folded BatchNorm) is not taken for that op's value."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import Target, api
from multiexport.backends.litert import LiteRTBackend
from multiexport.backends.litert.dependencies import contradictions
from multiexport.backends.litert.intermediates import _materialized, by_ancestors
from multiexport.backends.litert.tensor_names import SiteRef, TensorRef, fused_parts, pair, site_names
from multiexport.examples.flax_models import CNN, cnn
from multiexport.exporting import Manifest, RunOptions
from multiexport.exporting.intermediates import IntermediatesRequest
from multiexport.leaves import build_signature
from multiexport.locate.engine import LocateConfig, locate
from multiexport.locate.reference import build_reference

_status = LiteRTBackend().available()
needs_litert = pytest.mark.skipif(not _status.ok, reason=f"litert backend unavailable: {_status.reason}")


def cnn_baked() -> Target:
    """The example CNN with its parameters closed over: the converter folds them into the .tflite's buffers."""
    model = CNN()
    image = jax.random.normal(jax.random.key(3), (2, 16, 16, 3), jnp.float32)
    params = model.init(jax.random.key(0), image)["params"]

    def cnn_baked(image):
        return {"logits": model.apply({"params": params}, image)}

    return Target(cnn_baked, args=(image,), name="cnn_baked")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("litert-locate")
    targets = {"cnn": cnn(), "cnn_baked": cnn_baked()}
    return {name: (target, api.export(target, out_dir=root / name, backend="litert").directory)
            for name, target in targets.items()}


def planted(src: Path, dst: Path, tensor: str, change) -> Path:
    """A copy of the artifact whose model.tflite has `tensor`'s constant buffer replaced by `change(value)`
    (edited in the flatbuffer's own bytes), its manifest's inventory updated as a faulty export would write it."""
    from ai_edge_litert import schema_py_generated as schema

    shutil.copytree(src, dst)
    path = dst / "model.tflite"
    blob = bytearray(path.read_bytes())
    model = schema.Model.GetRootAsModel(blob, 0)
    graph = model.Subgraphs(0)
    found = [graph.Tensors(i) for i in range(graph.TensorsLength()) if graph.Tensors(i).Name().decode() == tensor]
    assert len(found) == 1, f"no constant tensor {tensor!r} in {src}"
    buffer = model.Buffers(found[0].Buffer())
    assert buffer.Offset() <= 1, "a small model keeps its buffers inside the flatbuffer"
    data = buffer.DataAsNumpy()  # a view into `blob`
    value = data.view(np.float32).reshape(tuple(found[0].ShapeAsNumpy()) if found[0].ShapeLength() else ())
    new = np.asarray(change(value.copy()), np.float32)
    assert new.shape == value.shape and not np.array_equal(new, value)
    value[...] = new
    path.write_bytes(bytes(blob))
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["inventory"]["model.tflite"] = len(blob)
    manifest["inventory_sha256"]["model.tflite"] = hashlib.sha256(blob).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dst


def located(target: Target, directory: Path, out: Path):
    config = LocateConfig(backends=("litert",), out_dir=out, artifacts={"litert": directory}, trials=1,
                          trial="example")
    (answer,) = locate(target, config, say=lambda line: None).backends
    assert not answer.error, answer.error
    return answer


@needs_litert
@pytest.mark.slow  # two exports of the example CNN and two locates: ~60 s shared
def test_mapped_tensors_hold_the_reference_values(artifacts, tmp_path):
    target, directory = artifacts["cnn"]
    sig = build_signature(target)
    feed = sig.example_feed()
    reference = build_reference(target.fn, sig, feed, {})
    manifest = Manifest.read(directory)
    got = LiteRTBackend().intermediates(IntermediatesRequest(directory, manifest, feed, reference.sites, tmp_path,
                                                             RunOptions(threads=1)))
    by_key = {s.key: s for s in reference.sites}
    mapped = {by_key[k].op for k in got.values}
    # weights are inputs here: both convolutions stand alone, the ReLUs (named `max`), the mean and the matmul
    assert {"stablehlo.convolution", "stablehlo.maximum", "stablehlo.reduce", "stablehlo.divide",
            "stablehlo.dot_general"} <= mapped
    assert sum(by_key[k].op == "stablehlo.maximum" for k in got.values) == 2
    for key, value in got.values.items():
        np.testing.assert_allclose(value, reference.values[key], rtol=1e-5, atol=1e-5, err_msg=key)
    assert set(got.values) | set(got.unmapped) == set(by_key)
    assert all(why.startswith("cannot map: ") for why in got.unmapped.values())
    fused = [why for k, why in got.unmapped.items() if by_key[k].scope.endswith("Conv_1/add")]
    assert fused and all("fused this op into ADD 'max;" in why for why in fused)
    np.testing.assert_allclose(got.outputs["out.logits"], reference.outputs["out.logits"], rtol=1e-5, atol=1e-5)
    assert "experimental_preserve_all_tensors" in got.how and not got.recompiled


@needs_litert
@pytest.mark.slow  # two exports of the example CNN and two locates: ~60 s shared
def test_locate_names_a_transposed_conv_kernel(artifacts, tmp_path):
    target, directory = artifacts["cnn_baked"]
    bad = planted(directory, tmp_path / "bad", "jit(cnn_baked)/CNN/Conv_1/conv_general_dilated",
                  lambda kernel: kernel.transpose(0, 2, 1, 3))  # OHWI: H and W swapped
    answer = located(target, bad, tmp_path / "out")
    assert answer.failing
    first = answer.first.site
    # CONV_2D carries the bias and the ReLU fused: its tensor is the ReLU's, the convolution's source line
    assert (first.op, first.name) == ("stablehlo.maximum", "max")
    assert first.location.endswith("flax_models.py:92")
    assert answer.culprit is not None and answer.culprit.site.key == first.key
    assert any("CONV_2D 'max;jit(cnn_baked)/CNN/Conv_1/conv_general_dilated'" in why for why in answer.unmapped)
    assert "fused with stablehlo.convolution" in answer.first.error.note  # the planted op, named
    assert "flax_models.py:92" in answer.verdict


@needs_litert
@pytest.mark.slow  # two exports of the example CNN and two locates: ~60 s shared
def test_locate_names_a_changed_constant(artifacts, tmp_path):
    target, directory = artifacts["cnn"]
    bad = planted(directory, tmp_path / "bad", "jit(cnn)/CNN/div", lambda scale: scale * 64 / 60)  # mean over 60
    answer = located(target, bad, tmp_path / "out")
    assert answer.culprit is not None
    site = answer.culprit.site
    assert (site.op, site.scope) == ("stablehlo.divide", "jit(cnn)/CNN/div")
    assert site.location.endswith("flax_models.py:93")
    assert answer.first.site.key == site.key  # everything before the mean agrees


def _site(key: str, name: str, parents: tuple[str, ...] = (), op: str = "stablehlo.maximum",
          shape: tuple[int, ...] = (2, 4)) -> SiteRef:
    return SiteRef(key=key, names=(name,), op=op, shape=shape, dtype="float32", parents=parents)


def _tensor(index: int, name: str, inputs: tuple[int, ...] = (), producer: str = "MAXIMUM",
            shape: tuple[int, ...] = (2, 4)) -> TensorRef:
    return TensorRef(index=index, name=name, shape=shape, dtype="float32", producer=producer, order=index,
                     inputs=inputs)


def test_a_chain_of_same_named_ops_pairs_in_dependency_order():
    sites = [_site("op1", "a/conv", op="stablehlo.convolution"), _site("op2", "max", ("op1",)),
             _site("op3", "b/conv", ("op2",), op="stablehlo.convolution"), _site("op4", "max", ("op3",))]
    tensors = [_tensor(10, "a/conv", producer="CONV_2D"), _tensor(11, "max", (10,)),
               _tensor(12, "b/conv", (11,), producer="CONV_2D"), _tensor(13, "max1", (12,))]
    assert pair(sites, tensors).pairs == {"op1": 10, "op2": 11, "op3": 12, "op4": 13}


def test_parallel_same_named_ops_are_not_guessed():
    sites = [_site("op1", "x"), _site("op2", "max", ("op1",)), _site("op3", "max", ("op1",))]
    tensors = [_tensor(10, "x"), _tensor(11, "max", (10,)), _tensor(12, "max1", (10,))]
    found = pair(sites, tensors)
    assert found.pairs == {"op1": 10}
    assert "not one chain of dependencies" in found.unmapped["op2"] == found.unmapped["op3"]


def test_unequal_counts_and_other_shapes_do_not_pair():
    sites = [_site("op1", "max"), _site("op2", "max", ("op1",))]
    found = pair(sites, [_tensor(10, "max")])
    assert found.pairs == {} and "1 .tflite tensors and 2 ops" in found.unmapped["op1"]
    other = pair([_site("op1", "k/conv", op="stablehlo.convolution")],
                 [_tensor(10, "k/conv1", producer="TRANSPOSE", shape=(4, 2))])
    assert other.pairs == {} and "have [4, 2] float32, not its [2, 4] float32" in other.unmapped["op1"]


def test_a_fused_tensor_holds_its_root_op_only():
    sites = [_site("op1", "f/conv", op="stablehlo.convolution"), _site("op2", "f/add", ("op1",), op="stablehlo.add"),
             _site("op3", "max", ("op2",))]
    found = pair(sites, [_tensor(10, "max;f/add;f/conv", producer="CONV_2D")])
    assert found.pairs == {"op3": 10} and found.fused == {"op3": ("op1", "op2")}
    assert "fused this op into CONV_2D 'max;f/add;f/conv'" in found.unmapped["op1"]
    assert fused_parts("max;f/add;f/reshape2") == ["max", "f/add", "f/reshape"]


def test_a_broadcast_and_its_consumer_of_one_name_split_by_kind():
    sites = [_site("op1", "bn/sub", op="stablehlo.dynamic_broadcast_in_dim"),
             _site("op2", "bn/sub", ("op1",), op="stablehlo.subtract")]
    found = pair(sites, [_tensor(10, "bn/sub1", producer="SUB")])
    assert found.pairs == {"op2": 10}
    assert "holds op2's value" in found.unmapped["op1"]


def test_site_names_without_the_cores_name_fall_back_to_the_scope():
    assert site_names("jit(f)/CNN/Conv_0/add", "") == ("jit(f)/CNN/Conv_0/add",)
    assert site_names("jit(f)/CNN/jit(relu)/max", "") == ("jit(f)/CNN/jit(relu)/max", "max")
    assert site_names("jit(f)/CNN/jit(relu)", "max") == ("max",)


def test_a_rewritten_tensor_under_an_ops_name_is_dropped():
    """keras' BatchNorm with its statistics as inputs (arg1 mean, arg2 gamma, arg3 beta): jax broadcasts beta under
    the name of the add that uses it; the converter folds `(x - mean) * g + beta` into `x * g + (beta - mean * g)` and
    names the ADD computing `beta - mean * g` after that add too, with beta's broadcast shape (seen in MobileNetV2)."""
    sites = [_site("op1", "bn/mul", ("arg2",), op="stablehlo.multiply", shape=(1, 4)),
             _site("op2", "bn/add", ("arg3",), op="stablehlo.broadcast_in_dim", shape=(1, 4)),
             _site("op3", "bn/sub", ("arg0", "arg1"), op="stablehlo.subtract"),
             _site("op4", "bn/mul2", ("op3", "op1"), op="stablehlo.multiply"),
             _site("op5", "bn/add2", ("op4", "op2"), op="stablehlo.add")]
    tensors = [_tensor(10, "bn/mul", (2,), producer="MUL", shape=(1, 4)),
               _tensor(11, "bn/neg", (1,), producer="NEG", shape=(1, 4)),
               _tensor(12, "bn/add;bn/reshape", (11, 10, 3), producer="ADD", shape=(1, 4)),
               _tensor(13, "bn/mul2", (0, 10), producer="MUL"),
               _tensor(14, "bn/add2", (13, 12), producer="ADD")]
    sources = {0: "arg0", 1: "arg1", 2: "arg2", 3: "arg3"}
    found = pair(sites, tensors)
    assert found.pairs["op2"] == 12  # by name, shape and dtype alone: the wrong tensor
    dropped = contradictions(found.pairs, sites, tensors, sources)
    assert "op2" in dropped and "computed from other inputs (also arg1, arg2)" in dropped["op2"]
    assert "op1" not in dropped and "op5" not in dropped  # true pairs stand: same inputs, same paired ancestors


def test_a_pair_whose_paired_ancestors_disagree_is_dropped():
    sites = [_site("op1", "a", ("arg0",)), _site("op2", "b", ("arg0",)), _site("op3", "c", ("op1",))]
    tensors = [_tensor(10, "a", (0,)), _tensor(11, "b", (0,)), _tensor(12, "c", (11,))]  # c computed from b
    found = pair(sites, tensors)
    assert found.pairs == {"op1": 10, "op2": 11, "op3": 12}
    dropped = contradictions(found.pairs, sites, tensors, {0: "arg0"})
    assert set(dropped) == {"op3"} and "contradicts the pairing of op1, op2" in dropped["op3"]


def test_tensors_inside_a_partition_of_several_ops_are_not_read():
    add, mul = {"op_name": "ADD", "inputs": [0, 1], "outputs": [2]}, {"op_name": "MUL", "inputs": [2, 1], "outputs": [3]}
    one_by_one = [add, mul, {"op_name": "DELEGATE", "inputs": [0, 1], "outputs": [2]},
                  {"op_name": "DELEGATE", "inputs": [2, 1], "outputs": [3]}]
    assert _materialized(one_by_one) is None  # every op its own partition: all written
    together = [add, mul, {"op_name": "DELEGATE", "inputs": [0, 1], "outputs": [3]}]
    assert _materialized(together) == {3}  # the ADD's tensor 2 lives inside the partition: never written


def test_ops_sharing_a_name_pair_by_their_nearest_paired_ancestors():
    """Two blocks' relus are both `max` (inlined from jit(relu)); block 1's the converter dropped (its conv's tensor
    `c1` holds the conv alone here), so one `max` tensor stands for two ops: it is the op computed from the same
    paired values (block 2's conv). With nothing paired between them, both ops come from the same values (the
    argument): nothing is settled."""
    def site(key, parents, names=("max",)):
        return SiteRef(key=key, names=names, op="stablehlo.maximum", shape=(2, 4), dtype="float32", parents=parents)

    sites = [SiteRef("op0", ("c1",), "stablehlo.add", (2, 4), "float32", ("arg0",)), site("op1", ("op0",)),
             SiteRef("op2", ("c2",), "stablehlo.add", (2, 4), "float32", ("op1",)), site("op3", ("op2",))]
    tensors = [TensorRef(10, "c1", (2, 4), "float32", "ADD", 0, (1,)), TensorRef(11, "c2", (2, 4), "float32", "ADD", 1, (10,)),
               TensorRef(12, "max", (2, 4), "float32", "MAXIMUM", 2, (11,))]
    why = "cannot map: 1 .tflite tensors and 2 ops of the module share the name 'max'"
    settled = by_ancestors({"op2": 11}, {"op1": why, "op3": why}, sites, tensors, {1: "arg0"})
    assert settled == {"op3": 12}
    assert by_ancestors({}, {"op1": why, "op3": why}, sites, tensors, {1: "arg0"}) == {}
