"""files.owned: the ownership stamp proves a text file is multiexport's and unchanged; an inventory's sizes
and sha256 prove an artifact's files are; anything else (edited, foreign, a link, a FIFO) is not ours."""

from __future__ import annotations

import hashlib
import os

import pytest

from multiexport import ArtifactError
from multiexport.files.owned import check_overwritable, is_stamped, stamped, unproven_files, unstamped, write_owned_text


@pytest.mark.parametrize("text", ["", "# r\n", "no newline", "<html></html>\n", "ünïcode ✓\n"])
def test_a_stamped_text_is_ours_and_unstamps_to_itself(tmp_path, text):
    path = tmp_path / "r.md"
    path.write_bytes(stamped(text).encode())
    assert is_stamped(path) and unstamped(path.read_text()) == text


def test_any_edit_or_a_copied_stamp_is_not_ours(tmp_path):
    path = tmp_path / "r.md"
    text = stamped("# report\n")
    for changed in (text.replace("report", "rePort"), "x" + text, text + "\n", text.replace("sha256=", "sha256=0"),
                    "# mine\n" + text[text.index("\n<!--"):]):
        path.write_text(changed)
        assert not is_stamped(path), changed


def test_check_overwritable_refuses_what_is_not_ours(tmp_path):
    check_overwritable(tmp_path / "new.md", "Report")
    write_owned_text(tmp_path / "r.md", "# one\n", "Report")
    write_owned_text(tmp_path / "r.md", "# two\n", "Report")  # its own: replaced
    (tmp_path / "mine.md").write_text("# mine\n")
    os.symlink(tmp_path / "r.md", tmp_path / "link.md")  # even to a stamped file: a link is never ours
    os.mkfifo(tmp_path / "fifo.md")  # not read: a FIFO would hang a reader
    (tmp_path / "dir.md").mkdir()
    for name in ("mine.md", "link.md", "fifo.md", "dir.md"):
        with pytest.raises(ArtifactError, match="did not write"):
            write_owned_text(tmp_path / name, "# x\n", "Report")
    assert (tmp_path / "mine.md").read_text() == "# mine\n"


def test_unproven_files_needs_every_size_and_hash(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abc")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"de")
    sizes = {"a.bin": 3, "sub/b.bin": 2}
    hashes = {k: hashlib.sha256((tmp_path / k).read_bytes()).hexdigest() for k in sizes}
    assert unproven_files(tmp_path, sizes, hashes) == ([], [])
    (tmp_path / "a.bin").write_bytes(b"abd")  # same size
    assert unproven_files(tmp_path, sizes, hashes) == ([], ["a.bin"])
    assert unproven_files(tmp_path, sizes, {"sub/b.bin": hashes["sub/b.bin"]}) == (["a.bin"], [])
    os.mkfifo(tmp_path / "sub" / "f")
    os.symlink(tmp_path / "a.bin", tmp_path / "l")
    # links and non-regular files are foreign even when listed; then no byte is read (the edit goes unreported)
    assert unproven_files(tmp_path, {**sizes, "sub/f": 0, "l": 3}, hashes) == (["l", "sub/f"], [])


def test_an_npz_multiexport_wrote_is_sealed_in_its_archive_comment(tmp_path):
    import numpy as np

    from multiexport.files.npz import load_npz, save_npz

    ours, theirs = tmp_path / "o.npz", tmp_path / "t.npz"
    save_npz(ours, {"a": np.arange(4)})
    np.savez(theirs, a=np.arange(4))
    assert is_stamped(ours) and not is_stamped(theirs)
    assert list(load_npz(ours)["a"]) == [0, 1, 2, 3] and list(np.load(ours)["a"]) == [0, 1, 2, 3]
    data = bytearray(ours.read_bytes())
    data[40] ^= 1  # a member's bytes changed: no longer what multiexport wrote
    ours.write_bytes(bytes(data))
    assert not is_stamped(ours)
