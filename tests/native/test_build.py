"""Building the native programs: cached per machine, and one clear line when something is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from multiexport import BackendUnavailable
from multiexport.backends.xla import native as xla_native, runtime as pjrt
from multiexport.exporting.native_consumer import Recipe
from multiexport.native import build

from ..conftest import REPO


def test_no_compiler_is_one_line_naming_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no gcc, cc, clang
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(BackendUnavailable, match=r"no C compiler: none of gcc, cc, clang is on PATH.*apt-get install gcc"):
        build.find_compiler("c")


def test_a_named_plugin_that_is_not_there_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(pjrt.PLUGIN_ENV, str(tmp_path / "nothing.so"))
    with pytest.raises(BackendUnavailable, match=r"PJRT plugin '.*nothing.so' \| no such file"):
        pjrt.find_pjrt_plugin()


def test_a_build_is_cached_and_rebuilt_when_a_source_changes(monkeypatch, tmp_path):
    try:
        pjrt.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    first = build.build("pjrt_run")
    assert first.is_file() and first.is_relative_to(tmp_path / "cache")
    assert build.build("pjrt_run") == first  # cached: same path, not rebuilt
    changed = tmp_path / "pjrt_run.cc"  # the backend's main source, changed (the recipe reads SOURCE at each build)
    changed.write_text(xla_native.SOURCE.read_text() + "\n// changed\n")
    monkeypatch.setattr(xla_native, "SOURCE", changed)
    assert build.build("pjrt_run") != first


def test_a_compile_error_is_reported_with_the_compilers_words(monkeypatch, tmp_path):
    try:
        pjrt.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    broken = tmp_path / "pjrt_run.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(xla_native, "SOURCE", broken)
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailable, match=r"Program 'pjrt_run' \| compiling exited 1.*error"):
        build.build("pjrt_run")


def test_the_flags_a_users_build_needs_are_printed():
    proc = subprocess.run([sys.executable, "-m", "multiexport.native.build", "--sources"], capture_output=True,
                          text=True, cwd=REPO, check=True)
    assert [p.rsplit("/", 1)[1] for p in proc.stdout.split()] == ["mx_json.c", "mx_npy.c", "mx_util.c"]


def test_every_option_users_build_with_is_still_offered():
    """The backends' options (`NativeConsumer.user_options`) beside the core's, under the names examples/cpp/Makefile
    and the README use."""
    proc = subprocess.run([sys.executable, "-m", "multiexport.native.build", "--help"], capture_output=True,
                          text=True, cwd=REPO, check=True)
    for option in ("--sources", "--cflags", "--plugin", "--openvino-cflags", "--openvino-libs", "--program", "--device"):
        assert option in proc.stdout
    assert set(build.consumers()) >= {"pjrt_run", "tf_run", "ov_run", "ort_run", "lite_run"}
    with pytest.raises(BackendUnavailable, match=r"Program 'nothing_run' \| unknown, expected one of .*pjrt_run"):
        build.recipe("nothing_run")


def test_the_bundled_build_drops_the_wheels_rpath_and_names_dlopened_libraries_by_file():
    """The relocatable variant, on a recipe of no real runtime: only `Recipe.dlopened` defines are rewritten."""
    chain = Recipe("c", Path("main.c"), ("-std=c11", '-DMX_LIB="/wheel/libfoo.so.1"', '-DOTHER="/keep/this"',
                                         "-L/wheel", "-l:libbar.so", "-Wl,-rpath,/wheel"), dlopened=("MX_LIB",))
    assert build.relocatable(chain).flags == (
        "-std=c11", '-DMX_LIB="libfoo.so.1"', '-DOTHER="/keep/this"', "-L/wheel", "-l:libbar.so",
        "-Wl,--disable-new-dtags", f"-Wl,-rpath,{build.BUNDLE_RPATH}")
