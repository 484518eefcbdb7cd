import json

import pytest

from multiexport import ArtifactError
from multiexport.manifest import MANIFEST_SCHEMA, LeafBinding, Manifest


def sample(**changes):
    fields = dict(
        backend="xla", target="t",
        inputs=[LeafBinding("foo.bar", "foo_bar", [10], "int32", used=False, param=None)],
        outputs=[LeafBinding("out", "out", [], "int32", used=True, param=0)],
        keep_unused=False, symbolic_dims=[], files={"exported": "model.bin"}, versions={"jax": "x"},
        created="2026-01-01T00:00:00+00:00",
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
    with pytest.raises(ArtifactError, match="not a directory"):
        Manifest.read(tmp_path / "nope")
    with pytest.raises(ArtifactError, match="no manifest.json"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="unreadable JSON"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": "other/9"}))
    with pytest.raises(ArtifactError, match=f"expected '{MANIFEST_SCHEMA}'"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": MANIFEST_SCHEMA, "backend": "xla"}))
    with pytest.raises(ArtifactError, match="malformed manifest"):
        Manifest.read(tmp_path)
    sample().write(tmp_path)
    with pytest.raises(ArtifactError, match="exported file 'model.bin' .* missing"):
        Manifest.read(tmp_path)
