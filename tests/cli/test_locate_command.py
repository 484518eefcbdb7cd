"""compare --locate: a row that fails parity is located on its own artifact and trial, and the reports get the
'Where parity breaks' section; what the format cannot map is said, never guessed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from multiexport import examples
from multiexport.api import compare
from multiexport.cli.locate_command import compare_locate


def test_compare_locate_examines_the_failing_row_and_adds_the_section(tmp_path, fault_backends):
    target = examples.mlp()
    results = compare(target, backends=["xla", "xla_perturbed"], out_dir=tmp_path, trials=1, bench=None)
    assert results.backends["xla_perturbed"].status.value == "parity-failed"
    config = SimpleNamespace(trials=1, seed=0, tolerances={}, val_ranges={}, dim_sizes={})
    lines: list[str] = []
    (found,) = compare_locate(results, target, config, lines.append)  # the failing row only: xla passes
    answer = found.backends[0]
    assert answer.backend == "xla_perturbed" and answer.failing and answer.recompiled  # XLA's hook, inherited
    # the perturbation (+1e-3 on every output) is ops the reference has not, after its last op: every op the two
    # modules share agrees, and locate says the divergence is in what it could not pair
    assert answer.first is None and "the divergence is in what could not be mapped" in answer.verdict
    assert "op(s) the reference has not (stablehlo.add" in answer.verdict
    written = json.loads((Path(tmp_path) / "locate" / "xla_perturbed" / "locate.json").read_text())
    assert written["trial"] == results.backends["xla_perturbed"].parity.failures[0].trial
    report = (Path(tmp_path) / "report.md").read_text()
    assert "## Where parity breaks" in report and "could not be mapped" in report
    assert any("locate: xla_perturbed fails on trial" in line for line in lines)
