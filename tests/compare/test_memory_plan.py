"""The compare's memory plan: decided before any export, a backend that cannot fit even alone is refused with
one line, the early workers close when the exports need their memory, the others run."""

from __future__ import annotations

import json
import re

import pytest

from multiexport.comparison.memory_plan import (
    AVAILABLE_ENV,
    FOOTPRINT_ENV,
    Footprint,
    Footprints,
    available_now,
    footprints,
    plan_memory,
)
from multiexport.errors import UsageError

from ..conftest import run_cli

GIB = 1 << 30
GROUPS = [["onnx", "openvino"], ["savedmodel", "litert"], ["xla"], ["iree"]]
NAMES = [n for g in GROUPS for n in g]


def _plan(weights, available, early=None, footprint=None, groups=GROUPS):
    return plan_memory(int(weights), None if available is None else int(available), 2 * GIB, groups,
                       early or {}, footprint or {}, "MemAvailable")


def test_a_small_model_beside_its_early_workers_overlaps_every_export():
    plan = _plan(1 * GIB, 16 * GIB, early={"jax": 7 * GIB // 2, "xla": GIB // 2})  # the reference grown to its footprint
    assert plan.export_need["xla"] == 4 * GIB  # 3x the weights + 1 GiB
    assert not plan.refused and not plan.close_early
    assert plan.exports_at_once == 4  # 16 GiB / 4 GiB, and there are 4 groups
    assert plan.to_json()["exports_at_once"] == 4


def test_fewer_exports_at_once_when_memory_allows_fewer():
    plan = _plan(1 * GIB, 9 * GIB)
    assert plan.exports_at_once == 2 and not plan.close_early and not plan.refused


def test_the_early_workers_close_when_only_their_memory_lets_the_largest_export_fit():
    # 4 GiB of weights: an export needs 13 GiB; the reference worker (1 GiB now) will still grow to 10.75 GiB
    early = {"jax": 1 * GIB, "xla": GIB // 2}
    plan = _plan(4 * GIB, 12 * GIB, early=early)
    assert plan.close_early and plan.exports_at_once == 1 and not plan.refused
    assert "the early workers close first" in plan.summary()
    kept = _plan(4 * GIB, 30 * GIB, early=early)
    assert not kept.close_early  # beside them it fits: they stay


def test_a_backend_that_cannot_fit_even_alone_is_refused_with_one_line_before_any_export():
    plan = _plan(4 * GIB, int(9.8 * GIB), groups=[["openvino"]])
    line = plan.refused["openvino"]
    assert line.startswith("openvino | export needs ~13.0 GiB (3x the 4.0 GiB weights + 1.0 GiB), 9.8 GiB available")
    assert "free 3.2 GiB more memory" in line and "\n" not in line
    assert plan.exports_at_once == 0 and "not started: openvino" in plan.summary()


def test_closing_the_early_workers_counts_before_refusing():
    plan = _plan(4 * GIB, 12 * GIB, early={"jax": 2 * GIB}, groups=[["xla"]])
    assert not plan.refused and plan.close_early  # 12 + 2 GiB >= 13 GiB, once the reference worker is closed


def test_a_format_measured_to_need_more_is_refused_while_the_others_run():
    heavy = {"openvino": Footprints(export=Footprint(5.0, GIB))}
    plan = _plan(2 * GIB, 10 * GIB, footprint=heavy)
    assert set(plan.refused) == {"openvino"} and "5x the 2.0 GiB weights" in plan.refused["openvino"]
    assert plan.exports_at_once == 1  # 7 GiB each for the others


def test_a_runner_that_needs_more_than_its_export_is_what_the_line_names():
    big_runner = {"xla": Footprints(runner=Footprint(6.0, GIB))}
    plan = _plan(2 * GIB, 10 * GIB, footprint=big_runner, groups=[["xla"]])
    assert plan.refused["xla"].startswith("xla | its runner needs ~13.0 GiB")


def test_the_paired_prediction_is_sequential_when_the_runners_do_not_fit_together():
    assert _plan(1 * GIB, 10 * GIB).sequential  # 7 runners x 2.75 GiB + the reference
    assert not _plan(1 * GIB // 1024, 10 * GIB).sequential


def test_unknown_available_memory_limits_nothing():
    plan = _plan(4 * GIB, None)
    assert not plan.refused and not plan.close_early and plan.exports_at_once == len(GROUPS)
    assert "unknown" in plan.summary()


def test_the_environment_replaces_the_figures_and_a_bad_value_is_one_line(monkeypatch):
    from multiexport.exporting.registry import backend_class

    monkeypatch.setattr(backend_class("xla"), "export_memory", None)  # the plan's defaults, not xla's measured ones
    monkeypatch.setattr(backend_class("xla"), "runner_memory", None)
    monkeypatch.setenv(AVAILABLE_ENV, str(3 * GIB))
    assert available_now() == (3 * GIB, f"${AVAILABLE_ENV}")
    monkeypatch.setenv(AVAILABLE_ENV, "8G")
    with pytest.raises(UsageError, match=f"{AVAILABLE_ENV} \\| got '8G', expected a number of bytes"):
        available_now()
    monkeypatch.delenv(AVAILABLE_ENV)
    assert available_now()[1] == "MemAvailable"
    monkeypatch.setenv(FOOTPRINT_ENV, "openvino=4x+1.5")
    got = footprints(["xla", "openvino"])
    assert got["openvino"].export == Footprint(4.0, int(1.5 * GIB)) and got["xla"] == Footprints()
    monkeypatch.setenv(FOOTPRINT_ENV, "openvino=4")
    with pytest.raises(UsageError, match="expected NAME=FACTORx\\+GIB"):
        footprints(["openvino"])
    for bad in ("onnx=1.2.3x+1", "onnx=.x+1", "onnx=2x+."):  # the pattern lets them through; float() does not
        monkeypatch.setenv(FOOTPRINT_ENV, bad)
        with pytest.raises(UsageError, match=f"got '{re.escape(bad)}', expected NAME=FACTORx\\+GIB"):
            footprints(["onnx"])
    monkeypatch.setenv(FOOTPRINT_ENV, "onxx=4x+1")  # a misspelt name left onnx's footprint at its default
    with pytest.raises(UsageError, match="'onxx' names no backend"):
        footprints(["onnx"])
    monkeypatch.setenv(FOOTPRINT_ENV, "iree@fp16=4x+1")  # a variant of a backend this compare does not run: kept
    assert footprints(["iree@fp16", "onnx"])["iree@fp16"].export == Footprint(4.0, GIB)


def test_a_backend_declares_its_own_measured_footprints_and_the_environment_overrides_them(monkeypatch):
    from multiexport.exporting.registry import backend_class

    monkeypatch.delenv(FOOTPRINT_ENV, raising=False)
    monkeypatch.setattr(backend_class("iree"), "export_memory", (7.0, 0.75), raising=False)
    monkeypatch.setattr(backend_class("iree"), "runner_memory", None)
    monkeypatch.setattr(backend_class("xla"), "export_memory", None)
    monkeypatch.setattr(backend_class("xla"), "runner_memory", None)
    got = footprints(["iree", "iree@fp16", "xla"])
    assert got["iree"].export == Footprint(7.0, int(0.75 * GIB)) == got["iree@fp16"].export
    assert got["iree"].runner == Footprints().runner and got["xla"] == Footprints()
    monkeypatch.setenv(FOOTPRINT_ENV, "iree=2x+1")
    assert footprints(["iree"])["iree"].export == Footprint(2.0, GIB)


def test_a_compare_refuses_what_memory_cannot_hold_closes_its_early_workers_and_runs_the_rest(tmp_path):
    # "available": 6 GiB, a few KiB under xla's export need (6 GiB + 3x the weights, given), so beside the early
    # workers it does not fit whatever they hold, and with them closed (their MiB freed) it does; onnx, given 1x
    # the weights + 8 GiB, cannot fit even alone. Not just over the need: the plan lets the reference grow to its
    # 768 MiB footprint. Far above the paired workers' own check (three runtimes of 768 MiB within 60% of what
    # was available before them, less what this process grew by meanwhile: importing JAX and building the
    # target from an empty build cache grew it by ~300 MiB, which closed them before the memory plan saw them)
    out = tmp_path / "o"
    available = 6 * GIB
    proc = run_cli("compare", "multiexport.examples:mlp", "--backends", "xla,onnx", "--out-dir", out, "--trials", "1",
                   "--bench-time", "0.05", env={AVAILABLE_ENV: str(available), FOOTPRINT_ENV: "onnx=1x+8,xla=3x+6"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    data = json.loads((out / "results.json").read_text())
    onnx = data["backends"]["onnx"]
    assert onnx["status"] == "insufficient-memory", onnx
    assert re.match(r"onnx \| export needs ~8\.0 GiB \(1x the \d+ KiB weights \+ 8\.0 GiB\), \d\.\d GiB available",
                    onnx["reason"]), onnx["reason"]
    assert not (out / "onnx").exists()  # refused before any export: nothing written for it
    memory = data["memory"]
    assert memory["refused"] == {"onnx": onnx["reason"]}
    assert memory["available_bytes"] == available and memory["source"] == f"${AVAILABLE_ENV}"
    assert memory["close_early"] and memory["early_rss_bytes"].get("jax", 0) > 0, memory
    said = " ".join((proc.stdout + proc.stderr).split())  # the terminal wraps long lines
    assert said.count("memory plan:") == 1 and "the early workers close first" in said, said
    assert "not started: onnx" in said
    xla = data["backends"]["xla"]
    assert xla["status"] == "ok" and xla["bench"] is not None
    assert data["pairing"]["mode"] == "paired"  # the reference and the runner started again to time
