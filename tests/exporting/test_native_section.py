"""The native section as data: what it says, and a hostile one refused before any program runs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from multiexport import ArtifactError, UsageError
from multiexport.exporting import ExportOptions
from multiexport.exporting.native_section import compile_options_proto, static_key, static_size_sets
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.native.run import command, run

from ..cases import case
from ..conftest import tamper


def test_compile_options_are_one_replica_one_partition_as_jaxlib_reads_them():
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions.ParseFromString(compile_options_proto())
    assert options.num_replicas == 1 and options.num_partitions == 1
    assert compile_options_proto() == bytes.fromhex("1a0420012801")


def test_static_sizes_are_the_requested_ones_and_the_examples():
    assert static_size_sets(["b"], {"b": (8, 1)}, {"b": 3}) == [{"b": 1}, {"b": 3}, {"b": 8}]
    assert static_size_sets(["b"], {}, {"b": 3}) == [{"b": 3}]
    assert static_size_sets(["b", "s"], {"s": (16,)}, {"b": 2, "s": 4}) == [
        {"b": 2, "s": 4}, {"b": 2, "s": 16}]
    assert static_size_sets([], {}, {}) == []
    assert static_key({"s": 16, "b": 2}) == "b=2,s=16"
    with pytest.raises(UsageError, match=r"Option 'static_sizes' \| got q, expected one of the target's symbolic dims"):
        static_size_sets(["b"], {"q": (1,)}, {"b": 3})
    with pytest.raises(UsageError, match="at most 32"):
        static_size_sets(["b"], {"b": tuple(range(1, 40))}, {"b": 3})


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("section")
    target = case("seed").make()
    sig = build_signature(target)
    out = {}
    for name in ("xla", "iree"):
        if get_backend(name).available().ok:
            out[name] = get_backend(name).export(target.fn, sig, root / name, ExportOptions()).directory
    return out, sig


def _copy(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _edit_native(directory, change):
    def edit(d):
        path = d / "manifest.json"
        data = json.loads(path.read_text())
        change(data["native"])
        path.write_text(json.dumps(data))

    tamper(directory, edit)


@pytest.mark.parametrize("change, message", [
    (lambda n: n["args"][0].update(file="../../etc/passwd"), "does not match the manifest's input leaf"),
    (lambda n: n["args"][0].update(index=0), "does not match the manifest's input leaf"),
    (lambda n: n["results"][0].update(file="output0.npy/../../x.npy"), "does not match the manifest's output leaf"),
    (lambda n: n.update(compile_options="/etc/hostname"), "compile options"),
    (lambda n: n.update(program="../model.mlirbc"), "native program"),
    (lambda n: n.update(consumer="tf_c_api"), "expected 'multiexport.native/1' 'pjrt_c_api'"),
])
def test_a_hostile_xla_section_is_refused_before_any_program_runs(artifacts, tmp_path, change, message):
    found, sig = artifacts
    if "xla" not in found:
        pytest.skip("xla unavailable")
    directory = _copy(found["xla"], tmp_path)
    _edit_native(directory, change)
    with pytest.raises(ArtifactError, match=message):
        run(directory, sig.example_feed())
    assert not (tmp_path.parent / "etc").exists()


@pytest.mark.parametrize("extra", ["--output=@/tmp/multiexport-hostile.npy", "--module=/bin/true"])
def test_an_iree_command_the_export_did_not_write_is_refused(artifacts, tmp_path, extra):
    found, sig = artifacts
    if "iree" not in found:
        pytest.skip("iree unavailable")
    directory = _copy(found["iree"], tmp_path)
    _edit_native(directory, lambda n: n["run_args"].append(extra))
    with pytest.raises(ArtifactError, match="native.run_args differs"):
        command(directory)


def test_an_artifact_without_a_native_consumer_says_so(tmp_path, monkeypatch):
    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    from multiexport.backends.onnx import OnnxBackend

    monkeypatch.setattr(OnnxBackend, "native_consumer", lambda self: None)  # every built-in format has one: take ONNX's away
    target = case("seed").make()
    directory = get_backend("onnx").export(target.fn, build_signature(target), tmp_path / "onnx", ExportOptions()).directory
    with pytest.raises(ArtifactError, match="backend 'onnx' has no native consumer here"):
        run(directory, {"foo.baz": np.arange(10, dtype=np.int32)})


@pytest.fixture(scope="module")
def openvino_artifact(tmp_path_factory):
    if not get_backend("openvino").available().ok:
        pytest.skip("openvino unavailable")
    target = case("seed").make()
    sig = build_signature(target)
    root = tmp_path_factory.mktemp("section-openvino")
    return get_backend("openvino").export(target.fn, sig, root / "openvino", ExportOptions()).directory, sig


@pytest.mark.parametrize("change, message", [
    (lambda n: n.update(model="/etc/hostname"), "native model"),
    (lambda n: n.update(model="../model.onnx"), "native model"),
    (lambda n: n["properties"].update(INFERENCE_PRECISION_HINT="bf16"), "native section differs"),
    (lambda n: n["args"][0].update(tensor="out"), "native section differs"),
    (lambda n: n.update(device="GPU"), "native section differs"),
])
def test_a_hostile_openvino_section_is_refused_before_any_program_runs(openvino_artifact, tmp_path, change, message):
    source, sig = openvino_artifact
    directory = _copy(source, tmp_path)
    _edit_native(directory, change)
    with pytest.raises(ArtifactError, match=message):
        run(directory, sig.example_feed())


@pytest.mark.subprocess
def test_an_openvino_artifact_from_before_inputs_written_still_runs(openvino_artifact, tmp_path):
    """`inputs_written` is the pipeline's record, not part of the binding the consumer trusts: an artifact written
    before the field existed is not refused as tampered."""
    source, sig = openvino_artifact
    directory = _copy(source, tmp_path)
    _edit_native(directory, lambda n: n.pop("inputs_written"))
    assert set(run(directory, sig.example_feed()).outputs) == {leaf.name for leaf in sig.outputs}


def test_the_openvino_consumer_compiles_as_the_python_runner_does():
    from multiexport.backends.openvino.native import OPENVINO_PROPERTIES
    from multiexport.backends.openvino.runner import config

    assert {k: str(v) for k, v in config(3).items() if k != "INFERENCE_NUM_THREADS"} == OPENVINO_PROPERTIES


def test_a_target_without_example_values_says_its_native_inputs_were_not_written(tmp_path):
    """A leaf given as a jax.ShapeDtypeStruct has no example value: the section says so (inputs_written false)
    instead of naming inputs/ files that are not there."""
    import jax
    import jax.numpy as jnp

    from multiexport.exporting import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature
    from multiexport.leaves.target import Target

    target = Target(lambda x: {"y": x * 2}, args=(jax.ShapeDtypeStruct((3,), jnp.float32),), name="no_examples")
    artifact = get_backend("xla").export(target.fn, build_signature(target), tmp_path / "a", ExportOptions())
    assert artifact.manifest.native["inputs_written"] is False
    assert not (artifact.directory / "inputs").exists()
