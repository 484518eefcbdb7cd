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
