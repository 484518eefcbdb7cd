"""`manifest.json`: the one file in every artifact that holds everything a consumer needs.

It maps each named leaf to the format's parameter (`used`, `param`), gives shapes with symbolic dims by
name and dtypes, says what the artifact supports (sizes, platforms) and what a consumer needs to read it
(`requires`), lists every file the export wrote (`inventory`, so a truncated copy is refused and an
old artifact can be replaced without touching anyone else's files) and the versions that produced it.

A manifest is read as user input: every field is type-checked, every path must stay inside the artifact,
and any problem is one ArtifactError line naming the manifest and the field.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal

from ..dtypes import parse_dtype
from ..errors import ArtifactError
from ..files import inside, write_text_atomic
from ..files.bounded import read_json
from ..results.schema import from_data, to_data
from .manifest_records import (
    Count,
    Dim,
    Dtype,
    JsonObject,
    JsonRecord,
    JsonRule,
    Name,
    OptionValue,
    ParamKind,
    RelPath,
    RequirementValue,
    Sha256,
    Supports,
    WeightTensor,
    Weights,
)
from .precision import PrecisionFacts

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA: Final = "multiexport.manifest/2"
# The same rules as a JSON Schema (draft 2020-12) for consumers in other languages; documented in docs/manifest.md.
# Generated from these dataclasses (python -m multiexport.exporting.manifest_schema); this reader does not use it
# (no dependency): tests/exporting/test_manifest_schema.py checks it is the generated one and agrees with the reader.
SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")
_ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_DIM = re.compile(r"^[A-Za-z0-9_+\-*/^(), ]+$")  # a symbol or an expression of symbols (jax.export syntax: floordiv(b, 2), b^2)
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
    param: the format's parameter for the leaf, or None when the format dropped it; `param_kind` says which
        kind: xla/iree, its position among the arguments of the module in files.stablehlo_bytecode (a
        platform-index argument, when the module has several platforms, is position 0); savedmodel, the
        signature key; onnx/openvino, the graph input (or output) name; litert, the signature input (or output)
        name. A native consumer binds by native.args, which also covers the per-size static modules.
    weak_type: a Python scalar in the target (JAX types it weakly).
    key_impl: for a typed PRNG key, its implementation; the leaf is the key's physical data.
    param_kind: "position" (param is an index >= 0) or "name" (param is a non-empty string); null when param
        is. Written since manifests carried it; derived from param when reading an older one.
    """

    name: Name
    alias: Annotated[str, JsonRule(pattern=_ALIAS.pattern)]
    shape: list[Dim]
    dtype: Dtype
    used: bool = True
    param: Count | Name | None = None
    weak_type: bool = False
    key_impl: str | None = None
    param_kind: ParamKind | None = None
    # In the generated JSON Schema (exporting.manifest_schema) as in check_loaded: param_kind agrees with param.
    SCHEMA_RULES: ClassVar[dict[str, Any]] = {"allOf": [
        {"if": {"required": ["param_kind"], "properties": {"param_kind": {"const": kind}}},
         "then": {"required": ["param"], "properties": {"param": {"type": json_type}}} if json_type != "null" else
         {"properties": {"param": {"type": "null"}}}}
        for kind, json_type in (("position", "integer"), ("name", "string"), (None, "null"))]}

    def __post_init__(self) -> None:
        if self.param_kind is None and self.param is not None:  # an older manifest, or a writer that left it out
            object.__setattr__(self, "param_kind", "position" if isinstance(self.param, int) else "name")

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
        if self.param == "":
            raise ArtifactError(f"{where} | got param '', expected an index >= 0, a non-empty name or null")
        kind = None if self.param is None else "position" if isinstance(self.param, int) else "name"
        if self.param_kind != kind:
            raise ArtifactError(f"{where} | got param_kind {self.param_kind!r} for param {self.param!r}, expected "
                                f"{kind!r}")


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
    requires: what a consumer needs to read it (StableHLO version, XlaCallModule version, opset, ...), with a
        `note` in words: fact -> a version string, a version number or a list of names.
    supports: what the artifact accepts (manifest_records.Supports: dims, platforms, x64).
    created: UTC time of the export.
    format: the format's own facts as JSON: the backend's typed `facts_type` as written; read them typed and
        checked through `Backend.facts(manifest)` (exporting.facts).
    warnings: facts a user should know about this artifact.
    weights: where the weights live (manifest_records.Weights: baked into the artifact, external, or input
        leaves).
    options: the backend options the export used (declared by the backend): name -> value.
    native: what the format's native, Python-free consumer needs (checked by its NativeConsumer and
        native_section.check_section; specified in native/csrc/README.md), or None.
    precision: what a reduced-precision artifact is (exporting.precision.PrecisionFacts: precision, method,
        calibration, quantized ops); None for the fp32 artifact.
    schema: `multiexport.manifest/2`.
    """

    backend: Name
    target: str
    inputs: Annotated[list[LeafBinding], JsonRule(uniqueItems=True)]
    outputs: Annotated[list[LeafBinding], JsonRule(minItems=1)]
    keep_unused: bool
    symbolic_dims: list[str]
    files: dict[str, RelPath]
    versions: dict[str, str]
    created: str
    inventory: dict[str, Count] = field(default_factory=dict)
    inventory_sha256: dict[str, Sha256] = field(default_factory=dict)
    requires: dict[str, RequirementValue] = field(default_factory=dict)
    supports: Supports = field(default_factory=Supports)
    format: JsonObject = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    weights: Weights = field(default_factory=Weights)
    options: dict[str, OptionValue] = field(default_factory=dict)
    native: Annotated[JsonObject, JsonRule("native")] | None = None
    precision: PrecisionFacts | None = None
    schema: Literal["multiexport.manifest/2"] = MANIFEST_SCHEMA

    def __post_init__(self) -> None:
        # The boundary where the pipeline and the backends still hand dicts (FormatResult.weights, the supports
        # the driver builds): each becomes its record here, every key declared and typed.
        object.__setattr__(self, "supports", Supports.coerce(self.supports, "Manifest.supports"))
        object.__setattr__(self, "weights", Weights.coerce(self.weights, "Manifest.weights"))

    @property
    def used_inputs(self) -> list[LeafBinding]:
        return [leaf for leaf in self.inputs if leaf.used]

    @property
    def unused_inputs(self) -> list[LeafBinding]:
        return [leaf for leaf in self.inputs if not leaf.used]

    def fixed_sizes(self) -> dict[str, list[int]]:
        """Symbolic dims the artifact supports only at some sizes (one model per size: the static-size
        fallback), with those sizes."""
        return {d: list(v) for d, v in (self.supports.dims or {}).items() if v != "any"}

    def external_weights(self) -> list[str]:
        """Names of the lifted weights the artifact keeps outside its module, in parameter order (XLA's and
        IREE's `weights.safetensors`); empty when they are embedded."""
        if self.weights.storage != "external":
            return []
        return [t.name for t in self.weights.tensors or []]

    @property
    def weight_tensors(self) -> list[WeightTensor]:
        """The lifted weights kept outside the module, typed (empty when they are embedded)."""
        return list(self.weights.tensors or []) if self.weights.storage == "external" else []

    def to_json(self) -> dict[str, Any]:
        """The manifest as manifest.json holds it: the records as the objects they were given as."""
        data = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            data[f.name] = value.to_json() if isinstance(value, JsonRecord) else to_data(value)
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
