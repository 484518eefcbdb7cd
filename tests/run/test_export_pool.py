"""run/export_pool.py: what a worker left for each export it took becomes that export's outcome."""

from __future__ import annotations

import sys

from multiexport.run.export_pool import ExportJob, _collect
from multiexport.system.process import run_command


def test_a_result_that_does_not_decode_is_an_internal_error_not_a_worker_that_died_early(tmp_path):
    """A worker that ran the export and wrote export.json with a value the reply cannot hold (a float where bytes
    go) ended normally: its row says the result is unreadable, not that the target's code called exit."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "export.json").write_text('{"seconds": 1.0, "cpu_seconds": "fast"}')
    ended = run_command([sys.executable, "-c", "pass"], timeout=60)  # a worker that exited 0
    job = ExportJob("onnx", tmp_path / "onnx", "{}")
    category, reason = _collect([job], {"onnx": work}, ended, 60)["onnx"].failure
    assert category == "internal-error" and "result for onnx does not decode" in reason and "cpu_seconds" in reason
    (work / "export.json").unlink()  # nothing written at all: that worker did end early
    category, reason = _collect([job], {"onnx": work}, ended, 60)["onnx"].failure
    assert category == "export-failed" and "before reporting a result for onnx" in reason
