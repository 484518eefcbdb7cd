"""Where multiexport writes (issue 16, items 1, 3 and the output half of 13): only into a directory that is
its own, named safely, refused before the work when it cannot be written; nothing of the user's deleted.

Covered elsewhere, not repeated here: the ctrl-c-leaves-no-stale-results case (tests/run/test_signals.py)
and `safe_component` itself (tests/files/test_paths.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from multiexport import ArtifactError, MultiexportError, Target, export
from multiexport.examples import seed

from ..conftest import REPO
from .conftest import assert_one_line

# -- item 1: a directory that merely holds a manifest.json is not an artifact --------------------------------

def test_export_refuses_a_user_directory_that_merely_holds_a_manifest_json(sandbox):
    mine = sandbox.user
    (mine / "manifest.json").write_text(json.dumps({"name": "my web app", "icons": []}))
    (mine / "photos").mkdir()
    (mine / "photos" / "a.jpg").write_bytes(b"\xff\xd8")
    sandbox.rebase()
    with pytest.raises(ArtifactError, match=r"exists and is not a multiexport artifact .* nothing was changed"):
        export(seed(), mine, "xla")
    sandbox.assert_untouched()
    assert (mine / "photos" / "a.jpg").read_bytes() == b"\xff\xd8"


def test_export_refuses_a_real_artifact_the_user_added_a_file_to(artifact, sandbox):
    (artifact / "my-notes.txt").write_text("mine")
    sandbox.rebase()
    with pytest.raises(ArtifactError, match=r"holds files its export did not write \(my-notes.txt\)"):
        export(seed(), artifact, "xla")
    sandbox.assert_untouched()


def test_export_replaces_its_own_artifact_and_touches_nothing_else(artifact, sandbox):
    export(seed(), artifact, "xla")
    sandbox.assert_untouched("art")
    assert not [p.name for p in sandbox.root.iterdir() if p.name.startswith(".")]  # no staging or lock left


def test_the_cli_export_into_a_user_directory_is_one_line_and_exit_2(sandbox):
    (sandbox.user / "manifest.json").write_text("{}")
    sandbox.rebase()
    proc = sandbox.main("export", "--out-dir", sandbox.user)
    assert_one_line(proc, 2, str(sandbox.user), "not a multiexport artifact")
    sandbox.assert_untouched()


# -- item 3: a target's name never becomes a path ---------------------------------------------------------

@pytest.mark.subprocess
def test_a_target_named_dot_dot_slash_lands_inside_the_default_output_directory(sandbox, monkeypatch):
    from multiexport import compare

    cwd = sandbox.root / "a" / "b"
    cwd.mkdir(parents=True)
    sandbox.rebase()
    monkeypatch.chdir(cwd)
    target = Target(lambda x: x * 2, args=(np.ones(3, np.float32),), name="../../x")
    results = compare(target, backends=["xla"], bench=None, trials=1)
    out = cwd / "multiexport-out"
    sandbox.assert_untouched(out)
    assert (out / "x" / "results.json").is_file() and results.backends["xla"].status.value == "ok"


# -- item 13: --out that cannot be used, refused before the work -------------------------------------------

def test_out_that_is_a_file_is_refused_and_the_file_kept(sandbox):
    f = sandbox.user / "notes.txt"
    for args in (["export", "--out-dir", f], ["compare", "--backends", "xla", "--no-bench", "--out-dir", f]):
        proc = sandbox.main(*args)
        assert_one_line(proc, 2, str(f), "is a file")
    sandbox.assert_untouched()


def test_run_out_that_is_a_directory_is_one_line(artifact, sandbox):
    proc = sandbox.main("run", artifact, "--save-outputs", sandbox.user)
    assert_one_line(proc, 2, "--save-outputs", str(sandbox.user), "is a directory, expected a file name")
    sandbox.assert_untouched()


@pytest.fixture
def export_work(monkeypatch):
    """Records each call of the XLA backend's `_export_impl` (the export's real work)."""
    from multiexport.backends.xla import XlaBackend

    calls = []
    real = XlaBackend._export_impl

    def recording(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(XlaBackend, "_export_impl", recording)
    return calls


def test_a_read_only_output_is_one_line_naming_it_before_the_export_works(sandbox, monkeypatch, export_work):
    """No read-only mount without root (and none outside a scratch area), so the file system's refusal is
    made real at the call that creates the staging directory: EROFS from mkdtemp, as a read-only mount gives."""
    import errno
    import tempfile

    real = tempfile.mkdtemp

    def read_only(*args, **kwargs):
        if str(sandbox.root) in str(kwargs.get("dir", "")):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(ArtifactError, match=r"cannot be written: the file system is read-only"):
        export(seed(), sandbox.root / "ro" / "a", "xla")
    assert not export_work


@pytest.mark.subprocess
def test_two_exports_into_one_directory_at_once_one_wins_one_is_refused(sandbox):
    out = sandbox.root / "a"
    procs = [subprocess.Popen([sys.executable, "-m", "multiexport", "export", "--out-dir",
                               str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    done = [(p, *p.communicate(timeout=300)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in done)
    assert codes in ([0, 0], [0, 2]), [e for _, _, e in done]
    for p, _, err in done:
        if p.returncode == 2:
            assert "another multiexport export is writing it now" in err and len(err.strip().splitlines()) == 1
    assert sandbox.main("run", out).returncode == 0  # whoever won left a whole artifact
    assert sorted(p.name for p in sandbox.root.iterdir()) == ["a", "user"]  # no staging, lock or .old left


def test_a_full_file_system_is_refused_before_the_export_works(sandbox, monkeypatch, export_work):
    """ENOSPC for every byte written under the output's parent (a full tmpfs, measured: creating a directory or
    an empty file still works there), and no free blocks in statvfs; the export's work must not start."""
    import builtins
    import errno
    import io
    import os

    root = str(sandbox.root / "full")
    real_open, real_write, real_statvfs, real_io_open = os.open, os.write, os.statvfs, io.open
    fds = set()

    def full_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if str(path).startswith(root) and flags & (os.O_WRONLY | os.O_RDWR):
            fds.add(fd)
        return fd

    def full_write(fd, data):
        if fd in fds and len(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    class _Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_io_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and str(file).startswith(root) and any(c in mode for c in "wax+"):
            handle = real_io_open(file, mode, *args, **kwargs)  # the file is created, as on a full tmpfs
            handle.close()
            return io.BufferedWriter(_Full()) if "b" in mode else io.TextIOWrapper(io.BufferedWriter(_Full()))
        return real_io_open(file, mode, *args, **kwargs)

    def full_statvfs(path):
        st = real_statvfs(path)
        if str(path).startswith(str(sandbox.root)):
            return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, 0, 0, st.f_files, st.f_ffree,
                                      st.f_favail, st.f_flag, st.f_namemax))
        return st

    (sandbox.root / "full").mkdir()
    monkeypatch.setattr(os, "open", full_open)
    monkeypatch.setattr(os, "write", full_write)
    monkeypatch.setattr(os, "statvfs", full_statvfs)
    monkeypatch.setattr(io, "open", full_io_open)
    monkeypatch.setattr(builtins, "open", full_io_open)
    try:
        with pytest.raises(ArtifactError, match="no space left"):
            export(seed(), sandbox.root / "full" / "a", "xla")
    finally:
        monkeypatch.undo()
    assert not export_work, "the export did its work before finding the file system full"


