"""A history database runs nothing it holds and is read without trusting it: a trigger never fires on
`--add`, a view (a recursive query) is never read, a foreign schema is refused and left as it was, a
column holding the wrong type or JSON nested past reason is one line, and what it holds is shown escaped."""

from __future__ import annotations

import json
import sqlite3

import pytest

from multiexport.sweeps.history import History
from tests.conftest import run_cli
from tests.hostile.conftest import assert_one_line

pytestmark = pytest.mark.subprocess

ROW = ("u1", "seed", "xla", "ok", "", 0.0, 1, 0.5, 0.4, 0.6, '{"jax": "0.10.2"}', "{}", '{"host": "h"}', "2026")


def _history(tmp_path, *statements, rows=(ROW,)):
    """A history as `multiexport sweep` writes it (one sweep, `rows`), then `statements` run on it."""
    path = tmp_path / "h.sqlite"
    History(path).check()
    con = sqlite3.connect(path)
    con.execute("INSERT INTO sweeps VALUES ('u1', 't', '/d', '2026-12-05T00:00:00Z', NULL, NULL, NULL, 'local')")
    con.executemany("INSERT INTO rows VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    for statement in statements:
        con.executescript(statement)
    con.commit()
    con.close()
    return path


def _sweep_dir(out):
    (out / "rows").mkdir(parents=True)
    (out / "sweep.json").write_text(json.dumps({"schema": "multiexport.sweep/1", "uid": "u2", "name": "t2",
                                                "tasks": ["a"]}))
    (out / "progress.jsonl").write_text(json.dumps({"event": "end", "name": "a", "state": "failed", "exit": 2,
                                                    "seconds": 1.0, "attempts": 1, "reason": "r", "host": "h",
                                                    "fingerprint": "f"}) + "\n")


def test_a_trigger_in_a_history_never_fires_on_add_and_the_file_is_left_as_it_was(tmp_path):
    path = _history(tmp_path, "CREATE TABLE pwned (x); CREATE TRIGGER t AFTER INSERT ON sweeps "
                              "BEGIN INSERT INTO pwned VALUES ('fired'); END;")
    before = path.read_bytes()
    _sweep_dir(tmp_path / "s")
    proc = run_cli("history", path, "--add", tmp_path / "s")
    assert_one_line(proc, 2, f"History '{path}'", "trigger 't'", "nothing was run or changed")
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM pwned").fetchone() == (0,)


def test_a_view_with_a_recursive_query_is_never_read(tmp_path):
    """`rows` replaced by a view counting for ever: `history` would never end (the subprocess timeout)."""
    path = _history(tmp_path, "DROP TABLE rows; CREATE VIEW rows AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                              "SELECT x + 1 FROM c) SELECT 'u1' AS sweep_uid, 'm' || x AS model, 'xla' AS backend, "
                              "'ok' AS status, '' AS reason, NULL AS err_scale, NULL AS batch, NULL AS p50_ms, "
                              "NULL AS ci95_low_ms, NULL AS ci95_high_ms, '{}' AS versions, '{}' AS producer, "
                              "'{}' AS machine, '' AS at FROM c ORDER BY x DESC")
    proc = run_cli("history", path)
    assert_one_line(proc, 2, "view 'rows'", "not multiexport's schema")


@pytest.mark.parametrize("statement, fragments", [
    ("CREATE TABLE extra (a)", ("table 'extra'",)),
    ("CREATE INDEX mine ON rows (status)", ("index 'mine'",)),
    ("ALTER TABLE rows ADD COLUMN extra TEXT", ("table 'rows' has columns",)),
])
def test_a_foreign_schema_is_refused_in_one_line_and_left_untouched(tmp_path, statement, fragments):
    path = _history(tmp_path, statement)
    before = path.read_bytes()
    _sweep_dir(tmp_path / "s")
    for args in (("history", path), ("history", path, "--add", tmp_path / "s")):
        assert_one_line(run_cli(*args), 2, f"History '{path}'", *fragments)
    assert path.read_bytes() == before


@pytest.mark.parametrize("column, value, fragment", [
    (7, "fast", "column p50_ms holds 'fast', expected a finite number"),
    (7, float("inf"), "column p50_ms holds inf"),
    (5, -1.0, "column err_scale holds -1.0"),
    (6, "eight", "column batch holds 'eight'"),
    (10, "[" * 100_000 + "]" * 100_000, "column versions holds unreadable JSON (JSON nested deeper"),
    (10, '{"jax": 1' + "0" * 5000 + "}", "column versions holds unreadable JSON"),
    (10, '["not", "an", "object"]', "column versions holds ['not', 'an', 'object'], expected a JSON object"),
    (3, b"ok", "column status holds b'ok', expected text"),  # a BLOB: TEXT affinity keeps it one
])
def test_a_column_holding_the_wrong_type_is_one_line_naming_it(tmp_path, column, value, fragment):
    row = list(ROW)
    row[column] = value
    path = _history(tmp_path, rows=(tuple(row),))
    for args in (("history", path), ("history", path, "--json"), ("history", path, "--changes")):
        assert_one_line(run_cli(*args), 2, f"History '{path}'", "row of model 'seed'", fragment)


def test_what_a_history_holds_is_printed_escaped(tmp_path):
    row = list(ROW)
    row[1] = "m\x1b]0;pwned\x07\x1b[2J"
    row[3] = "ok\u202e"
    path = _history(tmp_path, rows=(tuple(row),))
    for args in (("history", path), ("history", path, "--changes")):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout and "\x07" not in proc.stdout
        assert "\\x1b]0;pwned\\x07" in proc.stdout
