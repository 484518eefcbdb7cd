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
