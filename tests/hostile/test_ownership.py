"""One rule for every file multiexport writes (issue 28, data loss): it overwrites or deletes only what it wrote
itself, proven by an ownership stamp (reports, JUnit XML) or by the inventory's sizes and sha256 (artifacts).

Each case is what a user has on disk: their own report.md beside a downloaded results.json, an artifact whose
weights they edited, an artifact whose manifest someone forged to list a file of theirs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from .conftest import assert_one_line, edit_manifest, run_main

pytestmark = pytest.mark.subprocess
MINE = "# my own notes\n\nnot a multiexport report\n"


@pytest.fixture
def results(seed_results, sandbox) -> Path:
    """A real results.json in the sandbox, in a directory of the user's own."""
    path = sandbox.root / "downloads" / "results.json"
    path.parent.mkdir()
    shutil.copy(seed_results, path)
    sandbox.rebase()
    return path


# -- reports ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["report.md", "report.html"])
@pytest.mark.parametrize("where", ["default", "--out-dir"])
def test_report_never_overwrites_a_report_multiexport_did_not_write(results, sandbox, name, where):
    out = results.parent if where == "default" else sandbox.root / "elsewhere"
    out.mkdir(exist_ok=True)
    (out / name).write_text(MINE)
    sandbox.rebase()
    args = ("report", results) if where == "default" else ("report", results, "--out-dir", out)
    proc = sandbox.main(*args)
    assert_one_line(proc, 2, str(out / name), "did not write")
    assert (out / name).read_text() == MINE
    sandbox.assert_untouched()  # neither report written: the other one is not half an update


def test_report_replaces_its_own_report_but_not_one_edited_since(results, sandbox):
    proc = sandbox.main("report", results)
    assert proc.returncode == 0, proc.stderr
    md = results.parent / "report.md"
    proc = sandbox.main("report", results)  # its own, untouched: replaced
    assert proc.returncode == 0, proc.stderr
    md.write_text(md.read_text().replace("multiexport", "my edit", 1))  # the user's now
    edited = md.read_text()
    proc = sandbox.main("report", results)
    assert_one_line(proc, 2, str(md), "edited since")
    assert md.read_text() == edited


def test_report_never_writes_through_a_symlink(results, sandbox):
    os.symlink(sandbox.user / "notes.txt", results.parent / "report.md")
    sandbox.rebase()
    proc = sandbox.main("report", results)
    assert_one_line(proc, 2, "report.md", "a link")
    sandbox.assert_untouched()


def test_diff_never_overwrites_a_junit_file_multiexport_did_not_write(seed_results, sandbox):
    junit = sandbox.user / "junit.xml"
    junit.write_text("<mine/>\n")
    sandbox.rebase()
    proc = sandbox.main("diff", seed_results, seed_results, "--junit", junit)
    assert_one_line(proc, 2, str(junit), "did not write")
    assert junit.read_text() == "<mine/>\n"
    ours = sandbox.root / "ci" / "junit.xml"
    for _ in range(2):  # its own file is replaced
        proc = sandbox.main("diff", seed_results, seed_results, "--junit", ours)
        assert proc.returncode == 0, proc.stderr
    import xml.etree.ElementTree as ET

    assert ET.parse(ours).getroot().tag == "testsuite"  # the stamp is an XML comment: still well formed


# -- artifacts ----------------------------------------------------------------------------------------------

def _model_file(art: Path) -> str:
    files = json.loads((art / "manifest.json").read_text())["files"]
    return next(name for name in files.values() if name.endswith(".jax_exported"))


