"""Hostile input round 2 (issue 28): random names, control and bidirectional characters among them,
through the sanitiser into every medium: nothing hidden survives, JUnit XML stays well formed, every
string can be written as UTF-8 (tests/files/test_text.py has the fixed cases)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given, settings, strategies as st

from multiexport.files.text import is_visible, visible

HIDDEN = [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)] + list(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029\ufffe\uffff\ud800\udfff")
NAMES = st.text(alphabet=st.sampled_from(HIDDEN) | st.characters(), max_size=30)


@settings(max_examples=100)
@given(NAMES)
def test_visible_text_holds_nothing_hidden_and_encodes(name):
    shown = visible(name)
    assert is_visible(shown)
    assert not any(ch in shown for ch in HIDDEN)
    shown.encode("utf-8")  # a lone surrogate would raise here (and in every atomic write)


@settings(max_examples=100)
@given(NAMES)
def test_any_name_makes_well_formed_junit_xml(name):
    from multiexport.report.regression import Check, Diff, junit

    diff = Diff([Check(name, name, "regression", f"{name} got slower", 1.0, 2.0, 2.0)], 1.5, 10.0)
    root = ET.fromstring(junit(diff, suite=name).encode("utf-8"))  # before: not well formed on a C0 byte
    case = root.find("testcase")
    assert case is not None and case.get("name") == visible(name)


@settings(max_examples=100)
@given(NAMES)
def test_any_name_in_markdown_and_html_holds_no_control_or_bidi_character(name):
    from multiexport.report.text import esc, md, md_code, one_line

    for rendered in (md(name), md_code(name), esc(name), one_line(name)):
        assert is_visible(rendered), repr(rendered)
