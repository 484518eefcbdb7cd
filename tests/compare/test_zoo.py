"""The benchmark zoo runner: combined results, the matrix, and its regression gate."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

from benchmarks.__main__ import diff_zoo, matrix
from benchmarks.zoo import ZOO, select

from ..conftest import REPO


def test_zoo_covers_the_cases_users_hit():
    names = {m.name for m in ZOO}
    assert {"seed", "mlp", "cnn", "transformer", "embedding", "mlp_bf16", "mlp_dynamic"} <= names
    assert {m.name for m in select(quick=True)} < names
    assert any(m.batch_sizes for m in select(quick=True))  # the quick run still sweeps a symbolic batch


def test_quick_zoo_run_writes_results_and_matrix_and_gates(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks", "--quick", "--models", "seed,mlp_dynamic", "--backends", "xla",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    combined = json.loads((tmp_path / "zoo-results.json").read_text())
    assert combined["schema"] == "multiexport.zoo/1" and set(combined["models"]) == {"seed", "mlp_dynamic"}
    table = (tmp_path / "zoo-matrix.md").read_text()
    assert table.splitlines()[0] == "| model | xla |" and "| mlp_dynamic | ok, err 0.0e+00, p50" in table

    # the same results against themselves: no regression
    assert diff_zoo(combined, combined, 2.0, 10.0).exit_code == 0

    def slowed(factor, models):
        out = copy.deepcopy(combined)
        for model in models:
            for size in out["models"][model]["backends"]["xla"]["bench"]["sizes"]:
                latency = size["latency"]  # the whole distribution, so it stays one a measurement could give
                for key in ("min_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "std_ms", "ci95_low_ms",
                            "ci95_high_ms"):
                    latency[key] *= factor
                latency["quantiles_ms"] = [q * factor for q in latency["quantiles_ms"]]
        return out

    # a synthetic 3x slowdown of the backend (every model): caught, as one per-backend check
    d = diff_zoo(combined, slowed(3, ["seed", "mlp_dynamic"]), 2.0, 10.0)
    assert d.exit_code == 1 and [(c.backend, c.check) for c in d.regressions] == [("xla", "latency (geometric mean of 4)")]
    assert 2.9 < d.regressions[0].ratio < 3.1
    # one tiny call 5x slower, the rest unchanged: noise of a 10 us call, shown but not gated
    d = diff_zoo(combined, slowed(5, ["seed"]), 2.0, 10.0)
    assert d.exit_code == 0 and any(c.verdict == "slower" for c in d.checks)


def test_matrix_names_failures_by_category():
    from multiexport.results import BackendResult, Status

    from ..report.builders import results

    combined = {"models": {"m": results(BackendResult("onnx", Status.UNSUPPORTED_DTYPE, "no bf16 Gemm")).to_json()}}
    text = matrix(combined)
    assert "**unsupported-dtype**" in text and "- m/onnx: unsupported-dtype: no bf16 Gemm" in text
