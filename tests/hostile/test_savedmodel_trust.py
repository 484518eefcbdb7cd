"""A SavedModel is a program (issue 16, item 4): one that writes files is refused before TensorFlow loads it,
unless the user trusts it (--trust-artifact); the README says which formats carry code.

The hostile SavedModels are real: built with TensorFlow from a real export (tests/hostile/evil_savedmodel.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from multiexport import ArtifactError

from ..conftest import REPO
from .conftest import assert_one_line, build_evil_savedmodels, copy_evil

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]
MODES = ("serving", "load", "traced_save", "load_save")


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    return build_evil_savedmodels(tmp_path_factory, "evil-savedmodels", MODES)


def _written(pwned: Path) -> list[str]:
    return sorted(p.name for p in pwned.parent.glob(pwned.name + "*"))


def _load(art: Path, **kwargs):
    from multiexport import load

    return load(art, **kwargs)


@pytest.mark.parametrize("mode", ["serving", "load", "traced_save"])
def test_a_savedmodel_with_file_writing_ops_is_refused_before_it_loads(evil, sandbox, mode):
    art = copy_evil(evil, mode, sandbox)
    with pytest.raises(ArtifactError, match=r"its SavedModel graph holds ops multiexport never exports.*"
                                            r"--trust-artifact"):
        _load(art)
    assert not _written(evil / f"PWNED-{mode}")
    sandbox.assert_untouched()


def test_run_of_a_file_writing_savedmodel_is_one_line_and_writes_nothing(evil, sandbox):
    art = copy_evil(evil, "serving", sandbox)
    proc = sandbox.main("run", art)
    assert_one_line(proc, 2, str(art), "WriteFile", "--trust-artifact")
    assert not _written(evil / "PWNED-serving")
    sandbox.assert_untouched()


def test_trust_artifact_is_the_one_way_to_run_it(evil, sandbox):
    import numpy as np

    art = copy_evil(evil, "serving", sandbox)
    try:
        runner = _load(art, trust_artifact=True)
        out = runner({"foo.bar": np.zeros(10, np.int32), "foo.baz": np.arange(10, dtype=np.int32)})
        assert int(out["out"]) == 45
        assert _written(evil / "PWNED-serving") == ["PWNED-serving"]  # it is a program: trusted, it runs
    finally:
        for p in evil.glob("PWNED-serving*"):
            p.unlink()


def test_a_load_time_function_renamed_like_tfs_saver_is_refused_too(evil, sandbox):
    art = copy_evil(evil, "load_save", sandbox)
    pwned = evil / "PWNED-load_save"
    try:
        with pytest.raises(ArtifactError, match="holds ops multiexport never exports"):
            _load(art)
    finally:
        written = _written(pwned)
        for p in pwned.parent.glob(pwned.name + "*"):
            p.unlink()
    assert not written, f"loading wrote {written} outside the artifact"


def test_the_readme_says_which_formats_carry_code():
    text = (REPO / "README.md").read_text().lower()
    assert "--trust-artifact" in text and "savedmodel" in text and "code" in text
