"""Hostile input round 2 (issue 28): every read of a user's or an artifact's file is bounded.

Real special files (a FIFO, /dev/zero, a symlink to it), a real deflate bomb (a 1 MB member that inflates to
1 GiB), JSON nested 100 000 deep, through the commands: each is refused at once with one line, exit 2,
never a hang, a RecursionError (exit 70) or a gigabyte allocated.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
import zlib

import numpy as np
import pytest

from .conftest import assert_one_line, edit_manifest, refresh_inventory

DEEP = "[" * 100_000 + "]" * 100_000


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """An .npz whose member 'foo.baz' is a 1 GiB int32 array of zeros deflated to about 1 MB (ratio ~1000:1)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i4", "fortran_order": False, "shape": (1 << 28,)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("foo.bar.npy", _npy(np.arange(10, dtype=np.int32)))
        with archive.open(zipfile.ZipInfo("foo.baz.npy"), "w", force_zip64=True) as fh:
            # ZipInfo's default is stored: the deflate happens here, through zipfile's own writer
            fh._compressor = zlib.compressobj(9, zlib.DEFLATED, -15)  # type: ignore[attr-defined]
            fh._zinfo.compress_type = zipfile.ZIP_DEFLATED  # type: ignore[attr-defined]
            fh.write(header.getvalue())
            zeros = bytes(1 << 24)
            for _ in range(64):
                fh.write(zeros)
    assert path.stat().st_size < 2 << 20
    return path


def _cli(sandbox, *args):
    """`python -m multiexport ARGS` with a 60 s limit and at most 3 GiB of address space: what used to hang or
    grow without bound fails the test instead of the machine."""
    import subprocess
    import sys

    boot = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "sys.argv[0] = 'multiexport'; runpy.run_module('multiexport', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", boot, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(sandbox.tmp)}, timeout=60)


def _special(kind: str, where):
    if kind == "fifo":
        path = where / "fifo"
        os.mkfifo(path)
        return path
    if kind == "dev-zero":
        return "/dev/zero"
    path = where / "link"
    path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "symlink-to-dev-zero"])
@pytest.mark.parametrize("command", ["report", "diff"])
def test_report_and_diff_refuse_a_special_file_at_once(command, kind, seed_results, sandbox):
    path = _special(kind, sandbox.root)
    sandbox.rebase()
    args = ["report", path, "--out-dir", sandbox.root / "r"] if command == "report" else ["diff", seed_results, path]
    proc = _cli(sandbox, *args)  # before: report on /dev/zero grew without bound, a FIFO hung forever
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert_one_line(proc, 2, str(path), what)
    sandbox.assert_untouched()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "symlink-to-dev-zero"])
def test_run_refuses_special_inputs_files(kind, artifact, sandbox):
    path = _special(kind, sandbox.root)
    proc = sandbox.main("run", artifact, "--inputs", path)
    assert_one_line(proc, 2, str(path), "a FIFO" if kind == "fifo" else "a character device")


def test_a_deflate_bomb_inputs_file_is_refused_before_inflating(bomb, artifact, sandbox):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    proc = sandbox.main("run", artifact, "--inputs", bomb)
    assert_one_line(proc, 2, str(bomb), "member 'foo.baz.npy' would inflate to 1073741952 bytes", "deflate bomb")
    # nothing near 1 GiB was allocated (peak RSS grew by less than 256 MiB; before: +2 GiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 << 10


def test_an_artifacts_example_inputs_bomb_is_refused_before_inflating(bomb, artifact, sandbox):
    shutil.copy(bomb, artifact / "example_inputs.npz")
    refresh_inventory(artifact)
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, "example_inputs.npz", "deflate bomb")


def test_deep_json_in_a_manifest_is_one_line(artifact, sandbox):
    edit_manifest(artifact, lambda d: d.update(deep=[]))
    path = artifact / "manifest.json"
    path.write_text(path.read_text().replace('"deep": []', f'"deep": {DEEP}'))
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, str(path), "nested deeper than 64 levels")


def test_deep_json_in_dtypes_is_one_line(artifact, sandbox):
    path = sandbox.root / "in.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("foo.baz.npy", _npy(np.arange(10, dtype=np.int32)))
        archive.writestr("__dtypes__.npy", _npy(np.frombuffer(DEEP.encode(), np.uint8)))
    proc = sandbox.main("run", artifact, "--inputs", path)
    assert_one_line(proc, 2, str(path), "'__dtypes__'", "nested deeper than 64 levels")


@pytest.mark.parametrize("command", ["report", "diff"])
def test_deep_json_in_a_results_json_is_one_line(command, seed_results, sandbox):
    path = sandbox.root / "deep.json"
    path.write_text(DEEP)
    args = ["report", path, "--out-dir", sandbox.root / "r"] if command == "report" else ["diff", seed_results, path]
    proc = sandbox.main(*args)
    assert_one_line(proc, 2, str(path), "nested deeper than 64 levels")


def test_a_manifest_that_is_a_fifo_is_refused_at_once(artifact, sandbox):
    (artifact / "manifest.json").unlink()
    os.mkfifo(artifact / "manifest.json")
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, "manifest.json", "a FIFO")


def test_safetensors_header_nested_deep_is_an_artifact_error(tmp_path):
    from multiexport.errors import ArtifactError
    from multiexport.files.safetensors import read_safetensors

    header = DEEP.encode()
    path = tmp_path / "weights.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ArtifactError, match="nested deeper"):
        dict(read_safetensors(path))


def test_results_json_is_read_once_with_json_depth_counted_iteratively():
    from multiexport.files.bounded import nesting

    deep: list = []
    for _ in range(10_000):  # deeper than Python's recursion limit: counting it must not recurse
        deep = [deep]
    assert nesting(deep, 64) == 65
    assert nesting({"a": [1, {"b": 2}]}, 64) == 3
    json.dumps({"ok": True})
