"""Change points over the sweeps' history: the sweep where latency or parity moved, and the gate on it.

The search is the real ruptures PELT on seeded series built like a history's (noise of a shared machine,
one real step), and the CLI reads a real SQLite history."""

from __future__ import annotations

import sqlite3
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from multiexport.sweeps.changepoints import history_checks, shifts
from multiexport.sweeps.history import History, HistoryRow

from ..conftest import run_cli

pytest.importorskip("ruptures", reason="the [sweep] extra (make setup installs it)")


def rows(p50s, errs=None, model="mlp", backend="onnx") -> list[HistoryRow]:
    errs = errs if errs is not None else [1e-7] * len(p50s)
    return [HistoryRow(f"s{i:02d}", f"2026-12-{i + 1:02d}T00:00:00Z", None, model, backend, "ok", "", err, 8, p50,
                       0.95 * p50, 1.05 * p50, {}, {}, {}) for i, (p50, err) in enumerate(zip(p50s, errs))]


def noisy(level, n, rng, spread=0.03):
    return list(level * np.exp(rng.normal(0, spread, n)))


def test_a_real_slowdown_is_named_at_the_sweep_that_made_it_and_noise_is_not():
    rng = np.random.default_rng(0)
    found = shifts(rows(noisy(1.0, 8, rng) + noisy(1.3, 6, rng)))
    [moved] = found
    assert (moved.measure, moved.sweep, moved.after_sweep) == ("latency", "s08", "s07")
    assert 1.2 < moved.ratio < 1.4 and (moved.runs_before, moved.runs_after) == (8, 6)
    # 40 sweeps of the same code with 3% noise and one 8% outlier: no change point
    steady = noisy(1.0, 40, rng)
    steady[17] *= 1.08
    assert shifts(rows(steady)) == []


def test_parity_that_moved_is_named_and_a_deterministic_error_is_never_split_by_rounding():
    errs = [1e-7] * 6 + [5e-6] * 4
    [moved] = shifts(rows([1.0] * 10, errs))
    assert moved.measure == "parity" and moved.sweep == "s06" and moved.ratio == pytest.approx(50)
    assert shifts(rows([1.0] * 10, [0.0] * 10)) == []  # bit-exact every time: nothing moves


def test_the_gate_against_the_history_judges_the_last_change_of_each_series():
    rng = np.random.default_rng(1)
    slower = rows(noisy(1.0, 6, rng) + noisy(1.25, 4, rng), backend="onnx")
    faster = rows(noisy(1.0, 6, rng) + noisy(0.7, 4, rng), backend="xla")
    checks = {c.backend: c for c in history_checks(shifts(slower + faster))}
    assert checks["mlp/onnx"].verdict == "regression" and checks["mlp/onnx"].kind == "history"
    assert checks["mlp/xla"].verdict == "improvement" and "from sweep 's06'" in checks["mlp/xla"].detail


def test_history_changes_and_gate_read_a_real_history(tmp_path):
    db = tmp_path / "history.sqlite"
    History(db).check()  # the history's own schema
    rng = np.random.default_rng(2)
    series = noisy(2.0, 6, rng) + noisy(2.6, 5, rng)
    con = sqlite3.connect(db)
    for i, p50 in enumerate(series):
        con.execute("INSERT INTO sweeps (uid, name, directory, created) VALUES (?, ?, ?, ?)",
                    (f"u{i}", f"nightly-{i}", str(tmp_path), f"2026-12-{i + 1:02d}T00:00:00Z"))
        con.execute("INSERT INTO rows (sweep_uid, model, backend, status, reason, err_scale, batch, p50_ms, "
                    "ci95_low_ms, ci95_high_ms, versions, producer, machine, at) VALUES "
                    "(?, 'cnn', 'openvino', 'ok', '', 1e-7, 8, ?, ?, ?, '{}', '{}', '{}', '')",
                    (f"u{i}", p50, 0.97 * p50, 1.03 * p50))
    con.commit()
    con.close()
    proc = run_cli("history", db, "--changes")
    assert proc.returncode == 0, proc.stderr
    assert "cnn/openvino: latency moved in sweep 'nightly-6'" in proc.stdout and "after sweep 'nightly-5'" in proc.stdout
    gate = run_cli("history", db, "--gate", "--junit", tmp_path / "j.xml")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "REGRESSION  cnn/openvino  latency history  [history]" in gate.stdout
    case = ET.parse(tmp_path / "j.xml").getroot().find("testcase")
    assert case.find("properties/property").attrib["value"] == "history" and case.find("failure") is not None
