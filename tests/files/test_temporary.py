"""Which directories a worker whose supervisor died may remove: only those make_temporary marked."""

from __future__ import annotations

import tempfile

from multiexport.files.temporary import MARK, is_temporary, make_temporary


def test_only_a_marked_directory_directly_in_tmpdir_is_a_temporary(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = make_temporary("export")
    assert made.parent == tmp_path and made.name.startswith("multiexport-export-") and (made / MARK).is_file()
    assert is_temporary(made)
    users = tmp_path / "multiexport-mine"  # the user's --out, named like one
    users.mkdir()
    assert not is_temporary(users)
    link = tmp_path / "multiexport-link"  # a link to a marked directory is not the directory
    link.symlink_to(made)
    assert not is_temporary(link)
    nested = made / "multiexport-inner"  # marked, but not in TMPDIR itself
    nested.mkdir()
    (nested / MARK).touch()
    assert not is_temporary(nested)
    (made / MARK).unlink()
    assert not is_temporary(made)


def test_the_janitor_removes_only_temporaries_whose_owner_is_gone(tmp_path, monkeypatch):
    """A process killed outright (kill -9) leaves its temporaries; the next command removes them by the
    owner the mark names: gone (a real process that ended), never one still running or unnamed."""
    import json
    import subprocess
    import sys

    from multiexport.files.temporary import process_start, remove_orphaned

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    orphan, mine, older, users = (make_temporary(p) for p in ("paired", "native", "export", "x"))
    (orphan / MARK).write_text(json.dumps({"pid": dead_pid, "start": 1}))
    reused = make_temporary("factory-cache")  # a live pid, but not the process that made it (pid reuse)
    (reused / MARK).write_text(json.dumps({"pid": 1, "start": (process_start(1) or 0) + 1}))
    (older / MARK).write_text("")  # a multiexport before the owner mark: not proven orphaned
    (users / MARK).unlink()
    assert sorted(remove_orphaned()) == sorted([orphan.name, reused.name])
    assert not orphan.exists() and not reused.exists()
    assert mine.is_dir() and older.is_dir() and users.is_dir()
