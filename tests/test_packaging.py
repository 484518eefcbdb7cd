"""The wheel holds every package and the native consumers' sources.

The package list in pyproject.toml is written by hand (backends/ is renamed to multiexport.backends), so a new
package directory or C source that is not listed would work in the editable install the tests use and be
missing from a real install. This builds the real wheel and compares it with the tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    source = tmp_path_factory.mktemp("source") / "multiexport"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "*.egg-info", "multiexport-out", "__pycache__", ".pytest_cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("multiexport-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _tree_files(top: str, installed_as: str, pattern: str) -> set[str]:
    base = ROOT / top
    return {
        f"{installed_as}/{p.relative_to(base).as_posix()}"
        for p in base.rglob(pattern)
        if "__pycache__" not in p.parts
    }


def test_every_module_is_in_the_wheel(wheel_names):
    expected = _tree_files("multiexport", "multiexport", "*.py") | _tree_files(
        "backends", "multiexport/backends", "*.py"
    )
    missing = sorted(expected - wheel_names)
    assert not missing, f"modules missing from the wheel (add their package to pyproject.toml): {missing}"


def test_the_wheel_says_the_package_is_typed(wheel_names):
    assert "multiexport/py.typed" in wheel_names


def test_native_sources_are_in_the_wheel(wheel_names):
    """The shared sources (multiexport/native/csrc) and each backend's program (backends/<name>/csrc)."""
    expected = {f for f in _tree_files("multiexport/native/csrc", "multiexport/native/csrc", "*")
                if (ROOT / f).is_file()}
    for csrc in sorted(ROOT.glob("backends/*/csrc")):
        top = csrc.relative_to(ROOT).as_posix()
        expected |= {f for f in _tree_files(top, f"multiexport/{top}", "*")
                     if (ROOT / top / f.split("/csrc/", 1)[1]).is_file()}
    assert expected, "no native sources found in the tree"
    assert {f.rsplit("/", 1)[1] for f in expected} >= {"mx_util.c", "pjrt_run.cc", "ort_api.h", "lite_run.c"}
    missing = sorted(expected - wheel_names)
    assert not missing, f"native sources missing from the wheel (package-data in pyproject.toml): {missing}"


def test_no_top_level_backends_package(wheel_names):
    assert not any(name.startswith("backends/") for name in wheel_names)


def test_the_package_version_is_pyproject_s():
    """One version: multiexport.__version__ (versions.py) is pyproject.toml's, which the wheel carries."""
    import tomllib

    import multiexport

    from .conftest import REPO

    assert multiexport.__version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
