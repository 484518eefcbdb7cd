"""files.confined on real links: every component under the kept directory is checked, none is followed."""

from __future__ import annotations

import os

import pytest

from multiexport.files import confined
from multiexport.files.confined import LinkInside


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "rows" / "a").mkdir(parents=True)
    (outside / "a").mkdir(parents=True)
    (outside / "a" / "keep.txt").write_text("mine")
    return root, outside


@pytest.mark.parametrize("link, path", [("rows", "rows/a/results.json"), ("rows/a", "rows/a/results.json"),
                                        ("rows/a/results.json", "rows/a/results.json")])
def test_a_link_at_any_component_is_refused(tree, link, path):
    root, outside = tree
    target = root / link
    if target.is_dir():
        os.rename(target, root / "moved")
    os.symlink(outside / "a" if link != "rows" else outside, target)
    with pytest.raises(LinkInside, match=f"{link} is a symbolic link"):
        confined.under(root, path, "Sweep 'root'")


def test_the_named_directory_itself_may_be_a_link(tree, tmp_path):
    root, _ = tree
    os.symlink(root, tmp_path / "last")
    assert confined.under(tmp_path / "last", "rows/a/x", "Sweep 'last'") == tmp_path / "last" / "rows" / "a" / "x"


def test_a_fifo_where_a_directory_belongs_is_refused_and_missing_parts_are_fine(tree):
    root, _ = tree
    os.mkfifo(root / "rows" / "b")
    with pytest.raises(LinkInside, match="rows/b is not a directory"):
        confined.under(root, "rows/b/results.json", "Sweep 'root'")
    assert confined.under(root, "rows/new/results.json", "Sweep 'root'") == root / "rows" / "new" / "results.json"
    for bad in ("../x", "/etc/passwd", "rows/../x", ""):
        with pytest.raises(LinkInside, match="not a plain relative path"):
            confined.under(root, bad, "Sweep 'root'")


def test_removing_a_linked_entry_removes_the_link_not_what_it_points_to(tree):
    root, outside = tree
    os.rmdir(root / "rows" / "a")
    os.symlink(outside / "a", root / "rows" / "a")
    confined.remove_tree(root, "rows/a", "Sweep 'root'")
    assert not os.path.lexists(root / "rows" / "a") and (outside / "a" / "keep.txt").read_text() == "mine"
    os.rmdir(root / "rows")
    os.symlink(outside, root / "rows")
    with pytest.raises(LinkInside):
        confined.remove_tree(root, "rows/a", "Sweep 'root'")
    with pytest.raises(LinkInside):
        confined.make_dirs(root, "rows/b", "Sweep 'root'")
    assert sorted(p.name for p in outside.iterdir()) == ["a"] and (outside / "a" / "keep.txt").exists()


def test_a_file_opened_for_writing_is_never_reached_through_a_link(tree, tmp_path):
    root, _ = tree
    os.symlink(tmp_path / "elsewhere.txt", root / "journal")
    with pytest.raises(LinkInside, match="journal is a symbolic link"):
        confined.open_new_file(root, "journal", "Sweep 'root'", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert not os.path.lexists(tmp_path / "elsewhere.txt")
