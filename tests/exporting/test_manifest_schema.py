"""manifest.json's JSON Schema (multiexport/exporting/manifest.schema.json) against the reader it documents.

A C++ or Go consumer validates manifests with the schema; multiexport reads them with its own checks
(exporting/manifest.py). The schema is generated from the dataclasses (exporting/manifest_schema.py) and the
shipped file must be the generated one. These tests keep the two in agreement: the schema names exactly the
dataclass fields with their docstrings' descriptions, its dtypes are exactly those the reader accepts, every
malformed manifest the reader refuses the schema refuses too, and every manifest a real export writes is valid
(tests/exporting/test_contract.py validates the artifacts of every backend and case; test_manifest.py one real
export per installed backend).
"""

from __future__ import annotations

import copy
import dataclasses
import json

import ml_dtypes
import numpy as np
import pytest

from multiexport import ArtifactError
from multiexport.exporting.manifest import SCHEMA_PATH, LeafBinding, Manifest

from .test_manifest import MALFORMED, _base

jsonschema = pytest.importorskip("jsonschema", reason="the test extra brings jsonschema: pip install -e '.[test]'")


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validator():
    jsonschema.Draft202012Validator.check_schema(schema())
    return jsonschema.Draft202012Validator(schema())


def errors(document) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(document)]


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_with_the_package():
    jsonschema.Draft202012Validator.check_schema(schema())
    import tomllib

    from tests.conftest import REPO

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert SCHEMA_PATH.name in data["multiexport.exporting"], "a wheel would ship no schema"


def test_the_schema_names_exactly_the_manifest_fields_and_their_required_ones():
    s = schema()
    fields = dataclasses.fields(Manifest)
    assert set(s["properties"]) == {f.name for f in fields}
    no_default = {f.name for f in fields if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING}
    assert set(s["required"]) == no_default | {"schema"}
    leaf = s["$defs"]["leaf"]
    assert set(leaf["properties"]) == {f.name for f in dataclasses.fields(LeafBinding)}
    assert set(leaf["required"]) == {f.name for f in dataclasses.fields(LeafBinding)
                                     if f.default is dataclasses.MISSING}


def test_the_schema_knows_every_native_consumer_and_says_what_each_requires():
    from multiexport.exporting.native_section import CONSUMERS

    native = schema()["$defs"]["native"]
    assert set(native["properties"]["consumer"]["enum"]) == set(CONSUMERS.values())
    assert {rule["if"]["properties"]["consumer"]["const"] for rule in native["allOf"]} == set(CONSUMERS.values())


def test_the_schema_dtypes_are_exactly_the_names_the_reader_accepts():
    candidates = {np.dtype(t).name for t in np.sctypeDict.values()} | {
        n for n in dir(ml_dtypes) if isinstance(getattr(ml_dtypes, n), type) and not n.startswith("_")}
    accepted = set()
    for name in candidates:
        try:
            LeafBinding.from_json({"name": "x", "alias": "x", "shape": [], "dtype": name}, "leaf")
        except ArtifactError:
            continue
        accepted.add(name)
    assert "bfloat16" in accepted and "float8_e4m3fn" in accepted and "float128" not in accepted
    assert set(schema()["$defs"]["dtype"]["enum"]) == accepted


@pytest.mark.parametrize("dim", ["b", "2*b", "b + 1", "floordiv(b, 2)", "max(b, 1)", "mod(b, 2) - 1"])
def test_jax_shape_expressions_are_dims_for_both(dim):
    data = copy.deepcopy(_base())
    data["inputs"][0]["shape"] = [dim, 3]
    assert errors(data) == []
    assert Manifest.from_json(data).inputs[0].shape == [dim, 3]


def test_a_valid_manifest_passes_and_each_malformed_one_the_reader_refuses_fails():
    assert errors(_base()) == []
    for mutate, message in MALFORMED:
        data = copy.deepcopy(_base())
        mutate(data)
        assert errors(data), f"the schema accepts a manifest the reader refuses with {message!r}"


@pytest.mark.parametrize("mutate", [
    lambda d: d["inputs"][0].update(dtype="float128"),
    lambda d: d["inputs"][0].update(shape=["-"]),
    lambda d: d.update(inventory_sha256={"model.bin": "XYZ"}),
    lambda d: d.update(native={"schema": "multiexport.native/1", "consumer": "pjrt_c_api", "args": [],
                               "results": [], "symbolic_dims": [], "program": "/abs/model.mlirbc", "format": "mlir",
                               "compile_options": "c.pb", "platforms": ["cpu"], "compilable": True}),
    lambda d: d.update(native={"schema": "multiexport.native/1", "consumer": "iree_tools", "args": [], "results": [],
                               "symbolic_dims": [], "tools": {"run": "/bin/sh"}, "run_args": [],
                               "benchmark_args": []}),
    lambda d: d.update(native={"schema": "multiexport.native/1", "consumer": "tf_c_api", "symbolic_dims": [],
                               "export_dir": ".", "tags": ["serve"], "signature": "s", "results": [],
                               "args": [{"kind": "leaf", "leaf": "x", "index": 0, "file": "../x.npy", "shape": [],
                                         "dtype": "float32"}]}),
], ids=["dtype", "dim", "sha256", "absolute-program", "iree-tool", "leaf-file"])
def test_the_schema_refuses_what_a_consumer_must_not_trust(mutate):
    data = copy.deepcopy(_base())
    mutate(data)
    assert errors(data)
    reader_refuses(data)


def reader_refuses(data) -> None:
    """Assert that multiexport's own reader (manifest fields, then the native section) refuses `data`."""
    from multiexport import ArtifactError
    from multiexport.exporting.native_section import check_section

    try:
        manifest = Manifest.from_json(data)
        if manifest.native is not None:
            check_section(manifest, SCHEMA_PATH.parent)
    except ArtifactError:
        return
    raise AssertionError("multiexport's reader accepts a manifest its schema refuses")


def test_the_shipped_schema_is_the_one_generated_from_the_dataclasses():
    from multiexport.exporting.manifest_schema import render

    assert SCHEMA_PATH.read_text() == render(), (
        "manifest.schema.json is not the schema the dataclasses generate: run "
        "`python -m multiexport.exporting.manifest_schema` and commit the file")


def test_the_generated_schema_takes_each_description_from_the_field_docs_and_follows_a_new_field():
    from multiexport.exporting.manifest_native import PjrtSection
    from multiexport.exporting.manifest_schema import _Generator, field_docs, generate

    s = generate()
    assert s["properties"]["keep_unused"]["description"] == "whether every input leaf was forced to be a parameter."
    assert s["$defs"]["leaf"]["properties"]["param"]["description"] == field_docs(LeafBinding)["param"]
    assert "position 0" in field_docs(LeafBinding)["param"]
    assert field_docs(PjrtSection)["compile_options"] == "the serialized CompileOptionsProto."
    # shared docs ("a, b: text") and several fields on one line ("x: text. y: text")
    assert field_docs(Manifest)["inputs"] == field_docs(Manifest)["outputs"]

    @dataclasses.dataclass(frozen=True)
    class Added:
        """A record.

        count: how many. label: its name.
        """

        count: int
        label: str | None = None

    schema = _Generator().record(Added, ref=False)
    assert schema["required"] == ["count"] and schema["properties"] == {
        "count": {"type": "integer", "description": "how many."},
        "label": {"type": ["string", "null"], "description": "its name."}}
