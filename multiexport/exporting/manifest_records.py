"""The typed records and value types of manifest.json's sections (`supports`, `weights`, `requires`, `options`,
`format`, `native`), each read by the one codec (results.schema.from_data) with the field's path in errors.

Why records that also read as mappings: the JSON on disk is the contract (a C++ consumer of today's artifacts
reads it), so each record writes exactly the keys it was given (a field left at None is a key that was absent)
and reads back every manifest written before it existed; code that read these sections as dicts
(`manifest.supports.get("platforms")`) keeps working while new code reads the typed fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Literal, TypeAlias, TypeVar

from ..errors import InputError, InternalError
from ..results.schema import from_data, to_data

# Any JSON value (what a format's own facts and a native consumer's section hold: each is declared and checked
# by its backend, `Backend.facts(manifest)` and its `NativeConsumer.check_fields`). At run time the codec takes
# it as it is: what it reads is parsed JSON, a JSON value by construction.
if TYPE_CHECKING:
    JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
else:
    JsonValue = Any
JsonObject: TypeAlias = dict[str, JsonValue]
# One fact of `requires`: a version ("1.13.7"), a version number (an opset), or names (LiteRT's op sets).
RequirementValue: TypeAlias = str | int | list[str]
# One backend option's value as the export used it (exporting.options.Option: int, float, str, bool).
OptionValue: TypeAlias = str | bool | int | float | None
# How a leaf's `param` names the format's parameter: its position among the module's arguments (XLA, IREE)
# or its name (a TF signature key, an ONNX/OpenVINO graph input, a LiteRT signature input).
ParamKind: TypeAlias = Literal["position", "name"]

R = TypeVar("R", bound="JsonRecord")


class JsonRule:
    """What a field's type means in the JSON Schema beyond its Python type, attached with `Annotated`: extra
    keywords (a minimum, a pattern) or a named definition of the schema's `$defs` (`ref`). The codec does not
    read it (typing.get_type_hints drops `Annotated`); exporting.manifest_schema writes it, and each rule is
    also checked by the reader (`check_loaded`), so the schema and the reader agree."""

    def __init__(self, ref: str | None = None, **keywords: Any):
        self.ref, self.keywords = ref, keywords

    def __repr__(self) -> str:
        return f"JsonRule({self.ref!r}, {self.keywords!r})"


# The named value types the manifest's fields share (their $defs in the schema).
Dtype = Annotated[str, JsonRule("dtype")]
Dim = Annotated[int | str, JsonRule("dim")]
RelPath = Annotated[str, JsonRule("relative_path")]
Count = Annotated[int, JsonRule(minimum=0)]
Positive = Annotated[int, JsonRule(minimum=1)]
Name = Annotated[str, JsonRule(minLength=1)]
Sha256 = Annotated[str, JsonRule(pattern="^[0-9a-f]{64}$")]


class JsonRecord(Mapping[str, Any]):
    """A frozen dataclass that is also read-only mapping of the JSON object it writes.

    A field whose value is None is absent from that object (every optional field here defaults to None, the
    key a writer did not give), except those in `_KEEP_NULL`, written as null as writers always did.
    """

    _KEEP_NULL: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object on disk: its fields in order, absent ones left out."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name not in self._KEEP_NULL:
                continue
            out[f.name] = value.to_json() if isinstance(value, JsonRecord) else to_data(value)
        return out

    @classmethod
    def coerce(cls: type[R], value: Any, where: str) -> R:
        """`value` as this record: itself, or a dict a writer built (the boundary where backends and the
        pipeline hand dicts), every key declared and typed; InternalError otherwise (the writer's bug)."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise InternalError(f"{where} | got {type(value).__name__}, expected a {cls.__name__} or a dict")
        declared = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(value) - declared)
        if unknown:
            raise InternalError(f"{where} | got key {unknown[0]!r}, expected one of {', '.join(sorted(declared))} "
                                f"(declare it in {cls.__module__}.{cls.__name__})")
        return from_data(cls, to_data(dict(value)), where, InternalError)

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


@dataclass(frozen=True)
class Supports(JsonRecord):
    """What the artifact accepts (`supports`); compare checks exactly this.

    dims: symbolic dimension -> "any", or the sizes the artifact was built for (the static-size fallback).
    platforms: the platforms the artifact runs on (`cpu`, `cuda`, `tpu`); absent: cpu.
    x64: the artifact needs 64-bit types (jax_enable_x64).
    """

    dims: dict[str, Literal["any"] | list[Positive]] | None = None
    platforms: list[str] | None = None
    x64: bool | None = None

    def check_loaded(self, where: str) -> None:
        """Sizes are >= 1."""
        for name, sizes in (self.dims or {}).items():
            if isinstance(sizes, list) and any(s < 1 for s in sizes):
                refuse(f"{where}.dims.{name} | got {sizes!r}, expected sizes >= 1 or \"any\"")


@dataclass(frozen=True)
class WeightTensor:
    """One lifted weight kept outside the module (`weights.tensors[i]`), in parameter order.

    name: its name in the weights file. source: the dotted path of the closed-over array it is, or null when
        not found. shape: its static shape. dtype: its numpy dtype name.
    """

    name: str
    source: str | None
    shape: list[Count]
    dtype: Dtype

    def check_loaded(self, where: str) -> None:
        """Sizes are >= 0."""
        if any(d < 0 for d in self.shape):
            refuse(f"{where}.shape | got {self.shape!r}, expected sizes >= 0")


@dataclass(frozen=True)
class Weights(JsonRecord):
    """Where the target's weights live (`weights`): baked into the artifact, an external file, or input leaves.

    mode: "baked" (the function closes over most of its weights) or "inputs" (they are input leaves).
    baked_bytes: bytes of the arrays the function closes over. baked_arrays: how many.
    input_bytes: bytes of the input leaves.
    storage: where this artifact keeps the baked weights: "embedded", "external" or "none".
    embedded_bytes: bytes of baked weights inside the model file. external_bytes: bytes outside it.
    file: the external weights file (or directory), relative to the artifact. file_format: its format, in words.
    file_bytes: the size of that file (or of the directory's files).
    tensors: the lifted weights, in the module's parameter order after the leaves (XLA, IREE, SavedModel).
    """

    mode: Literal["baked", "inputs"] | None = None
    baked_bytes: Count | None = None
    baked_arrays: Count | None = None
    input_bytes: Count | None = None
    storage: Literal["embedded", "external", "none"] | None = None
    external_bytes: Count | None = None
    embedded_bytes: Count | None = None
    file: RelPath | None = None
    file_format: str | None = None
    file_bytes: Count | None = None
    tensors: list[WeightTensor] | None = None

    def check_loaded(self, where: str) -> None:
        """Byte counts are >= 0; the file is a relative path that stays inside the artifact."""
        for f in ("baked_bytes", "baked_arrays", "input_bytes", "external_bytes", "embedded_bytes", "file_bytes"):
            value = getattr(self, f)
            if value is not None and value < 0:
                refuse(f"{where}.{f} | got {value!r}, expected a count >= 0")
        if self.file is not None and (not self.file or self.file.startswith("/") or ".." in self.file.split("/")):
            refuse(f"{where}.file | got {self.file!r}, expected a relative path inside the artifact")


def refuse(message: str) -> None:
    """Refuse a record read from a manifest: the codec turns this into the reader's error kind (ArtifactError)."""
    raise InputError(message)

