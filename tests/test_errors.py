"""multiexport's own bugs are InternalError (never a verdict about the model), raised where an invariant breaks."""

from __future__ import annotations

import json

import pytest

from multiexport.errors import InternalError, MultiexportError, present
from multiexport.run.worker_io import write_failure


def test_present_returns_a_set_value_even_a_falsy_one():
    assert present(0, "a count") == 0
    assert present("", "a name") == ""


def test_present_raises_an_internal_error_that_is_no_verdict_about_the_model():
    with pytest.raises(InternalError, match=r"multiexport bug: expected a value here \(paired implies live servers\)"):
        present(None, "paired implies live servers")
    assert not issubclass(InternalError, MultiexportError)


def test_a_worker_reports_an_internal_error_as_such_with_its_traceback(tmp_path):
    try:
        present(None, "the worker is started with stdout=PIPE")
    except InternalError as exc:
        write_failure(tmp_path, exc, "run")
    failure = json.loads((tmp_path / "error.json").read_text())
    assert failure["category"] == "internal-error"
    assert "stdout=PIPE" in failure["message"] and "Traceback" in failure["message"]


def test_a_categorized_error_carries_a_status_and_a_category_that_is_none_is_multiexport_s_bug():
    from multiexport.errors import ExportError, RunError
    from multiexport.status import Status

    assert ExportError("x", category="unsupported-op").status is Status.UNSUPPORTED_OP
    assert RunError("x").status is Status.RUN_FAILED and RunError("x").category == "run-failed"
    assert ExportError("x", category=Status.VERSION_SKEW).category == "version-skew"
    # before, a misspelt category became export-failed or run-failed later, silently (Status.parse)
    with pytest.raises(InternalError, match="category 'unsuported-op', expected a Status value"):
        ExportError("x", category="unsuported-op")
