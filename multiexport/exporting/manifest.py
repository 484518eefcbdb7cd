"""`manifest.json`: the one file in every artifact that holds everything a consumer needs.

It maps each named leaf to the format's parameter (`used`, `param`), gives shapes with symbolic dims by
name and dtypes, says what the artifact supports (sizes, platforms) and what a consumer needs to read it
(`requires`), lists every file the export wrote (`inventory`, so a truncated copy is refused and an
old artifact can be replaced without touching anyone else's files) and the versions that produced it.

A manifest is read as user input: every field is type-checked, every path must stay inside the artifact,
and any problem is one ArtifactError line naming the manifest and the field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..dtypes import parse_dtype
from ..errors import ArtifactError
from ..files import inside, write_text_atomic
from ..files.bounded import read_json

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "multiexport.manifest/2"
# The same rules as a JSON Schema (draft 2020-12) for consumers in other languages; documented in docs/manifest.md.
# This reader does not use it (no dependency): tests/exporting/test_manifest_schema.py keeps the two in agreement.
SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")
_ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_DIM = re.compile(r"^[A-Za-z0-9_+\-*/(), ]+$")  # a symbol or an expression of symbols (jax.export syntax: floordiv(b, 2))
_MAX_MANIFEST = 64 << 20
# numpy's extended precision (x87 long double): no JAX array and no format has it.
_NO_JAX_DTYPE = ("float128", "complex256")
# Files a user may rewrite with other tools (weights edited by name in any safetensors writer): their size may
# change, and their own reader checks every entry against the file instead.
EDITABLE_ROLES = ("weights",)


@dataclass(frozen=True)
class LeafBinding:
    """One input or output leaf as a given format binds it.

    name: canonical leaf name (`foo.bar`).
    alias: the name as an identifier (`foo_bar`), used where a format needs one (TF signature keys).
    shape: ints for static dims, strings for symbolic ones (`"b"`).
    dtype: numpy / ml_dtypes dtype name the artifact takes or returns.
    used: whether the artifact's module reads the leaf.
    param: the format's parameter for the leaf: a positional index (XLA, IREE) or a name (TF signature
        key, ONNX input), or None when the format dropped the leaf.
    weak_type: a Python scalar in the target (JAX types it weakly).
    key_impl: for a typed PRNG key, its implementation; the leaf is the key's physical data.
    """

    name: str
    alias: str
    shape: list[int | str]
    dtype: str
    used: bool = True
    param: int | str | None = None
    weak_type: bool = False
    key_impl: str | None = None

    @classmethod
    def from_json(cls, data: Any, where: str) -> "LeafBinding":
        if not isinstance(data, dict):
            raise ArtifactError(f"{where} | got {type(data).__name__}, expected an object")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for key in ("name", "alias", "shape", "dtype"):
            if key not in known:
                raise ArtifactError(f"{where} | has no '{key}', expected one")
        name, alias, shape, dtype = known["name"], known["alias"], known["shape"], known["dtype"]
        if not isinstance(name, str) or not name:
            raise ArtifactError(f"{where} | got name {name!r}, expected a non-empty string")
        where = f"{where} '{name}'"
        if not isinstance(alias, str) or not _ALIAS.match(alias):
            raise ArtifactError(f"{where} | got alias {alias!r}, expected an identifier [A-Za-z][A-Za-z0-9_]*")
        if not isinstance(shape, list) or not all(_is_dim(d) for d in shape):
            raise ArtifactError(f"{where} | got shape {shape!r}, expected a list of sizes >= 0 and dimension names")
        try:
            parse_dtype(dtype)
        except TypeError:
            raise ArtifactError(f"{where} | got dtype {dtype!r}, expected a numeric or bool dtype name") from None
        if dtype in _NO_JAX_DTYPE:
            raise ArtifactError(f"{where} | got dtype {dtype!r}, expected a dtype a JAX array can have")
        param = known.get("param")
        if param is not None and not (isinstance(param, str) or (isinstance(param, int) and not isinstance(param, bool)
                                                               and param >= 0)):
            raise ArtifactError(f"{where} | got param {param!r}, expected an index >= 0, a name or null")
        for key in ("used", "weak_type"):
            if key in known and not isinstance(known[key], bool):
                raise ArtifactError(f"{where} | got {key} {known[key]!r}, expected true or false")
        if known.get("key_impl") is not None and not isinstance(known["key_impl"], str):
            raise ArtifactError(f"{where} | got key_impl {known['key_impl']!r}, expected a string")
        return cls(**known)


def _is_dim(d: Any) -> bool:
    if isinstance(d, bool):
        return False
    if isinstance(d, int):
        return d >= 0
    return isinstance(d, str) and bool(_DIM.match(d)) and any(c.isalpha() for c in d)


@dataclass(frozen=True)
class Manifest:
    """Everything a runner (or a C++ user) needs to call an artifact by leaf name.

    backend: the backend that wrote it (`xla`, `savedmodel`, ...).
    target: the target's name.
    inputs, outputs: every leaf in signature order, with the format's binding.
    keep_unused: whether every input leaf was forced to be a parameter.
    symbolic_dims: the symbolic dimension names the shapes use.
    files: role -> relative path of the files a consumer uses (`model`, `example_inputs`, `weights`).
    inventory: relative path -> size in bytes of every file the export wrote (manifest.json aside).
    inventory_sha256: relative path -> sha256 of every file in `inventory`: with the sizes, the proof that
        multiexport wrote a file and nobody changed it since, which replacing the artifact requires.
    versions: what produced the artifact (multiexport, python, numpy, jax, the converter, ...).
    requires: what a consumer needs to read it (StableHLO version, XlaCallModule version, opset, ...).
    supports: what the artifact accepts: `dims` (symbol -> "any" or the list of sizes), `platforms`,
        `x64` (the artifact needs 64-bit types in JAX).
    created: UTC time of the export.
    format: the format's own facts as JSON: the backend's typed `facts_type` as written; read them typed and
        checked through `Backend.facts(manifest)` (exporting.facts).
    warnings: facts a user should know about this artifact.
    weights: where the weights live (baked into the artifact, external, or input leaves).
    options: the backend options the export used (declared by the backend).
    native: what the format's native, Python-free consumer needs, or None.
    schema: `multiexport.manifest/2`.
    """

    backend: str
    target: str
    inputs: list[LeafBinding]
    outputs: list[LeafBinding]
    keep_unused: bool
    symbolic_dims: list[str]
    files: dict[str, str]
    versions: dict[str, str]
    created: str
    inventory: dict[str, int] = field(default_factory=dict)
    inventory_sha256: dict[str, str] = field(default_factory=dict)
    requires: dict[str, Any] = field(default_factory=dict)
    supports: dict[str, Any] = field(default_factory=dict)
    format: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    weights: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    native: dict[str, Any] | None = None
    schema: str = MANIFEST_SCHEMA

    @property
    def used_inputs(self) -> list[LeafBinding]:
        return [leaf for leaf in self.inputs if leaf.used]

    @property
    def unused_inputs(self) -> list[LeafBinding]:
        return [leaf for leaf in self.inputs if not leaf.used]

    def fixed_sizes(self) -> dict[str, list[int]]:
        """Symbolic dims the artifact supports only at some sizes (a specialised build), with those sizes."""
        return {d: list(v) for d, v in (self.supports.get("dims") or {}).items() if v != "any"}

    def external_weights(self) -> list[str]:
        """Names of the lifted weights the artifact keeps outside its module, in parameter order (XLA's and
        IREE's `weights.safetensors`); empty when they are embedded."""
        if self.weights.get("storage") != "external":
            return []
        tensors = self.weights.get("tensors", [])
        if not isinstance(tensors, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                                    for t in tensors):
            raise ArtifactError("Artifact manifest | weights.tensors is malformed, expected a list of {name, shape, "
                                "dtype}")
        return [t["name"] for t in tensors]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, directory: str | os.PathLike) -> Path:
        """Write manifest.json atomically (temporary file, then rename)."""
        path = Path(directory) / MANIFEST_NAME
        write_text_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        return path

    @classmethod
    def read(cls, directory: str | os.PathLike, check_files: bool = True) -> "Manifest":
        """The manifest of `directory`, validated; every listed file must exist inside it at its listed size."""
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        if not directory.is_dir():
            what = "a file" if directory.exists() else "missing"
            raise ArtifactError(f"Artifact '{directory}' | is {what}, expected a directory written by `multiexport export`")
        if not os.path.lexists(path):
            raise ArtifactError(f"Artifact '{directory}' | has no {MANIFEST_NAME}, expected a directory written by "
                                "`multiexport export`")
        data = read_json(path, "Artifact", _MAX_MANIFEST, ArtifactError, "expected a multiexport manifest")
        manifest = cls.from_json(data, str(path))
        if check_files:
            manifest.check_files(directory)
        return manifest

    @classmethod
    def from_json(cls, data: Any, where: str = MANIFEST_NAME) -> "Manifest":
        if not isinstance(data, dict):
            raise ArtifactError(f"Artifact '{where}' | got {type(data).__name__}, expected a JSON object")
        schema = data.get("schema")
        if schema != MANIFEST_SCHEMA:
            raise ArtifactError(f"Artifact '{where}' | got schema {schema!r}, expected {MANIFEST_SCHEMA!r} "
                                "(re-export with this multiexport)")
        fields: dict[str, Any] = {}
        types = {"backend": str, "target": str, "keep_unused": bool, "symbolic_dims": list, "files": dict,
                 "versions": dict, "created": str, "inventory": dict, "inventory_sha256": dict, "requires": dict, "supports": dict,
                 "format": dict, "warnings": list, "weights": dict, "options": dict}
        for key, kind in types.items():
            if key in data:
                if not isinstance(data[key], kind) or (kind is not bool and isinstance(data[key], bool)):
                    raise ArtifactError(f"Artifact '{where}' | field '{key}' is {type(data[key]).__name__}, "
                                        f"expected {kind.__name__}")
                fields[key] = data[key]
            elif key in ("backend", "target", "files", "versions", "created", "symbolic_dims", "keep_unused"):
                raise ArtifactError(f"Artifact '{where}' | has no field '{key}', expected one")
        for role in ("inputs", "outputs"):
            if not isinstance(data.get(role), list):
                raise ArtifactError(f"Artifact '{where}' | field '{role}' is {type(data.get(role)).__name__}, "
                                    "expected a list of leaves")
            fields[role] = [LeafBinding.from_json(d, f"Artifact '{where}' | {role}[{i}]")
                            for i, d in enumerate(data[role])]
        if data.get("native") is not None and not isinstance(data["native"], dict):
            raise ArtifactError(f"Artifact '{where}' | field 'native' is {type(data['native']).__name__}, expected an object")
        fields["native"] = data.get("native")
        for role, name in fields["files"].items():
            if not isinstance(name, str):
                raise ArtifactError(f"Artifact '{where}' | file '{role}' is {name!r}, expected a relative path")
        for name, size in fields.get("inventory", {}).items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ArtifactError(f"Artifact '{where}' | inventory entry '{name}' is {size!r}, expected a size in bytes")
        for name, digest in fields.get("inventory_sha256", {}).items():
            if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
                raise ArtifactError(f"Artifact '{where}' | inventory_sha256 entry '{name}' is {ascii(digest)[:80]}, "
                                    "expected 64 hex digits")
        names = [leaf.name for leaf in fields["inputs"]]
        if len(set(names)) != len(names):
            raise ArtifactError(f"Artifact '{where}' | lists an input leaf twice, expected unique names")
        if not fields["outputs"]:
            raise ArtifactError(f"Artifact '{where}' | lists no outputs, expected at least one")
        return cls(**fields)

    def check_files(self, directory: Path) -> None:
        """Every listed file and inventory entry resolves inside `directory` and has its recorded size."""
        for role, name in self.files.items():
            full = inside(directory, name, f"{role} file")
            if not full.is_file():
                raise ArtifactError(f"Artifact '{directory}' | {role} file '{name}' listed in the manifest is missing")
        editable = {self.files.get(role) for role in EDITABLE_ROLES}
        for name, size in self.inventory.items():
            full = inside(directory, name, "inventory")
            if not full.is_file():
                raise ArtifactError(f"Artifact '{directory}' | file '{name}' listed in the manifest is missing")
            if full.stat().st_size != size and name not in editable:
                raise ArtifactError(f"Artifact '{directory}' | file '{name}' has {full.stat().st_size} bytes, expected "
                                    f"{size} (truncated or modified since export?)")

    def path(self, directory: Path, role: str) -> Path:
        """The file of `role`, checked to lie inside the artifact."""
        if role not in self.files:
            raise ArtifactError(f"Artifact '{directory}' | lists no '{role}' file, expected one for backend '{self.backend}'")
        return inside(directory, self.files[role], f"{role} file")
