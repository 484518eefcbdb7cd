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
    proc = run_cli("sweep", spec, "--out-dir", out)
    assert proc.returncode == 2 and "is not empty and not a sweep" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    resumed = run_cli("sweep", spec, "--out-dir", tmp_path / "never", "--resume")
    assert resumed.returncode == 2 and "expected the directory of a sweep to resume" in resumed.stderr
    assert not (tmp_path / "never").exists()


def test_a_sqlite_file_that_is_not_a_history_is_refused_before_a_sweep_starts_and_left_as_it_was(tmp_path):
    import sqlite3

    theirs = tmp_path / "theirs.db"
    con = sqlite3.connect(theirs)
    con.execute("CREATE TABLE rows (a)")
    con.commit()
    con.close()
    spec = tmp_path / "sweep.toml"
    spec.write_text('[[target]]\ntarget = "multiexport.examples:seed"\n')
    for args in (("sweep", spec, "--out-dir", tmp_path / "out", "--history", theirs), ("history", theirs)):
        proc = run_cli(*args)
        assert proc.returncode == 2 and "no multiexport schema" in proc.stderr, proc.stderr
    tables = [r[0] for r in sqlite3.connect(theirs).execute("SELECT name FROM sqlite_master")]
    assert tables == ["rows"]  # nothing added to someone else's database, not even by a read
    assert not (tmp_path / "out" / "sweep.json").exists()


def test_names_that_are_paths_or_logs_are_refused_and_a_journal_cannot_name_one(tmp_path):
    import pytest

    from multiexport.errors import UsageError
    from multiexport.sweeps.spec import load_spec

    for target, name in (("m:x", "x.log"), (":", None), ("m:x", "")):
        text = f'[[target]]\ntarget = "{target}"\n' + (f'name = "{name}"\n' if name is not None else "")
        (tmp_path / "s.toml").write_text(text)
        with pytest.raises(UsageError, match="not a plain file name|non-empty string"):
            load_spec(tmp_path / "s.toml")
    (tmp_path / "sweep.json").write_text(json.dumps({"schema": "multiexport.sweep/1", "uid": "u", "tasks": ["a"]}))
    end = {"event": "end", "name": "../../escape", "state": "done", "exit": 0, "seconds": 1.0, "attempts": 1,
           "reason": "", "host": "h", "fingerprint": "f"}
    (tmp_path / JOURNAL).write_text(json.dumps(end) + "\n" + json.dumps({**end, "name": ""}) + "\n")
    assert SweepDir.read(tmp_path).ended() == {}


def test_sweep_json_is_read_through_the_codec_one_line_naming_the_field(tmp_path):
    import pytest

    from multiexport.errors import UsageError

    base = {"schema": "multiexport.sweep/1", "uid": "u", "tasks": ["a"], "name": "zoo", "shard": None,
            "merged_from": [{"directory": "/x", "uid": "v", "shard": "1/2"}]}
    (tmp_path / "sweep.json").write_text(json.dumps(base))
    assert SweepDir.read(tmp_path).meta == base  # the fields it has, as they are
    for change, message in (({"name": {"a": 1}}, r"sweep.json.name \| got dict, expected a string or null"),
                            ({"uid": 7}, r"sweep.json.uid \| got int '7', expected a string"),
                            ({"tasks": ["../escape"]}, r"sweep.json.tasks \| got '../escape', expected task names"),
                            ({"fingerprints": {"a": 1}}, r"sweep.json.fingerprints.a \| got int '1', expected a string"),
                            ({"merged_from": [{"uid": "v"}]}, r"sweep.json.merged_from\[0\] \| has no 'directory'")):
        (tmp_path / "sweep.json").write_text(json.dumps({**base, **change}))
        with pytest.raises(UsageError, match=message) as info:
            SweepDir.read(tmp_path)
        assert "\n" not in str(info.value)


def test_a_journal_end_line_without_an_exit_code_is_no_row_not_a_crash(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"schema": "multiexport.sweep/1", "uid": "u", "tasks": ["a"]}))
    end = {"event": "end", "name": "a", "state": "done", "exit": 0, "seconds": 1.0, "attempts": 1, "reason": "",
           "host": "h", "fingerprint": "f"}
    partial = {k: v for k, v in end.items() if k != "exit"}
    (tmp_path / JOURNAL).write_text(json.dumps(partial) + "\n" + json.dumps({**end, "seconds": "inf"}) + "\n"
                                    + json.dumps({"event": "start", "name": "a", "attempt": 1}) + "\n")
    sweep = SweepDir.read(tmp_path)
    assert sweep.ended() == {} and sweep.starts() == {"a": 1}


def test_a_stopped_compare_is_read_from_its_results_through_the_codec(tmp_path):
    from multiexport.sweeps.task import _interrupted

    path = tmp_path / "results.json"
    for document, stopped in (({"state": "interrupted"}, True), ({"interrupted": True, "backends": {}}, True),
                              ({"state": "done"}, False), ({"state": 5}, False), ({"interrupted": "yes"}, False),
                              ([], False)):
        path.write_text(json.dumps(document))
        assert _interrupted(path) is stopped, document
