"""A row is built once from its stages' outcomes, and its status decided in one place (comparison/verdict.py).

Pure: the outcomes are made by hand (the stages that return them run in test_compare.py); what is checked is
the precedence the verdict module documents and that the row carries each stage's facts unchanged.
"""

from __future__ import annotations

import dataclasses

import pytest

from multiexport.comparison.outcomes import Checked, Exported, Failure, RowOutcomes
from multiexport.comparison.row import build_row, build_rows
from multiexport.comparison.verdict import NO_EVIDENCE, decide, judged
from multiexport.results import AccuracyVerdict, BackendResult, Binding, Budget, LeafAccuracy, NativeResult, Status
from tests.report.builders import row as sample_row


def _exported(**changes) -> Exported:
    base = Exported(artifact="/out/xla", manifest=None,  # type: ignore[arg-type]  # the row reads no manifest
                    seconds=1.5, cpu_seconds=2.0, peak_rss_bytes=3,
                    binding=(Binding("x", True, 0),), warnings=("w",), weights={"mode": "baked"},
                    versions={"jax": "0"}, requires={"stablehlo": "1"}, supports={"x64": False},
                    setup={"import_s": 1.0}, artifact_bytes=10, precision_facts=None)
    return dataclasses.replace(base, **changes)


def _checked(passed: bool = True, **changes) -> Checked:
    sample = sample_row(status="ok" if passed else "parity-failed")
    return dataclasses.replace(Checked(bench=sample.bench, parity=sample.parity, evidence=1), **changes)


def test_an_ok_row_carries_every_stage_fact_unchanged():
    row = build_row(RowOutcomes("xla", export=_exported(), check=_checked(notes=("a note",))))
    assert (row.status, row.reason) == (Status.OK, "a note")
    assert row.artifact == "/out/xla" and row.export_seconds == 1.5 and row.export_cpu_seconds == 2.0
    assert row.binding == [Binding("x", True, 0)] and row.warnings == ["w"] and row.export_setup == {"import_s": 1.0}
    assert row.parity is not None and row.parity.passed and row.bench is not None and row.precision == "fp32"
    with pytest.raises(dataclasses.FrozenInstanceError):  # built once: no stage changes it afterwards
        row.status = Status.PARITY_FAILED  # type: ignore[misc]


def test_an_earlier_stage_failure_decides_over_a_later_one():
    gate = Failure("gate", "no-gpu", "no CUDA build")
    export = Failure("export", "converter-error", "op X")
    check = _checked(failure=Failure("check", "crashed", "SIGSEGV"))
    assert decide(RowOutcomes("onnx", failure=gate, export=export, check=check)) == (Status.NO_GPU, "no CUDA build")
    assert decide(RowOutcomes("onnx", export=export, check=check)) == (Status.CONVERTER_ERROR, "op X")
    assert decide(RowOutcomes("onnx", export=_exported(), check=check)) == (Status.CRASHED, "SIGSEGV")
    target = Failure("target", "nondeterministic-target", "two runs differ")
    assert decide(RowOutcomes("onnx", failure=target))[0] is Status.NONDETERMINISTIC_TARGET


def test_a_failed_check_leaves_no_figures_on_the_row_but_keeps_its_native_verdict():
    native = NativeResult("pjrt_c_api", Status.OK)
    row = build_row(RowOutcomes("xla", export=_exported(),
                                check=_checked(failure=Failure("check", "load-failed", "bad"), native=native)))
    assert row.status is Status.LOAD_FAILED and row.bench is None and row.parity is None
    assert row.native is native and row.artifact == "/out/xla"  # the export still happened


def test_an_export_stage_run_failure_is_an_export_failure_and_an_unknown_category_maps_as_status_parse_does():
    assert decide(RowOutcomes("x", export=Failure("export", "run-failed", "r")))[0] is Status.EXPORT_FAILED
    assert decide(RowOutcomes("x", export=_exported(),
                              check=_checked(failure=Failure("check", "weird", "r"))))[0] is Status.RUN_FAILED


def test_no_evidence_then_accuracy_then_parity():
    assert decide(RowOutcomes("x", export=_exported(), check=_checked(evidence=0))) == (Status.RUN_FAILED, NO_EVIDENCE)
    status, reason = decide(RowOutcomes("x", export=_exported(), check=_checked(passed=False)))
    assert status is Status.PARITY_FAILED and reason == sample_row(status="parity-failed").parity.summary()
    leaf = LeafAccuracy("out", cosine=0.5, err_scale=1.0, sqnr_db=3.0, top1=None, top5=None, rows=1,
                        budget=Budget(cos=0.999), failed=["cosine 0.5 < 0.999"])
    beyond = AccuracyVerdict("fp16", [leaf], trials=1)
    # a reduced-precision row is judged by its budget, even when float parity failed or passed
    accuracy = decide(RowOutcomes("x@fp16", export=_exported(), check=_checked(passed=True, accuracy=beyond)))
    assert accuracy[0] is Status.ACCURACY_FAILED
    assert judged(None, None) == (Status.PARITY_FAILED, "no parity verdict")


def test_rows_no_stage_reached_say_so_and_an_interrupted_run_names_them_interrupted():
    outcomes = {"xla": RowOutcomes("xla", export=_exported()), "onnx": RowOutcomes("onnx")}
    rows = build_rows(outcomes, ["onnx", "xla"])
    assert list(rows) == ["onnx", "xla"] and all(r.status is Status.NOT_RUN for r in rows.values())
    assert rows["xla"].artifact == "/out/xla" and rows["onnx"].artifact is None
    stopped = build_rows(outcomes, ["onnx", "xla"], interrupted=True)
    assert {r.status for r in stopped.values()} == {Status.INTERRUPTED}


def test_a_reason_is_kept_as_results_json_keeps_it():
    row = build_row(RowOutcomes("x", export=Failure("export", "converter-error", "\x1b[31mred\x1b[0m \x07bell")))
    assert row.reason.startswith("red ") and "\x07" not in row.reason and "\x1b" not in row.reason
    assert isinstance(row, BackendResult)