@pytest.mark.parametrize("edit", ["same-size", "longer"])
def test_export_never_replaces_an_artifact_whose_files_the_user_edited(artifact, sandbox, edit):
    name = _model_file(artifact)
    path = artifact / name
    data = bytearray(path.read_bytes())
    if edit == "same-size":
        data[len(data) // 2] ^= 0xFF  # only a hash tells this apart
    else:
        data += b"my addition"
    path.write_bytes(bytes(data))
    sandbox.rebase()
    proc = sandbox.main("export", "--backend", "xla", "--out-dir", artifact)
    assert_one_line(proc, 2, str(artifact), name, "not what its export wrote")
    assert path.read_bytes() == bytes(data)
    sandbox.assert_untouched()


def test_export_replaces_its_own_untouched_artifact(artifact, sandbox):
    proc = sandbox.main("export", "--backend", "xla", "--out-dir", artifact)
    assert proc.returncode == 0, proc.stderr
    proc = sandbox.main("export", "--backend", "xla", "--out-dir", artifact)
    assert proc.returncode == 0, proc.stderr
    sandbox.assert_untouched("art")


@pytest.mark.parametrize("forgery", ["size only", "wrong hash", "symlink"])
def test_a_forged_inventory_never_deletes_a_users_file(artifact, sandbox, forgery):
    notes = artifact / "notes.txt"
    if forgery == "symlink":
        os.symlink(sandbox.user / "notes.txt", notes)
        digest = hashlib.sha256(b"precious").hexdigest()  # even the right hash of the link's target
    else:
        notes.write_text("my notes")
        digest = "0" * 64 if forgery == "wrong hash" else None

    def forge(m):
        m["inventory"]["notes.txt"] = 8
        if digest is None:
            m.pop("inventory_sha256", None)
        else:
            m.setdefault("inventory_sha256", {})["notes.txt"] = digest

    edit_manifest(artifact, forge)
    sandbox.rebase()
    proc = sandbox.main("export", "--backend", "xla", "--out-dir", artifact)
    assert_one_line(proc, 2, str(artifact))
    assert os.path.lexists(notes)
    sandbox.assert_untouched()


# -- files a user names: run/native --out, report --screenshot ---------------------------------------------

@pytest.mark.parametrize("command", ["run", "native"])
def test_out_never_overwrites_an_npz_multiexport_did_not_write(artifact, sandbox, command):
    import numpy as np

    if command == "native":
        from multiexport.backends.xla.runtime import find_pjrt_plugin
        from multiexport.native.build import NativeBuildError

        try:
            find_pjrt_plugin(None)
        except NativeBuildError as exc:
            pytest.skip(f"no PJRT plugin: {exc}")
    mine = sandbox.user / "results.npz"
    np.savez(mine, answer=np.arange(3))
    before = mine.read_bytes()
    sandbox.rebase()
    proc = sandbox.main(command, artifact, "--save-outputs", mine)
    assert_one_line(proc, 2, str(mine), "did not write")
    assert mine.read_bytes() == before
    ours = sandbox.root / "out.npz"
    for _ in range(2):  # its own output is replaced
        proc = sandbox.main(command, artifact, "--save-outputs", ours)
        assert proc.returncode == 0, proc.stderr
    assert int(np.load(ours)["out"]) == 45
    sandbox.assert_untouched("out.npz")


def test_report_screenshot_never_overwrites_a_picture_of_the_users(results, sandbox):
    shot = sandbox.user / "holiday.png"
    shot.write_bytes(b"\x89PNG\r\n\x1a\nmine")
    sandbox.rebase()
    proc = sandbox.main("report", results, "--screenshot", shot)
    assert_one_line(proc, 2, str(shot), "did not write")
    assert shot.read_bytes() == b"\x89PNG\r\n\x1a\nmine"
    sandbox.assert_untouched()  # refused before the reports were written


@pytest.mark.slow
def test_report_screenshot_replaces_its_own_picture(results, tmp_path):
    from multiexport.report.screenshot import find_browser, screenshot

    if find_browser() is None:
        pytest.skip("no Chromium on PATH")
    proc = run_main("report", results, "--out-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / "shot.png"
    for _ in range(2):
        screenshot(tmp_path / "report.html", shot)
    assert shot.read_bytes().startswith(b"\x89PNG")
