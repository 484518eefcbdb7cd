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
from ..results.schema import from_data
from .precision import PrecisionFacts

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
        """One leaf from parsed JSON, through the codec; ArtifactError naming `where` and the field."""
        return from_data(cls, data, where, ArtifactError)

    def check_loaded(self, where: str) -> None:
        """What the field types cannot say, checked once the codec built the leaf from a manifest (`where`
        names it): a name, an identifier alias, dims that are sizes or names, a dtype JAX has, an index >= 0."""
        if not self.name:
            raise ArtifactError(f"{where} | got name '', expected a non-empty string")
        where = f"{where} '{self.name}'"
        if not _ALIAS.match(self.alias):
            raise ArtifactError(f"{where} | got alias {self.alias!r}, expected an identifier [A-Za-z][A-Za-z0-9_]*")
        if not all(_is_dim(d) for d in self.shape):
            raise ArtifactError(f"{where} | got shape {self.shape!r}, expected a list of sizes >= 0 and dimension names")
        try:
            parse_dtype(self.dtype)
        except TypeError:
            raise ArtifactError(f"{where} | got dtype {self.dtype!r}, expected a numeric or bool dtype name") from None
        if self.dtype in _NO_JAX_DTYPE:
            raise ArtifactError(f"{where} | got dtype {self.dtype!r}, expected a dtype a JAX array can have")
        if isinstance(self.param, int) and self.param < 0:
            raise ArtifactError(f"{where} | got param {self.param!r}, expected an index >= 0, a name or null")


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
    precision: what a reduced-precision artifact is (exporting.precision.PrecisionFacts: precision, method,
        calibration, quantized ops); None for the fp32 artifact.
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
    precision: PrecisionFacts | None = None
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
        data = asdict(self)
        if data["precision"] is None:
            del data["precision"]  # an fp32 artifact's manifest is what it was before precisions existed
        return data

    @property
    def precision_name(self) -> str:
        """The artifact's precision: "fp32" unless the manifest states a reduced one."""
        return self.precision.precision if self.precision is not None else "fp32"

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
        """The manifest in parsed JSON `data`, read by the codec of results.json and the worker messages
        (every field checked against its type) and then `check_loaded`; ArtifactError naming the field."""
        if not isinstance(data, dict):
            raise ArtifactError(f"Artifact '{where}' | got {type(data).__name__}, expected a JSON object")
        schema = data.get("schema")
        if schema != MANIFEST_SCHEMA:
            raise ArtifactError(f"Artifact '{where}' | got schema {schema!r}, expected {MANIFEST_SCHEMA!r} "
                                "(re-export with this multiexport)")
        return from_data(cls, data, f"Artifact '{where}' | manifest", ArtifactError)

    def check_loaded(self, where: str) -> None:
        """What the field types cannot say: relative paths, sizes and digests in the inventory, unique input
        names, at least one output."""
        for role, name in self.files.items():
            if not name:
                raise ArtifactError(f"{where}.files | file '{role}' is '', expected a relative path")
        for name, size in self.inventory.items():
            if size < 0:
                raise ArtifactError(f"{where}.inventory | entry '{name}' is {size!r}, expected a size in bytes")
        for name, digest in self.inventory_sha256.items():
            if len(digest) != 64 or digest.strip("0123456789abcdef"):
                raise ArtifactError(f"{where}.inventory_sha256 | entry '{name}' is {ascii(digest)[:80]}, "
                                    "expected 64 hex digits")
        names = [leaf.name for leaf in self.inputs]
        if len(set(names)) != len(names):
            raise ArtifactError(f"{where}.inputs | lists an input leaf twice, expected unique names")
        if not self.outputs:
            raise ArtifactError(f"{where}.outputs | lists no outputs, expected at least one")

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
