"""LiteRT at scale: from OUTSIDE_BYTES of variables the weights never enter the TFLite converter. The serving module
is converted with its weights as inputs and each weight becomes a constant tensor whose data follows the
flatbuffer (addressed by offset), written from the SavedModel's checkpoint. The threshold is lowered here so the
zoo's tiny decoder (weights closed over, lifted to variables) takes the route; the artifact must take only the
leaves, run in the Python runner and in the LiteRT C API consumer, and match jax.jit."""

from __future__ import annotations

import importlib
import json

import jax
import numpy as np
import pytest

from benchmarks.real_models.llm import llm_tiny_decode_baked
from multiexport.api import export, load
from multiexport.native import run as native

pytest.importorskip("ai_edge_litert")
converting = importlib.import_module("multiexport.backends.litert.convert")  # the module (the package's `convert` is its function)
outside = importlib.import_module("multiexport.backends.litert.weights_outside")


def _tensor_names(blob) -> list[str]:
    from ai_edge_litert import schema_py_generated as schema

    subgraph = schema.Model.GetRootAsModel(blob, 0).Subgraphs(0)
    return [subgraph.Tensors(i).Name().decode() for i in range(subgraph.TensorsLength())]


def _feeds(target) -> dict[str, np.ndarray]:
    token, pos, cache = target.args
    feeds = {"token": np.asarray(token), "pos": np.asarray(pos)}
    for layer, kv in cache.items():
        feeds.update({f"cache.{layer}.{key}": np.asarray(value) for key, value in kv.items()})
    return feeds


def _export(target, out, policy: str = "always") -> tuple[bytes, dict]:
    """(model.tflite's bytes, format.metadata) of `target` exported to LiteRT in `out`."""
    export(target, out_dir=out, backend="litert", external_weights=policy)
    return (out / "model.tflite").read_bytes(), json.loads((out / "manifest.json").read_text())["format"]["metadata"]


@pytest.fixture
def any_size(monkeypatch):
    """The weights-outside threshold lowered to nothing: every model with variables takes the route."""
    monkeypatch.setattr(converting, "OUTSIDE_BYTES", 0)


@pytest.mark.slow
def test_past_the_size_the_weights_stay_out_of_the_converter_and_the_model_matches(tmp_path, any_size):
    target, out = llm_tiny_decode_baked(), tmp_path / "outside"
    blob, metadata = _export(target, out)
    names = _tensor_names(blob)
    # the route taken: every weight is a constant tensor named as the converter's input was, its data after the
    # flatbuffer; the signature takes the leaves only
    assert sum(outside.weight_name(0).rsplit("_", 1)[0] in name for name in names) == 16
    assert converting.uses_buffer_offsets(blob)
    assert "multiexport" in metadata["multiexport_weights"]
    feeds = _feeds(target)
    want = jax.tree_util.tree_map(np.asarray, jax.jit(target.fn)(*target.args))
    expected = {"out.logits": want["logits"]}
    expected.update({f"out.cache.{layer}.{key}": value for layer, kv in want["cache"].items() for key, value in kv.items()})
    for got in (load(out)(feeds), native.run(out, feeds).outputs):
        assert sorted(got) == sorted(expected)
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_weights_kept_as_constants_go_through_the_converter_at_any_size(tmp_path, any_size):
    # external weights 'never': the stage has no variables, so there is nothing to keep out of the converter
    _, metadata = _export(llm_tiny_decode_baked(), tmp_path / "never", "never")
    assert "multiexport_weights" not in metadata


@pytest.mark.slow
def test_a_transposed_kernel_is_folded_into_its_constant(tmp_path, any_size):
    # a convolution kernel's layout is a TRANSPOSE of the weight in the converted model: folded into the written
    # constant, as the converter folds it when it holds the weights, so no op transposes a kernel per call
    pytest.importorskip("haiku")  # the model zoo's extra: not in every test set (the newest leg has none)
    from ai_edge_litert import schema_py_generated as schema

    from benchmarks.real_models.haiku_nets import haiku_resnet_baked

    target, out = haiku_resnet_baked(), tmp_path / "resnet"
    blob, metadata = _export(target, out)
    model = schema.Model.GetRootAsModel(blob, 0)
    subgraph = model.Subgraphs(0)
    codes = [model.OperatorCodes(subgraph.Operators(i).OpcodeIndex()) for i in range(subgraph.OperatorsLength())]
    transposes = sum(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()) == schema.BuiltinOperator.TRANSPOSE for c in codes)
    assert "multiexport_weights" in metadata
    assert transposes == 0
    (x,) = target.args
    want = np.asarray(jax.jit(target.fn)(x)["logits"])
    np.testing.assert_allclose(load(out)({"x": np.asarray(x)})["out.logits"], want, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """The tiny decoder's SavedModel, its weights as variables: what LiteRT converts from."""
    out = tmp_path_factory.mktemp("stage") / "savedmodel"
    export(llm_tiny_decode_baked(), out_dir=out, backend="savedmodel", external_weights="always")
    return out


@pytest.mark.parametrize("outside", [True, False])
def test_convert_writes_the_model_where_asked_and_maps_it(stage, tmp_path, request, outside):
    # convert(..., out=path): the model file is written there on either route, and the bytes returned are that file
    if outside:
        request.getfixturevalue("any_size")
    path = tmp_path / "model.tflite"
    blob, ops = converting.convert(stage, False, out=path)
    assert ops == ["TFLITE_BUILTINS"]
    assert bytes(blob) == path.read_bytes()
    assert ("multiexport_weights" in converting.model_metadata(blob)) is outside
