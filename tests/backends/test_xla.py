"""XLA/PJRT backend: the binding agrees with jax.export's own answer, and the files are what PJRT users need."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import multiexport
from multiexport import ArtifactError, InputError, RunError
from multiexport.backends.xla import XlaBackend
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature

from ..cases import case
from ..conftest import reference_outputs


def export(name, tmp_path, **options):
    target = case(name).make()
    sig = build_signature(target)
    return target, sig, XlaBackend().export(target.fn, sig, tmp_path / name, ExportOptions(**options))


@pytest.mark.parametrize("name", ["seed", "seed_bar", "mlp", "unused_leaf", "named_tuple_and_kwargs"])
def test_binding_agrees_with_module_kept_var_idx_of_the_original_function(name, tmp_path):
    target, sig, artifact = export(name, tmp_path)
    # jax.export of the user's own pytree function, independent of our flattening
    original = jax.export.export(jax.jit(target.fn))(*target.args, **target.kwargs)
    kept = sorted(original.module_kept_var_idx)
    assert [i for i, leaf in enumerate(artifact.manifest.inputs) if leaf.used] == kept
    assert [leaf.param for leaf in artifact.manifest.inputs if leaf.used] == list(range(len(kept)))


def test_seed_answer_and_its_swap(tmp_path):
    _, _, seed = export("seed", tmp_path)
    by_name = {leaf.name: leaf for leaf in seed.manifest.inputs}
    assert (by_name["foo.bar"].used, by_name["foo.bar"].param) == (False, None)
    assert (by_name["foo.baz"].used, by_name["foo.baz"].param) == (True, 0)
    _, _, swapped = export("seed_bar", tmp_path)
    by_name = {leaf.name: leaf for leaf in swapped.manifest.inputs}
    assert (by_name["foo.bar"].param, by_name["foo.baz"].param) == (0, None)
    _, _, kept = export("seed", tmp_path / "keep", keep_unused=True)
    assert [(leaf.name, leaf.param) for leaf in kept.manifest.inputs] == [("foo.bar", 0), ("foo.baz", 1)]


def test_artifact_files_and_manifest_fields(tmp_path):
    _, sig, artifact = export("mlp", tmp_path)
    d, m = artifact.directory, artifact.manifest
    assert set(m.files) == {"exported", "stablehlo_bytecode", "stablehlo_text", "hlo_text", "example_inputs",
                            "compile_options"}
    assert m.versions["jax"] == jax.__version__ and int(m.versions["calling_convention_version"]) >= 9
    assert m.format["platforms"] == ["cpu"]
    assert [a["name"] for a in m.format["module_args"]] == [leaf.name for leaf in sig.inputs]
    assert {a["kind"] for a in m.format["module_args"]} == {"leaf"}
    assert m.requires["jax_export_compatible_until"] > m.created[:10]
    hlo = (d / "model.hlo.txt").read_text()
    entry = hlo[hlo.index("ENTRY"):]
    params = re.findall(r"(\w+)\.\d+ = \S+ parameter\((\d+)\)", entry)
    # HLO parameters are named by leaf alias, in the manifest's parameter order
    assert sorted(params, key=lambda p: int(p[1])) == [(leaf.alias, str(leaf.param)) for leaf in m.inputs]
    assert "func.func public @main" in (d / "model.mlir").read_text()
    assert (d / "model.mlirbc").read_bytes()[:4] == b"ML\xefR"  # MLIR bytecode magic


def test_symbolic_artifact_has_no_hlo_and_says_why(tmp_path):
    _, _, artifact = export("symbolic_batch", tmp_path)
    assert "hlo_text" not in artifact.manifest.files
    assert any("no HLO text" in w for w in artifact.manifest.warnings)
    assert artifact.manifest.symbolic_dims == ["b"]
    assert artifact.manifest.outputs[0].shape == ["b", 2]


def test_multi_platform_export_records_the_platform_index_argument(tmp_path):
    target, sig, artifact = export("seed", tmp_path, platforms=("cpu", "cuda"))
    m = artifact.manifest
    assert m.format["platforms"] == ["cpu", "cuda"] and m.supports["platforms"] == ["cpu", "cuda"]
    assert m.format["module_args"][0]["kind"] == "platform_index"
    # a leaf's param is its real position in main: the platform index comes first
    assert m.format["module_args"][1]["name"] == "foo.baz" and m.inputs[1].param == 1
    assert "_platform_index" in (artifact.directory / "model.mlir").read_text()
    assert m.format["uses_shape_polymorphism"] is True  # what the module itself says (the platform index)
    runner = XlaBackend().load(artifact.directory)
    assert runner(sig.example_feed())["out"] == 45


def test_cpu_only_artifact_refuses_gpu_with_advice(tmp_path):
    _, _, artifact = export("seed", tmp_path)
    with pytest.raises(RunError, match="exported for cpu, expected cuda: re-export with --platforms cpu,cuda"):
        XlaBackend().load(artifact.directory, "gpu")


def test_runner_validates_feeds_and_tolerates_missing_dropped_leaves(tmp_path):
    target, sig, artifact = export("seed", tmp_path)
    runner = multiexport.load(artifact.directory)
    feed = sig.example_feed()
    assert runner({"foo.baz": feed["foo.baz"]})["out"] == 45
    with pytest.raises(InputError, match="Input 'foo.baz' \\| got int64, expected int32"):
        runner({"foo.baz": feed["foo.baz"].astype(np.int64)})
    with pytest.raises(InputError, match="Input 'foo.baz' \\| got nothing"):
        runner({"foo.bar": feed["foo.bar"]})


def test_prepared_inputs_run_synchronously_and_repeatably(tmp_path):
    target, sig, artifact = export("mlp", tmp_path)
    runner = multiexport.load(artifact.directory)
    prepared = runner.prepare(sig.example_feed())
    assert runner.run_prepared(prepared) is None
    np.testing.assert_array_equal(
        runner._name_outputs(runner._fetch_impl(prepared))["out.logits"],
        reference_outputs(target, sig, sig.example_feed())["out.logits"],
    )


def test_corrupt_or_mismatched_artifacts_are_artifact_errors(tmp_path):
    _, _, artifact = export("seed", tmp_path)
    exported = artifact.directory / "model.jax_exported"
    size = exported.stat().st_size
    exported.write_bytes(exported.read_bytes()[:100])
    with pytest.raises(ArtifactError, match=r"file 'model.jax_exported' has 100 bytes, expected \d+ \(truncated"):
        XlaBackend().load(artifact.directory)
    exported.write_bytes(b"\x00" * size)  # same size, not a serialized Exported
    with pytest.raises(ArtifactError, match="cannot deserialize model.jax_exported"):
        XlaBackend().load(artifact.directory)
    (artifact.directory / "model.mlirbc").unlink()
    with pytest.raises(ArtifactError, match="stablehlo_bytecode file 'model.mlirbc' .* missing"):
        XlaBackend().load(artifact.directory)


def test_export_replaces_an_artifact_but_never_other_files(tmp_path):
    _, _, first = export("seed", tmp_path)
    _, _, again = export("seed", tmp_path)
    assert again.directory == first.directory and (again.directory / "manifest.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    target = case("seed").make()
    with pytest.raises(ArtifactError, match="exists and is not a multiexport artifact"):
        XlaBackend().export(target.fn, build_signature(target), precious)
    assert (precious / "notes.txt").read_text() == "keep me"
    # a directory that merely holds a file named manifest.json is not an artifact either
    (precious / "manifest.json").write_text("{}")
    with pytest.raises(ArtifactError, match="exists and is not a multiexport artifact"):
        XlaBackend().export(target.fn, build_signature(target), precious)
    # an artifact a user added a file to is not replaced: the file is not the export's
    (first.directory / "my-notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match=r"holds files its export did not write \(my-notes.txt\)"):
        XlaBackend().export(target.fn, build_signature(target), first.directory)
    assert (precious / "notes.txt").read_text() == "keep me" and (first.directory / "my-notes.txt").is_file()


def test_lifted_weights_are_module_parameters_fed_from_the_file(tmp_path):
    from multiexport import examples
    from multiexport.files.safetensors import read_safetensors, write_safetensors

    target = examples.lm("small", "baked")
    sig = build_signature(target)
    artifact = XlaBackend().export(target.fn, sig, tmp_path / "a", ExportOptions(external_weights="always"))
    m = artifact.manifest
    lifted = [t["name"] for t in m.weights["tensors"]]
    assert m.weights["storage"] == "external" and m.format["weight_copies"] == 1
    assert [a["name"] for a in m.format["module_args"]] == ["batch.tokens", *lifted]  # the leaf, then the weights
    assert [a["kind"] for a in m.format["module_args"]] == ["leaf"] + ["weight"] * len(lifted)
    assert [leaf.param for leaf in m.inputs] == [0]
    assert (artifact.directory / "model.jax_exported").stat().st_size < 0.1 * m.weights["external_bytes"]
    feed = sig.example_feed()
    want = reference_outputs(target, sig, feed)
    runner = XlaBackend().load(artifact.directory)
    np.testing.assert_array_equal(runner(feed)["out.logits"], want["out.logits"])

    path = artifact.directory / "weights.safetensors"
    write_safetensors(path, {k: np.array(v) * np.float32(0.5) for k, v in read_safetensors(path).items()})
    assert not np.allclose(XlaBackend().load(artifact.directory)(feed)["out.logits"], want["out.logits"])
    path.write_bytes(path.read_bytes()[:4096])
    with pytest.raises(ArtifactError, match=re.escape("Weight 'params.embed.embedding' | got")):
        XlaBackend().load(artifact.directory)
