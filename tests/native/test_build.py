"""Building the native programs: cached per machine, and one clear line when something is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from multiexport import BackendUnavailable
from multiexport.native import build

from ..conftest import REPO


def test_no_compiler_is_one_line_naming_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no gcc, cc, clang
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(BackendUnavailable, match=r"no C compiler: none of gcc, cc, clang is on PATH.*apt-get install gcc"):
        build.find_compiler("c")


def test_a_named_plugin_that_is_not_there_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(build.PLUGIN_ENV, str(tmp_path / "nothing.so"))
    with pytest.raises(BackendUnavailable, match=r"PJRT plugin '.*nothing.so' \| no such file"):
        build.find_pjrt_plugin()


def test_a_build_is_cached_and_rebuilt_when_a_source_changes(monkeypatch, tmp_path):
    try:
        build.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    first = build.build("pjrt_run")
    assert first.is_file() and first.is_relative_to(tmp_path / "cache")
    assert build.build("pjrt_run") == first  # cached: same path, not rebuilt
    sources = tmp_path / "csrc"
    import shutil

    shutil.copytree(build.SOURCE_DIR, sources)
    (sources / "pjrt_run.cc").write_text((sources / "pjrt_run.cc").read_text() + "\n// changed\n")
    monkeypatch.setattr(build, "SOURCE_DIR", sources)
    assert build.build("pjrt_run") != first


def test_a_compile_error_is_reported_with_the_compilers_words(monkeypatch, tmp_path):
    try:
        build.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    import shutil

    sources = tmp_path / "csrc"
    shutil.copytree(build.SOURCE_DIR, sources)
    (sources / "pjrt_run.cc").write_text("this is not C++\n")
    monkeypatch.setattr(build, "SOURCE_DIR", sources)
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailable, match=r"Program 'pjrt_run' \| compiling exited 1.*error"):
        build.build("pjrt_run")


def test_the_flags_a_users_build_needs_are_printed():
    proc = subprocess.run([sys.executable, "-m", "multiexport.native.build", "--sources"], capture_output=True,
                          text=True, cwd=REPO, check=True)
    assert [p.rsplit("/", 1)[1] for p in proc.stdout.split()] == ["mx_json.c", "mx_npy.c", "mx_util.c"]
