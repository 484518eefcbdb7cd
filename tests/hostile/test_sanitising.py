"""Hostile input round 2 (issue 28): names and messages cannot rewrite what the reader sees.

A target, its leaves and a converter's message carry terminal escapes (colour, clear screen, window title),
right-to-left overrides and a bare URL; they go through a real compare (a real worker, a real export
failure), `report`, `diff --junit` and `run`. Every medium shows them escaped: the terminal, report.md
(GitHub Markdown), report.html, JUnit XML (well formed), results.json's reasons (clean).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from multiexport.backends.xla import XlaBackend
from multiexport.errors import ExportError
from multiexport.files.text import is_visible

from .conftest import assert_one_line

TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
RLO = "\u202e"
RLM = "\u200f"
COLOURED = "\x1b[1;31merror:\x1b[0m op \x1b]8;;http://evil.example\x07scatter\x1b]8;;\x07 is not supported"


class ColourfulXla(XlaBackend):
    """The XLA backend whose export fails with a message coloured the way converters colour theirs."""

    name = "xla_colourful"

    def _export_impl(self, job):
        raise ExportError(COLOURED, backend=self.name, category="unsupported-op")


TARGET = f'''
import numpy as np
from multiexport import Target


def f(d):
    return {{"out{CLEAR!r}"[1:-1]: d["x{RLO!r}"[1:-1]] + 1, "https://evil.example/leaf": d["x{RLO!r}"[1:-1]] * 2}}


target = Target(f, ({{"x{RLO!r}"[1:-1]: np.zeros(3, np.float32)}},), name="t{TITLE!r}"[1:-1] + "{RLM!r}"[1:-1])
'''


@pytest.fixture
def colourful():
    from multiexport.exporting.registry import register, unregister

    register("xla_colourful", "tests.hostile.test_sanitising:ColourfulXla")
    yield
    unregister("xla_colourful")


def _no_raw_controls(text: str, where: str) -> None:
    assert is_visible(text.replace("\n", "").replace("\t", "")), f"raw control or bidi character in {where}: {text!r}"


def test_names_and_a_converter_message_are_shown_escaped_everywhere(colourful, sandbox):
    target = sandbox.root / "evil.py"
    target.write_text(TARGET)
    out = sandbox.root / "out"
    proc = sandbox.main("compare", target, "--backends", "xla,xla_colourful", "--out-dir", out, "--trials", "1",
                        "--no-bench", "--allow-fail", "xla_colourful")
    assert proc.returncode == 0, proc.stderr
    for text, where in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        _no_raw_controls(text, where)
    assert "\\x1b]0;pwned\\x07" in proc.stdout + proc.stderr  # shown, escaped, not obeyed
    results = json.loads((out / "results.json").read_text())
    reason = results["backends"]["xla_colourful"]["reason"]
    assert "error: op scatter is not supported" in reason and "\x1b" not in reason  # stored clean (issue 27, 4d)
    md = (out / "report.md").read_text()
    _no_raw_controls(md, "report.md")
    assert "https\\://evil.example" in md and "https://evil.example" not in md  # not a GitHub autolink
    _no_raw_controls((out / "report.html").read_text(), "report.html")

    rep = sandbox.main("report", out / "results.json", "--out-dir", sandbox.root / "again")
    assert rep.returncode == 0, rep.stderr
    _no_raw_controls((sandbox.root / "again" / "report.md").read_text(), "report.md (report)")

    junit = sandbox.root / "junit.xml"
    diff = sandbox.main("diff", out / "results.json", out / "results.json", "--junit", junit)
    assert diff.returncode == 0, diff.stderr
    _no_raw_controls(diff.stdout, "diff's Markdown")
    ET.fromstring(junit.read_bytes())  # well formed


def test_a_coloured_message_in_a_crafted_results_json_is_escaped_in_reports(seed_results, sandbox):
    data = json.loads(seed_results.read_text())
    data["target"] = f"seed{TITLE}{CLEAR}{RLO}"
    data["backends"]["xla"]["reason"] = COLOURED
    data["backends"]["xla"]["status"] = "export-failed"
    path = sandbox.root / "crafted.json"
    path.write_text(json.dumps(data))
    proc = sandbox.main("report", path, "--out-dir", sandbox.root / "r")
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout, "stdout")
    for name in ("report.md", "report.html"):
        _no_raw_controls((sandbox.root / "r" / name).read_text(), name)
    junit = sandbox.root / "junit.xml"
    base = sandbox.root / "base.json"
    base.write_text(seed_results.read_text())
    diff = sandbox.main("diff", base, path, "--junit", junit)
    assert diff.returncode == 1, diff.stderr  # xla went from ok to export-failed: a regression
    _no_raw_controls(diff.stdout, "diff's Markdown")
    ET.fromstring(junit.read_bytes())  # before: "not well-formed (invalid token)"


def test_an_npz_member_named_with_escapes_is_shown_escaped(artifact, sandbox):
    import io
    import zipfile

    buf = io.BytesIO()
    np.save(buf, np.arange(10, dtype=np.int32))
    path = sandbox.root / "in.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("foo.baz.npy", buf.getvalue())
        archive.writestr(f"foo.bar{CLEAR}{TITLE}{RLO}.npy", buf.getvalue())
    proc = sandbox.main("run", artifact, "--inputs", path)
    line = assert_one_line(proc, 2, "\\x1b[2J")
    _no_raw_controls(line, "the error line")


def test_a_manifest_leaf_named_with_escapes_is_shown_escaped(artifact, sandbox):
    from .conftest import edit_manifest

    def rename(data):
        data["outputs"][0]["name"] = f"out{CLEAR}{TITLE}{RLO}"

    edit_manifest(artifact, rename)
    proc = sandbox.main("run", artifact)
    _no_raw_controls(proc.stdout + proc.stderr, "run's output")
