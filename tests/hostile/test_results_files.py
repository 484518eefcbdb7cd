"""Files a user hands to multiexport (issue 16, items 13, 14 and 15): .npz inputs and results.json.

Each bad file is one line naming the file and what was expected, exit 2; text from a results.json (target,
leaf and reason strings) is escaped in report.md, report.html and diff's Markdown.

tests/files/test_npz.py covers load_npz in-process (10^12-element header, crafted __dtypes__, pickles,
duplicates); tests/report/test_report.py::test_report_of_a_bad_file_is_a_clear_error and
tests/report/test_regression.py::test_diff_markdown_escapes_html_and_newlines_from_reasons cover a few
results cases. Here: the same hostile files through the commands, and values that pass the type check.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile

import numpy as np
import pytest

from .conftest import assert_one_line


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _huge_header() -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i4", "fortran_order": False, "shape": (10**12,)})
    return buf.getvalue() + b"\0" * 40


# -- items 13 and 15: .npz inputs -------------------------------------------------------------------------------

BAD_INPUTS = {
    "zero bytes": (lambda p: p.write_bytes(b""), "is not a zip archive"),
    "a renamed .npy": (lambda p: p.write_bytes(_npy(np.arange(10, dtype=np.int32))), "is not a zip archive"),
    "a pickle": (lambda p: p.write_bytes(pickle.dumps({"foo.baz": list(range(10))})), "is not a zip archive"),
    "10^12 elements": (lambda p: _zip(p, {"foo.baz.npy": _huge_header()}), "claims shape (1000000000000,)"),
    "__dtypes__ not JSON": (lambda p: _zip(p, {"foo.baz.npy": _npy(np.zeros(10, "V4")),
                                                "__dtypes__.npy": _npy(np.frombuffer(b"\xff\xfe", np.uint8))}),
                            "entry '__dtypes__' is not a JSON mapping"),
    "__dtypes__ ghost": (lambda p: _zip(p, {"foo.baz.npy": _npy(np.zeros(10, "V4")), "__dtypes__.npy": _npy(
        np.frombuffer(json.dumps({"ghost": "bfloat16"}).encode(), np.uint8))}), "names 'ghost'"),
    "truncated zip": (lambda p: p.write_bytes(_zip(p, {"foo.baz.npy": _npy(np.zeros(10, np.int32))}).read_bytes()[:60]),
                      "in.npz"),
}


@pytest.mark.parametrize("label", list(BAD_INPUTS))
def test_a_bad_inputs_file_is_one_line_naming_it(label, artifact, sandbox):
    make, fragment = BAD_INPUTS[label]
    path = sandbox.root / "in.npz"
    make(path)
    sandbox.rebase()
    proc = sandbox.main("run", artifact, "--inputs", path)
    assert_one_line(proc, 2, str(path), fragment)
    sandbox.assert_untouched()


def test_an_npz_member_named_with_a_nul_byte_is_one_line(artifact, sandbox):
    path = _zip(sandbox.root / "in.npz", {"Qfoo.baz.npy": _npy(np.arange(10, dtype=np.int32))})
    path.write_bytes(path.read_bytes().replace(b"Qfoo.baz.npy", b"\x00foo.baz.npy"))
    proc = sandbox.main("run", artifact, "--inputs", path)
    assert_one_line(proc, 2, str(path))


def _raw_npy(header: bytes, data: bytes = b"") -> bytes:
    body = header + b" " * (64 - (10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body + data


@pytest.mark.parametrize("header", [b"[", b"{'descr': '<i4', 'fortran_order': False, 'shape': (10,"])
def test_an_npy_header_that_does_not_parse_is_one_line(header, artifact, sandbox):
    path = _zip(sandbox.root / "in.npz", {"foo.baz.npy": _raw_npy(header, b"\0" * 40)})
    proc = sandbox.main("run", artifact, "--inputs", path)
    assert_one_line(proc, 2, str(path), "foo.baz")


def test_a_directory_as_inputs_says_it_is_a_directory(artifact, sandbox):
    proc = sandbox.main("run", artifact, "--inputs", sandbox.user)
    assert_one_line(proc, 2, str(sandbox.user), "is a directory, expected an .npz")


def test_an_empty_npz_names_the_leaves_it_lacks(artifact, sandbox):
    path = _zip(sandbox.root / "in.npz", {})
    for args in (["run", artifact, "--inputs", path],
                 ["compare", "--backends", "xla", "--no-bench", "--out-dir", sandbox.root / "o", "--inputs", path]):
        proc = sandbox.main(*args)
        assert_one_line(proc, 2, "Input 'foo.ba", "| got nothing, expected an array")
    assert not (sandbox.root / "o" / "results.json").exists()


# -- item 13: results.json with wrong types -------------------------------------------------------------------

def _edit_results(src, dst, edit):
    data = json.loads(src.read_text())
    new = edit(data)
    dst.write_text(json.dumps(data if new is None else new))
    return dst


WRONG_TYPES = {
    "a list": lambda d: [],
    "backends a list": lambda d: d.update(backends=[]),
    "status a number": lambda d: d["backends"]["xla"].update(status=7),
    "trials a string": lambda d: d.update(trials="x"),
    "bench sizes": lambda d: d["backends"]["xla"].update(bench={"sizes": [{}]}),
    "parity leaves": lambda d: d["backends"]["xla"]["parity"].update(leaves="x"),
    "schema": lambda d: d.update(schema="multiexport.results/99"),
}


@pytest.mark.parametrize("label", list(WRONG_TYPES))
def test_report_and_diff_of_a_results_json_with_wrong_types_is_one_line(label, seed_results, sandbox):
    bad = _edit_results(seed_results, sandbox.root / "r.json", WRONG_TYPES[label])
    sandbox.rebase()
    proc = sandbox.main("report", bad, "--out-dir", sandbox.root / "rep")
    assert_one_line(proc, 2, str(bad))
    assert not (sandbox.root / "rep").exists()
    proc = sandbox.main("diff", seed_results, bad)
    assert_one_line(proc, 2, str(bad))
    sandbox.assert_untouched()


# Values of the right type that the report cannot draw: found by fuzzing real results.json files.
WRONG_VALUES = {
    "supports.dims a string": lambda d: d["backends"]["xla"]["supports"].update(dims="any"),
    "supports.dims sizes a number": lambda d: d["backends"]["xla"]["supports"].update(dims={"b": 3}),
    "device.found a list": lambda d: d["device"].update(found=[1]),
    "tolerance.scale negative": lambda d: d["backends"]["xla"]["parity"]["leaves"][-1]["tolerance"].update(scale=-1),
    "tolerance.scale inf": lambda d: d["backends"]["xla"]["parity"]["leaves"][-1]["tolerance"].update(scale="inf"),
}


@pytest.mark.parametrize("label", list(WRONG_VALUES))
def test_report_of_a_results_json_with_values_it_cannot_draw_is_one_line(label, seed_results, sandbox):
    bad = _edit_results(seed_results, sandbox.root / "r.json", WRONG_VALUES[label])
    proc = sandbox.main("report", bad, "--out-dir", sandbox.root / "rep")
    assert_one_line(proc, 2, str(bad))


def test_a_baseline_that_is_not_a_results_json_is_refused_before_the_compare(sandbox):
    bad = sandbox.root / "base.json"
    bad.write_text("{nope")
    proc = sandbox.main("compare", "--backends", "xla", "--no-bench", "--out-dir", sandbox.root / "o", "--baseline", bad)
    assert_one_line(proc, 2, str(bad), "unreadable")
    assert not (sandbox.root / "o" / "results.json").exists()


# -- item 14: escaping ------------------------------------------------------------------------------------------

EVIL_TARGET = "T<img src=x onerror=alert(1)>"
EVIL_REASON = "first line\n# INJECTED HEADING\n<script>alert('reason')</script> | a | table |"
EVIL_LEAF = "out<b>bold</b>"
EVIL_CORES = "<script>alert('cores')</script>"


def _evil(data):
    data["target"] = EVIL_TARGET
    row = data["backends"]["xla"]
    row["status"], row["reason"] = "run-failed", EVIL_REASON
    for leaf in data["signature"]["outputs"]:
        leaf["name"] = EVIL_LEAF
    for leaf in row["parity"]["leaves"]:
        leaf["name"] = EVIL_LEAF
    data["environment"]["cores"] = EVIL_CORES


def _raw(text: str) -> list[str]:
    return [s for s in ("<img", "<script", "<b>") if s in text]


def test_report_md_and_html_escape_target_leaf_reason_and_environment(seed_results, sandbox):
    evil = _edit_results(seed_results, sandbox.root / "evil.json", _evil)
    proc = sandbox.main("report", evil, "--out-dir", sandbox.root / "rep")
    assert proc.returncode == 0, proc.stderr
    md = (sandbox.root / "rep" / "report.md").read_text()
    page = (sandbox.root / "rep" / "report.html").read_text()
    assert not _raw(md), _raw(md)
    assert "\n# INJECTED" not in md and "\n#INJECTED" not in md
    body = page.split("<body", 1)[-1]
    assert "<img" not in body and "<b>bold" not in body and "alert('reason')</script>" not in body
    assert "alert('cores')</script>" not in body and "&lt;script&gt;" in body


def test_diff_markdown_escapes_hostile_results(seed_results, sandbox, monkeypatch):
    """The terminal gets plain one-line checks (a newline in a reason cannot start a line of its own); the
    Markdown appended to $GITHUB_STEP_SUMMARY, which a CI page renders, has no raw HTML and no injected heading."""
    evil = _edit_results(seed_results, sandbox.root / "evil.json", _evil)
    summary = sandbox.root / "out" / "summary.md"
    summary.parent.mkdir(exist_ok=True)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    proc = sandbox.main("diff", seed_results, evil)
    assert proc.returncode == 1, proc.stderr  # ok -> run-failed is a regression
    assert "\n# INJECTED" not in proc.stdout and "\x1b" not in proc.stdout
    assert "&gt;" not in proc.stdout and "&lt;" not in proc.stdout  # plain text, not Markdown's entities
    md = summary.read_text()
    assert "run-failed" in md, md
    assert not _raw(md), md
    assert "\n# INJECTED" not in md
