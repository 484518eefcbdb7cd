"""manifest.schema.json generated from the dataclasses it describes: `python -m multiexport.exporting.manifest_schema`.

Why: the JSON Schema consumers in other languages validate manifests with was written by hand beside the
dataclasses the reader builds, so a new field had to be added twice. Here every record (Manifest, LeafBinding,
the typed sections of exporting.manifest_records, the native section's records of exporting.manifest_native,
PrecisionFacts) becomes a `$defs` entry with its fields' types, which fields are required, and each field's
description taken from the record's docstring (`name: what it is`); what a Python type cannot say (a minimum, a
pattern, a named type such as a dtype) comes from the `JsonRule` its type carries. The shipped file is this
output: tests/exporting/test_manifest_schema.py regenerates it and compares (`--check` does the same here).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from .manifest import MANIFEST_SCHEMA, SCHEMA_PATH, LeafBinding, Manifest
from .manifest_native import NATIVE_SECTIONS, IreeTools, NativeSection
from .manifest_records import JsonRule
from .precision import PRECISIONS, CalibrationFacts, PrecisionFacts

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
# Records that take no key beyond their fields (a consumer's schema refuses a misspelt one); the others ignore
# keys a newer multiexport added, as the reader does.
_CLOSED = (Manifest, LeafBinding, IreeTools)
_DEF_NAMES = {LeafBinding: "leaf", PrecisionFacts: "precision", CalibrationFacts: "calibration"}
# Fields whose rule lives in a module this generator does not type (PrecisionFacts is read with check_loaded).
_FIELD_RULES: dict[tuple[type, str], dict[str, Any]] = {
    (PrecisionFacts, "precision"): {"enum": list(PRECISIONS)},
    (CalibrationFacts, "samples"): {"minimum": 1},
}
_PATH_CHARS = r"[A-Za-z0-9_+\-*/^(), ]"  # manifest._DIM's characters; a dim also has a letter (manifest._is_dim)


def generate() -> dict[str, Any]:
    """The manifest's JSON Schema (draft 2020-12) as a JSON-ready dict."""
    gen = _Generator()
    root = gen.record(Manifest, ref=False)
    root["required"] = ["schema", *[r for r in root["required"] if r != "schema"]]
    defs = {name: gen.defs[name] for name in sorted(gen.defs)}
    return {"$schema": _DRAFT, "title": f"multiexport manifest.json (schema {MANIFEST_SCHEMA})",
            "description": "The one file in every artifact directory written by `multiexport export`; generated "
                           "from multiexport's dataclasses (multiexport/exporting/manifest_schema.py), field by "
                           "field in docs/manifest.md. multiexport's own reader checks the same rules and, in "
                           "addition, that every listed file exists inside the directory with its recorded size "
                           "and sha256.",
            **root, "$defs": defs}


def render() -> str:
    """The schema as the shipped file's text."""
    return json.dumps(generate(), indent=1, ensure_ascii=False) + "\n"


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its description in `cls`'s docstring, where the fields are documented as `name: text`
    (several per line after a full stop, or `a, b: text` for fields that share one)."""
    doc = (cls.__doc__ or "").split("\n\n", 1)
    body = "\n" + (doc[1] if len(doc) > 1 else "")
    names = sorted((f.name for f in dataclasses.fields(cls)), key=len, reverse=True)
    one = "|".join(re.escape(n) for n in names)
    head = re.compile(rf"(?:(?<=\n)|(?<=\. ))\s*((?:{one})(?:, (?:{one}))*): ")
    found: dict[str, str] = {}
    marks = list(head.finditer(body))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        text = " ".join(body[mark.end():end].split())
        for name in mark.group(1).split(", "):
            found.setdefault(name, text)
    return found


def summary(cls: type) -> str:
    """The first paragraph of `cls`'s docstring, on one line."""
    return " ".join((cls.__doc__ or "").split("\n\n", 1)[0].split())


