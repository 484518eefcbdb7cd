import os

import pytest

from multiexport import ArtifactError
from multiexport.files import inside, safe_component


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "a/../b", "", "a\\b", "a\x00b", ".", "a//b"])
def test_paths_that_leave_or_are_ambiguous_are_refused(tmp_path, bad):
    with pytest.raises(ArtifactError, match="expected a relative path inside it"):
        inside(tmp_path, bad)


def test_a_symlink_that_leads_out_is_refused(tmp_path):
    (tmp_path / "art").mkdir()
    os.symlink("/etc", tmp_path / "art" / "link")
    with pytest.raises(ArtifactError, match="outside it"):
        inside(tmp_path / "art", "link/passwd")
    assert inside(tmp_path / "art", "sub/file.bin") == (tmp_path / "art").resolve() / "sub" / "file.bin"


def test_non_strings_are_refused(tmp_path):
    with pytest.raises(ArtifactError):
        inside(tmp_path, 3)


@pytest.mark.parametrize("name, expected", [("../../x", "x"), ("..", "target"), ("a b/c", "a_b_c"), ("[/]", "target"),
                                            ("ok-name_1.2", "ok-name_1.2"), ("\n", "target")])
def test_safe_component_is_one_harmless_path_component(name, expected):
    assert safe_component(name) == expected
    assert "/" not in safe_component(name) and not safe_component(name).startswith(".")
