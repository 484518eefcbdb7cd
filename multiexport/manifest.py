"""`manifest.json`: the one file in every artifact that maps each named leaf to the format's parameter.

A runner needs nothing but the artifact directory: the manifest says which leaves the module reads
(`used`), where each goes (`param`: an index for XLA/IREE, a key for TF/ONNX, null when pruned),
shapes with symbolic dims by name, dtypes, and the versions that produced the files.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import ArtifactError

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "multiexport.manifest/1"


@dataclass(frozen=True)
class LeafBinding:
    """One input or output leaf as a given format binds it.

    param is the format's parameter for the leaf: a positional index (XLA, IREE) or a name
    (TF signature key, ONNX input), or None when the format dropped the leaf.
    """

    name: str
    alias: str
    shape: list[int | str]
    dtype: str
    used: bool = True
    param: int | str | None = None
    weak_type: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LeafBinding":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass(frozen=True)
class Manifest:
    """Everything a runner (or a C++ user) needs to call an artifact by leaf name."""

    backend: str
    target: str
    inputs: list[LeafBinding]
    outputs: list[LeafBinding]
    keep_unused: bool
    symbolic_dims: list[str]
    files: dict[str, str]
    versions: dict[str, str]
    created: str
    format: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Where the weights live: baked into the artifact as constants, or taken as input leaves.
    weights: dict[str, Any] = field(default_factory=dict)
    schema: str = MANIFEST_SCHEMA

    @property
    def used_inputs(self) -> list[LeafBinding]:
        return [leaf for leaf in self.inputs if leaf.used]

    @property
    def unused_inputs(self) -> list[LeafBinding]:
        return [leaf for leaf in self.inputs if not leaf.used]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, directory: str | os.PathLike) -> Path:
        """Write manifest.json atomically (temporary file, then rename)."""
        path = Path(directory) / MANIFEST_NAME
        write_text_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        return path

    @classmethod
    def read(cls, directory: str | os.PathLike) -> "Manifest":
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        if not directory.is_dir():
            raise ArtifactError(f"Artifact '{directory}' | not a directory, expected one written by `multiexport export`")
        if not path.is_file():
            raise ArtifactError(f"Artifact '{directory}' | no {MANIFEST_NAME}, expected a directory written by `multiexport export`")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"Artifact '{path}' | unreadable JSON ({exc})") from exc
        schema = data.get("schema")
        if schema != MANIFEST_SCHEMA:
            raise ArtifactError(f"Artifact '{path}' | got schema {schema!r}, expected {MANIFEST_SCHEMA!r}")
        try:
            fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            fields["inputs"] = [LeafBinding.from_json(d) for d in data["inputs"]]
            fields["outputs"] = [LeafBinding.from_json(d) for d in data["outputs"]]
            manifest = cls(**fields)
        except (KeyError, TypeError) as exc:
            raise ArtifactError(f"Artifact '{path}' | malformed manifest ({type(exc).__name__}: {exc})") from exc
        for role, name in manifest.files.items():
            if not (directory / name).is_file():
                raise ArtifactError(f"Artifact '{directory}' | {role} file '{name}' listed in the manifest is missing")
        return manifest


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old content or the new, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # mkstemp creates 0600; an artifact is meant to be shipped, so honour the umask like open() does.
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