class _Generator:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def of(self, hint: Any) -> dict[str, Any]:
        """The schema of a type hint."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Annotated:
            base = self.of(args[0])
            for rule in args[1:]:
                if isinstance(rule, JsonRule):
                    base = self.named(rule.ref) if rule.ref else {**base, **rule.keywords}
            return base
        if origin in (typing.Union, types.UnionType):
            options = [self.of(a) for a in args]
            if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
                return {"type": [o["type"] for o in options]}
            return {"anyOf": options}
        if origin is typing.Literal:
            return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
        if origin in (list, tuple):
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin is dict:
            item = self.of(args[1]) if args else {}
            return {"type": "object", **({"additionalProperties": item} if item else {})}
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return self.record(hint)
        simple = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
        if hint in simple:
            return {"type": simple[hint]}
        return {}  # Any: any JSON value

    def record(self, cls: type, ref: bool = True) -> dict[str, Any]:
        """A dataclass as an object schema: a `$ref` to its `$defs` entry (made once), or the schema itself."""
        name = _DEF_NAMES.get(cls) or _snake(cls.__name__)
        if ref and name in self.defs:
            return {"$ref": f"#/$defs/{name}"}
        if ref:
            self.defs[name] = {}  # a record that refers to itself finds its name
        hints = typing.get_type_hints(cls, include_extras=True)
        docs = field_docs(cls)
        properties, required = {}, []
        for f in dataclasses.fields(cls):
            schema = {**self.of(hints[f.name]), **_FIELD_RULES.get((cls, f.name), {})}
            if f.name in docs:
                schema["description"] = docs[f.name]
            properties[f.name] = schema
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        out: dict[str, Any] = {"type": "object", "description": summary(cls), "required": required,
                               "properties": properties}
        if cls in _CLOSED:
            out["additionalProperties"] = False
        out.update(getattr(cls, "SCHEMA_RULES", {}))  # rules across fields, declared beside the record
        if not ref:
            return out
        self.defs[name] = out
        return {"$ref": f"#/$defs/{name}"}

    def named(self, name: str) -> dict[str, Any]:
        """A `$ref` to one of the shared definitions (dtype, dim, relative_path, native), made once."""
        if name not in self.defs:
            self.defs[name] = {}
            self.defs[name] = getattr(self, f"_def_{name}")()
        return {"$ref": f"#/$defs/{name}"}

    def _def_dtype(self) -> dict[str, Any]:
        return {"enum": accepted_dtypes(),
                "description": "numpy / ml_dtypes dtype name; each runtime's element type for it: "
                               "docs/manifest.md#dtypes"}

    def _def_dim(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "integer", "minimum": 0},
                          {"type": "string", "pattern": f"^{_PATH_CHARS}*[A-Za-z]{_PATH_CHARS}*$"}],
                "description": "a static size, or a symbolic dimension: its name ('b') or an expression of names "
                               "('2*b')"}

    def _def_relative_path(self) -> dict[str, Any]:
        return {"type": "string", "minLength": 1, "not": {"anyOf": [{"pattern": "^/"}, {"pattern": "(^|/)\\.\\.(/|$)"}]},
                "description": "a path relative to the artifact directory that stays inside it (no leading '/', "
                               "no '..')"}

    def _def_native(self) -> dict[str, Any]:
        """The native section: the common record, then per consumer (if consumer is X) its own fields."""
        base = self.record(NativeSection, ref=False)
        base["properties"]["consumer"] = {"enum": [_consumer(c) for c in NATIVE_SECTIONS],
                                          "description": base["properties"]["consumer"].get("description", "")}
        rules = []
        common = {f.name for f in dataclasses.fields(NativeSection)}
        for cls in NATIVE_SECTIONS:
            own = self.record(cls, ref=False)
            rules.append({"if": {"required": ["consumer"], "properties": {"consumer": {"const": _consumer(cls)}}},
                          "then": {"description": own["description"], "required": list(cls._REQUIRED),  # type: ignore[attr-defined]
                                   "properties": {k: v for k, v in own["properties"].items() if k not in common}}})
        return {**base, "allOf": rules}


def accepted_dtypes() -> list[str]:
    """Every numpy and ml_dtypes dtype name the manifest reader accepts for a leaf, sorted."""
    import ml_dtypes
    import numpy as np

    candidates = {np.dtype(t).name for t in np.sctypeDict.values()} | {
        n for n in dir(ml_dtypes) if isinstance(getattr(ml_dtypes, n), type) and not n.startswith("_")}
    accepted = []
    for name in sorted(candidates):
        try:
            LeafBinding.from_json({"name": "x", "alias": "x", "shape": [], "dtype": name}, "leaf")
        except ArtifactError:
            continue
        accepted.append(name)
    return accepted


def _consumer(cls: type) -> str:
    return typing.get_args(typing.get_type_hints(cls)["consumer"])[0]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def main(argv: list[str] | None = None) -> int:
    """Write the generated schema to multiexport/exporting/manifest.schema.json (or, with --check, say whether
    the shipped file is the generated one: exit 1 when it is not)."""
    parser = argparse.ArgumentParser(prog="python -m multiexport.exporting.manifest_schema", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--out", type=Path, default=SCHEMA_PATH, help="where to write (default: the shipped file)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print(f"{args.out}: {'the generated schema' if same else 'differs from the generated schema'}")
        return 0 if same else 1
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

