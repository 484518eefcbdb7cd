"""benchmarks/compare_time.py: which real models `--models` selects, and that a selection naming no model stops
before any compare runs. No compare runs here: `run_one` is replaced by one that fails the test."""

from __future__ import annotations

import re

import pytest

from benchmarks import compare_time
from benchmarks.compare_time import DEFAULT_MODELS, KINDS, select_models
from benchmarks.real_models import REAL_MODELS


def _names(spec: str) -> list[str]:
    return [m.name for m in select_models(spec)]


def _tagged(tag: str) -> list[str]:
    return [m.name for m in REAL_MODELS if tag in m.tags]


def test_tags_and_names_mix_in_one_list():
    assert _names("quick,haiku_resnet") == [*_tagged("quick"), "haiku_resnet"]
    assert _names("haiku_resnet, eqx") == ["haiku_resnet", *_tagged("eqx")]
    assert _names(",".join(DEFAULT_MODELS)) == list(DEFAULT_MODELS)


def test_each_model_is_selected_once_in_the_order_given():
    assert _names("linen_mlp,quick,linen_mlp") == _tagged("quick")  # linen_mlp is quick, and first
    assert _names("haiku_resnet,haiku") == _tagged("haiku")
    assert _names("eqx_mlp,all") == ["eqx_mlp", *(m.name for m in REAL_MODELS if m.name != "eqx_mlp")]


@pytest.mark.parametrize("spec", ["", ",", " , "])
def test_a_selection_naming_no_model_is_one_line_naming_what_exists(spec):
    with pytest.raises(SystemExit) as caught:
        select_models(spec)
    message = str(caught.value.code)
    assert "\n" not in message and f"--models {spec!r}: names no model" in message
    assert "linen_mlp" in message and "quick" in message


def test_an_unknown_word_is_named_with_what_exists():
    with pytest.raises(SystemExit) as caught:
        select_models("quick,nope,haiku_resnet")
    message = str(caught.value.code)
    assert "\n" not in message and "unknown name(s) or tag(s) nope;" in message
    assert "haiku_resnet" in message and "symbolic-batch" in message


@pytest.mark.parametrize("spec", [",", "nope"])
def test_main_stops_before_any_compare(spec, tmp_path, monkeypatch):
    def run_one(*args, **kwargs):
        raise AssertionError("a compare ran")

    monkeypatch.setattr(compare_time, "run_one", run_one)
    with pytest.raises(SystemExit) as caught:
        compare_time.main(["--models", spec, "--out", str(tmp_path / "out")])
    assert "--models" in str(caught.value.code)
    assert not (tmp_path / "out").exists()


def test_the_docstring_names_the_kinds_the_code_has():
    doc = " ".join((compare_time.__doc__ or "").split())
    named = re.search(r"kind of step \(([^)]*)\)", doc)
    assert named is not None
    words = set(re.findall(r"[a-z]+", named.group(1)))
    kinds = {kind for kind, _ in KINDS}
    assert kinds <= words and "other" in words and "reports" not in words
    assert words - kinds <= {"and", "other", "for", "a", "step", "none", "of", "these", "names"}


@pytest.mark.parametrize("sweep", [False, True])
def test_each_model_is_timed_at_its_batch_sweep_only_when_asked(sweep, tmp_path, monkeypatch):
    """By default a model makes the seed's request (one timed size); --batch-sweep adds the zoo's sizes."""
    asked: dict[str, list[str]] = {}

    def run_one(target, flags, out, timeout):
        asked[target] = list(flags)
        out.mkdir(parents=True)
        return {"target": target, "exit": 0, "wall_s": 1.0, "kinds": {}, "steps": []}

    monkeypatch.setattr(compare_time, "run_one", run_one)
    compare_time.main(["--models", "linen_cnn", "--out", str(tmp_path / "out"), *(["--batch-sweep"] if sweep else [])])
    assert asked["multiexport.examples:seed"] == []
    model_flags = asked["benchmarks.real_models:linen_cnn"]
    assert ("--batch-sizes" in model_flags) is sweep
    assert ("batch sweep" in (tmp_path / "out" / "compare_time.md").read_text()) is sweep


def test_a_runs_cpu_seconds_count_the_processes_its_process_started(tmp_path):
    """The CPU figure of a run is its whole tree's: a grandchild that burns 0.3 CPU s is in it."""
    import subprocess
    import sys

    burn = "import time\nwhile time.process_time() < 0.3: pass"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)"
    before = compare_time.children_cpu_s()
    subprocess.run([sys.executable, "-c", child], check=True)
    assert compare_time.children_cpu_s() - before >= 0.3
