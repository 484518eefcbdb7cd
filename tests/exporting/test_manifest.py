"""manifest.json as hostile input: every malformed field is one ArtifactError naming the field."""

import json

import pytest

from multiexport import ArtifactError
from multiexport.exporting.manifest import MANIFEST_SCHEMA, LeafBinding, Manifest


def sample(**changes):
    fields = dict(
        backend="xla", target="t",
        inputs=[LeafBinding("foo.bar", "foo_bar", [10], "int32", used=False, param=None)],
        outputs=[LeafBinding("out", "out", [], "int32", used=True, param=0)],
        keep_unused=False, symbolic_dims=[], files={"exported": "model.bin"}, versions={"jax": "x"},
        created="2026-01-01T00:00:00+00:00", inventory={"model.bin": 1},
    )
    fields.update(changes)
    return Manifest(**fields)


def test_roundtrip(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"x")
    m = sample()
    m.write(tmp_path)
    assert Manifest.read(tmp_path) == m
    assert not list(tmp_path.glob(".*tmp"))
    assert (tmp_path / "manifest.json").stat().st_mode & 0o044  # readable by others: artifacts get shipped


def test_unreadable_artifacts_are_artifact_errors(tmp_path):
    with pytest.raises(ArtifactError, match="is missing"):
        Manifest.read(tmp_path / "nope")
    with pytest.raises(ArtifactError, match="has no manifest.json"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="unreadable JSON"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": "other/9"}))
    with pytest.raises(ArtifactError, match=f"expected '{MANIFEST_SCHEMA}'"):
        Manifest.read(tmp_path)
    sample().write(tmp_path)
    with pytest.raises(ArtifactError, match="exported file 'model.bin' .* missing"):
        Manifest.read(tmp_path)
    (tmp_path / "model.bin").write_bytes(b"xx")
    with pytest.raises(ArtifactError, match=r"file 'model.bin' has 2 bytes, expected 1 \(truncated"):
        Manifest.read(tmp_path)


def _write(tmp_path, data):
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    return tmp_path


def _base():
    return sample(files={}, inventory={}).to_json()


# Shared with test_manifest_schema.py: the JSON Schema must refuse every one of these too.
MALFORMED = [
    (lambda d: d.clear() or d.update(schema=MANIFEST_SCHEMA), "manifest | has no 'backend', expected one"),
    (lambda d: d.update(inputs=None), r"manifest.inputs \| got null, expected a list"),
    (lambda d: d.update(outputs=[]), "lists no outputs"),
    (lambda d: d.update(backend=3), r"manifest.backend \| got int '3', expected a string"),
    (lambda d: d.update(keep_unused="yes"), r"manifest.keep_unused \| got str 'yes', expected true or false"),
    (lambda d: d["inputs"][0].update(shape="10"), r"inputs\[0\].shape \| got str '10', expected a list"),
    (lambda d: d["inputs"][0].update(shape=[-1]), "expected a list of sizes >= 0"),
    (lambda d: d["inputs"][0].update(shape=[True]), r"shape\[0\] \| got a boolean, expected an integer or a string"),
    (lambda d: d["inputs"][0].update(dtype="object"), "expected a numeric or bool dtype name"),
    (lambda d: d["inputs"][0].update(alias="../../x"), "expected an identifier"),
    (lambda d: d["inputs"][0].update(param=-1), "expected an index >= 0"),
    (lambda d: d["inputs"][0].update(used="no"), "expected true or false"),
    (lambda d: d["inputs"].append(dict(d["inputs"][0])), "lists an input leaf twice"),
    (lambda d: d.update(files={"model": "/etc/passwd"}), "leaves the directory"),
    (lambda d: d.update(files={"model": "../outside"}), "leaves the directory"),
    (lambda d: d.update(files={"model": 3}), r"manifest.files.model \| got int '3', expected a string"),
    (lambda d: d.update(inventory={"a": -1}), "expected a size in bytes"),
    (lambda d: d.update(native=[]), r"manifest.native \| got list, expected an object"),
    # the typed sections: each field with its path
    (lambda d: d.update(supports={"platforms": "cpu"}), r"manifest.supports.platforms \| got str 'cpu', expected a list"),
    (lambda d: d.update(supports={"dims": {"b": "some"}}), r"manifest.supports.dims.b \| got str 'some', expected "
                                                           r"\"any\" or a list"),
    (lambda d: d.update(supports={"dims": {"b": [0]}}), r"manifest.supports.dims.b \| got \[0\], expected sizes >= 1"),
    (lambda d: d.update(supports={"x64": 1}), r"manifest.supports.x64 \| got int '1', expected true, false or null"),
    (lambda d: d.update(weights={"storage": "cloud"}), r"manifest.weights.storage \| got str 'cloud', expected "
                                                      r"\"embedded\", \"external\", \"none\" or null"),
    (lambda d: d.update(weights={"external_bytes": -1}), r"manifest.weights.external_bytes \| got -1, expected a count"),
    (lambda d: d.update(weights={"file": "../elsewhere.bin"}), r"manifest.weights.file \| got '../elsewhere.bin', "
                                                              "expected a relative path inside the artifact"),
    (lambda d: d.update(weights={"storage": "external", "tensors": [{"name": "w"}]}),
     r"manifest.weights.tensors\[0\] \| has no 'source', expected one"),
    (lambda d: d.update(requires={"onnx_opset": 17.5}), r"manifest.requires.onnx_opset \| got float '17.5', expected "
                                                       "a string, an integer or a list"),
    (lambda d: d.update(options={"route": ["a"]}), r"manifest.options.route \| got list, expected a string"),
    # param typed by kind
    (lambda d: d["outputs"][0].update(param_kind="name"), "got param_kind 'name' for param 0, expected 'position'"),
    (lambda d: d["outputs"][0].update(param_kind="index"), r"param_kind \| got str 'index', expected \"position\", "
                                                          r"\"name\" or null"),
    (lambda d: d["inputs"][0].update(param="", param_kind="name"), "got param '', expected an index >= 0, a non-empty "
                                                                  "name or null"),
    (lambda d: d["inputs"][0].update(param_kind="name"), "got param_kind 'name' for param None, expected None"),
]


@pytest.mark.parametrize("mutate, message", MALFORMED)
def test_malformed_manifests_are_refused_naming_the_field(tmp_path, mutate, message):
    data = _base()
    mutate(data)
    with pytest.raises(ArtifactError, match=message):
        Manifest.read(_write(tmp_path, data))


@pytest.mark.parametrize("document", [[], None, 3, "x"])
def test_a_manifest_that_is_not_an_object_is_refused(tmp_path, document):
    with pytest.raises(ArtifactError, match="expected a JSON object"):
        Manifest.read(_write(tmp_path, document))


def test_fixed_sizes_say_which_dims_a_specialised_artifact_supports():
    m = sample(supports={"dims": {"b": [3], "t": "any"}})
    assert m.fixed_sizes() == {"b": [3]}


def test_param_kind_is_written_beside_param_and_derived_for_an_older_manifest(tmp_path):
    m = sample(inputs=[LeafBinding("x", "x", [2], "float32", param="serving_x"),
                       LeafBinding("y", "y", [], "int32", used=False)])
    assert [leaf.param_kind for leaf in (*m.inputs, *m.outputs)] == ["name", None, "position"]
    data = m.to_json()
    assert data["inputs"][0]["param_kind"] == "name" and data["outputs"][0]["param_kind"] == "position"
    for leaf in (*data["inputs"], *data["outputs"]):  # as written before param_kind existed
        del leaf["param_kind"]
    (tmp_path / "model.bin").write_bytes(b"x")
    assert Manifest.read(_write(tmp_path, data)) == m


def test_the_sections_are_typed_records_that_still_read_as_the_json_objects(tmp_path):
    from multiexport.exporting.manifest_records import Supports, WeightTensor, Weights

    tensors = [{"name": "w0", "source": "params.w", "shape": [3, 2], "dtype": "float32"},
               {"name": "w1", "source": None, "shape": [], "dtype": "bfloat16"}]
    weights = {"storage": "external", "file": "weights.safetensors", "external_bytes": 26, "tensors": tensors}
    supports = {"dims": {"b": "any", "s": [8, 16]}, "platforms": ["cpu", "tpu"], "x64": False}
    m = sample(supports=supports, weights=weights, requires={"note": "any jaxlib", "opset": 17, "ops": ["A"]})
    assert isinstance(m.supports, Supports) and m.supports.platforms == ["cpu", "tpu"]
    assert isinstance(m.weights, Weights) and m.weight_tensors == [WeightTensor("w0", "params.w", [3, 2], "float32"),
                                                                   WeightTensor("w1", None, [], "bfloat16")]
    assert m.external_weights() == ["w0", "w1"] and m.fixed_sizes() == {"s": [8, 16]}
    # the JSON on disk is exactly what was given (no key added, none dropped, a null source kept)
    data = json.loads(json.dumps(m.to_json()))
    assert data["supports"] == supports and data["weights"] == weights
    assert dict(m.supports) == supports and m.weights["tensors"] == tensors and m.supports.get("platforms") == ["cpu", "tpu"]
    assert sample().to_json()["supports"] == {} and sample().to_json()["weights"] == {}  # absent keys stay absent
    (tmp_path / "model.bin").write_bytes(b"x")
    assert Manifest.read(_write(tmp_path, data)) == m


def test_a_writer_that_hands_an_undeclared_section_key_is_multiexports_bug():
    from multiexport.errors import InternalError

    with pytest.raises(InternalError, match=r"Manifest.weights \| got key 'storage_class', expected one of"):
        sample(weights={"storage": "embedded", "storage_class": "cold"})
    with pytest.raises(InternalError, match=r"Manifest.supports.platforms \| got str 'cpu', expected a list"):
        sample(supports={"platforms": "cpu"})


def _installed() -> list[str]:
    from multiexport.exporting.registry import get_backend, names

    return [n for n in names() if get_backend(n).available().ok]


@pytest.mark.parametrize("name", _installed())
def test_the_manifest_each_backend_writes_is_typed_valid_and_read_back_as_written(name, tmp_path):
    """A real export of the small seed per installed backend: its manifest validates against the shipped schema,
    reads back typed (param_kind the format's), and writes back exactly its JSON."""
    from multiexport import examples
    from multiexport.exporting import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature

    from .test_contract import assert_manifest_valid

    target = examples.seed()
    artifact = get_backend(name).export(target.fn, build_signature(target), tmp_path / name, ExportOptions())
    assert_manifest_valid(artifact.directory)
    on_disk = json.loads((artifact.directory / "manifest.json").read_text())
    m = Manifest.read(artifact.directory)
    assert m.to_json() == on_disk
    kinds = {leaf.param_kind for leaf in (*m.inputs, *m.outputs) if leaf.param is not None}
    assert kinds == ({"position"} if name in ("xla", "iree") else {"name"})
    assert m.supports.platforms and m.weights.storage in ("embedded", "external", "none")