@pytest.mark.parametrize("command", ["export", "compare", "run", "report"])
def test_an_output_path_under_a_file_is_one_line(command, artifact, seed_results, sandbox):
    under = sandbox.user / "notes.txt" / "sub"
    args = {"export": ["export", "--out-dir", under],
            "compare": ["compare", "--backends", "xla", "--no-bench", "--out-dir", under],
            "run": ["run", artifact, "--save-outputs", f"{under}.npz"],
            "report": ["report", seed_results, "--out-dir", under]}[command]
    proc = sandbox.main(*args)
    assert_one_line(proc, 2, "notes.txt")
    sandbox.assert_untouched()


def test_a_failed_export_leaves_the_previous_artifact_whole(artifact, sandbox):
    before = {p.name: p.read_bytes() for p in artifact.iterdir() if p.is_file()}
    target = Target(lambda x: x @ x, args=(np.ones((2, 3), np.float32),), name="bad")
    with pytest.raises(MultiexportError):  # a shape error while tracing: a categorised export failure
        export(target, artifact, "xla")
    assert {p.name: p.read_bytes() for p in artifact.iterdir() if p.is_file()} == before
    sandbox.assert_untouched()


def test_the_staging_directory_never_survives_next_to_the_artifact(artifact, sandbox):
    shutil.rmtree(artifact)
    export(seed(), artifact, "xla")
    assert sorted(p.name for p in sandbox.root.iterdir()) == ["art", "user"]


def test_compare_refuses_a_user_directory_holding_a_downloaded_results_json(seed_results, sandbox):
    """A results.json proves nothing about whose directory it is: the user's own report.md beside it stays."""
    project = sandbox.root / "project"
    project.mkdir()
    shutil.copy(seed_results, project / "results.json")
    (project / "report.md").write_text("my own report")
    sandbox.rebase()
    proc = sandbox.main("compare", "--backends", "xla", "--no-bench", "--out-dir", project)
    assert_one_line(proc, 2, str(project), "was not written by `multiexport compare`")
    assert (project / "report.md").read_text() == "my own report"
    sandbox.assert_untouched()


def test_compare_reuses_its_own_output_directory(sandbox):
    out = sandbox.root / "o"
    assert sandbox.main("compare", "--backends", "xla", "--no-bench", "--out-dir", out).returncode == 0
    proc = sandbox.main("compare", "--backends", "xla", "--no-bench", "--out-dir", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "results.json").is_file()
