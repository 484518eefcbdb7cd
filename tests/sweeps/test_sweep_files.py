"""A sweep's files as hostile input: a history that is not one, a journal edited by hand, a lock in use."""

from __future__ import annotations

import json

from multiexport.sweeps.state import JOURNAL, SweepDir
from tests.conftest import run_cli


def test_a_history_that_is_not_sqlite_is_one_line_and_left_untouched(tmp_path):
    bogus = tmp_path / "history.sqlite"
    bogus.write_text("not a database, someone's notes\n" * 100)
    before = bogus.read_bytes()
    proc = run_cli("history", bogus)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"History '{bogus}'" in proc.stderr and "expected an SQLite history" in proc.stderr
    assert bogus.read_bytes() == before
    missing = run_cli("history", tmp_path / "none.sqlite")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates one


def test_a_journal_edited_by_hand_is_read_without_trusting_it(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"schema": "multiexport.sweep/1", "uid": "u", "tasks": ["a", "b"]}))
    good = {"event": "end", "name": "a", "state": "done", "exit": 0, "seconds": 1.5, "attempts": 1, "reason": "",
            "host": "h", "fingerprint": "f"}
    lines = [json.dumps(good), json.dumps({**good, "name": "b", "seconds": "soon"}), json.dumps({**good, "exit": True}),
             "[1, 2", json.dumps(["not", "an", "event"]), '{"event": "end", "name": "b"']
    (tmp_path / JOURNAL).write_text("\n".join(lines))
    ended = SweepDir.read(tmp_path).ended()
    assert list(ended) == ["a"] and ended["a"].seconds == 1.5


def test_a_sweep_directory_holding_someone_else_s_files_is_refused_and_untouched(tmp_path):
    spec = tmp_path / "sweep.toml"
    spec.write_text('[[target]]\ntarget = "multiexport.examples:seed"\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = run_cli("sweep", spec, "--out", out)
    assert proc.returncode == 2 and "is not empty and not a sweep" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    resumed = run_cli("sweep", spec, "--out", tmp_path / "never", "--resume")
    assert resumed.returncode == 2 and "expected the directory of a sweep to resume" in resumed.stderr
    assert not (tmp_path / "never").exists()
