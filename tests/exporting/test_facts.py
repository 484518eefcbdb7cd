"""A format's facts (manifest.json's `format`) are typed: written through the backend's dataclass, read back
through `Backend.facts`, refused in one line naming the field when a manifest's fact is missing or of the
wrong type, and a backend that returns facts of another type is multiexport's bug, not the user's."""

from __future__ import annotations

import dataclasses
import json

import pytest

from multiexport import ArtifactError, examples
from multiexport.backends.xla import XlaBackend
from multiexport.backends.xla.facts import XlaFacts
from multiexport.errors import InternalError
from multiexport.exporting import ExportOptions
from multiexport.exporting.facts import ExportSetup, FormatFacts, StageMade
from multiexport.exporting.registry import backend_class, names
from multiexport.leaves import build_signature

from ..conftest import assert_matches_jit, run_cli


@pytest.fixture(scope="module")
def seed_xla(tmp_path_factory):
    target = examples.seed()
    sig = build_signature(target)
    art = XlaBackend().export(target.fn, sig, tmp_path_factory.mktemp("facts") / "xla", ExportOptions())
    return target, sig, art


def _edited_copy(art, tmp_path, edit):
    """A copy of the artifact whose manifest's `format` was changed by `edit` (manifest.json is not in the
    inventory, so the copy is what a hand-edited manifest would be)."""
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(art.directory, copy)
    data = json.loads((copy / "manifest.json").read_text())
    edit(data["format"])
    (copy / "manifest.json").write_text(json.dumps(data))
    return copy


def test_every_backend_declares_its_own_facts_type():
    """Each built-in format documents its facts in a dataclass of its own, derived from the core's."""
    types = {name: backend_class(name).facts_type for name in names()}
    for name, kind in types.items():
        assert issubclass(kind, FormatFacts) and kind is not FormatFacts, name
        assert dataclasses.is_dataclass(kind)
        for f in dataclasses.fields(kind):  # every fact documented in the class docstring
            assert f.name in (kind.__doc__ or "") or f.name in (FormatFacts.__doc__ or ""), (name, f.name)
    assert len(set(types.values())) == len(types)


def test_the_facts_read_back_typed_and_whole(seed_xla):
    _, _, art = seed_xla
    facts = XlaBackend().facts(art.manifest)
    assert isinstance(facts, XlaFacts)
    assert [a.kind for a in facts.module_args] == ["leaf"]  # the seed's main takes foo.baz alone
    assert facts.module_results == ["out"] and facts.platforms == ["cpu"]
    assert facts.to_json() == art.manifest.format


@pytest.mark.parametrize("edit, field, expected", [
    (lambda f: f.update(module_args="foo.baz"), "format.module_args", "expected a list"),
    (lambda f: f.update(nr_devices="1"), "format.nr_devices", "expected an integer"),
    (lambda f: f["module_args"][0].update(kind=7), "format.module_args[0].kind", "expected a string"),
    (lambda f: f.pop("platforms"), "format", "has no 'platforms'"),
    (lambda f: f.update(stage={"backend": "onnx"}), "format.stage", "has no 'made'"),
])
def test_a_malformed_fact_is_one_line_naming_it(seed_xla, tmp_path, edit, field, expected):
    _, _, art = seed_xla
    copy = _edited_copy(art, tmp_path, edit)
    with pytest.raises(ArtifactError, match=expected) as caught:
        XlaBackend().load(copy)
    assert f"| {field} |" in str(caught.value) and str(copy) in str(caught.value)
    proc = run_cli("run", copy)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and f"{field} | " in proc.stderr


def test_a_fact_a_newer_multiexport_added_is_ignored(seed_xla, tmp_path):
    """Forward compatible: an unknown key in `format` is not a reason to refuse an artifact."""
    target, sig, art = seed_xla
    copy = _edited_copy(art, tmp_path, lambda f: f.update(added_later={"any": [1, 2]}))
    runner = XlaBackend().load(copy)
    feed = sig.example_feed()
    assert_matches_jit(target, sig, runner(feed), feed)
    runner.close()


def test_the_core_facts_are_written_only_when_set():
    facts = XlaFacts(weight_copies=0, weights="none", platforms=["cpu"], module_args=[], module_results=["out"],
                     nr_devices=1, uses_shape_polymorphism=False, module_attributes={})
    assert "stage" not in facts.to_json() and "setup" not in facts.to_json()
    both = facts.with_core(StageMade("onnx", "exported for this artifact"), ExportSetup(1.5, "plugin import"))
    data = both.to_json()
    assert data["stage"] == {"backend": "onnx", "made": "exported for this artifact", "reused_from": None}
    assert data["setup"] == {"seconds": 1.5, "what": "plugin import"}
    assert XlaFacts.from_json(data, "Artifact 't'") == both


def test_a_backend_returning_facts_of_another_type_is_an_internal_error(tmp_path):
    """The export checks the facts' type against the backend's declaration: a wrong one is our bug (exit 70
    on the command line), caught before any manifest is written."""

    class Mistyped(XlaBackend):
        name = "xla"

        def _export_impl(self, job):
            made = super()._export_impl(job)
            return dataclasses.replace(made, format=FormatFacts())

    target = examples.seed()
    with pytest.raises(InternalError, match="expected its facts_type XlaFacts"):
        Mistyped().export(target.fn, build_signature(target), tmp_path / "xla", ExportOptions())
    assert not (tmp_path / "xla" / "manifest.json").exists()
