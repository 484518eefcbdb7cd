"""Names and messages made safe to show: every target, leaf, manifest and npz member name, and every
converter message, passes `visible` before it reaches a terminal, Markdown, HTML or JUnit XML.

A name is user input: a target called "\\x1b]0;pwned\\x07" would set the terminal's window title, "\\x1b[2J"
clear the screen, U+202E (right-to-left override) show "exe.txt" for "txt.exe", and a C0 byte makes
JUnit XML not well formed. Such characters are shown escaped (`\\x1b`, `\\u202e`), so the reader sees that
they are there; everything else, non-ASCII letters included, is kept as it is.
"""

from __future__ import annotations

import re

# Bidirectional controls (embeddings, overrides, isolates, marks) and line/paragraph separators; with the
# C0/C1 controls and DEL (Unicode category Cc) these are what can rewrite how a line reads.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
# Lone surrogates (JSON can hold "\ud800") cannot be written as UTF-8; U+FFFE/U+FFFF are not XML characters.
_NOT_TEXT = "\ud800-\udfff\ufffe\uffff"
_HIDDEN = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}{_NOT_TEXT}]")
_HIDDEN_KEEP_NEWLINES = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}{_NOT_TEXT}]")
# A terminal escape sequence as a whole (CSI colour / cursor / clear, OSC window title or hyperlink, and
# the two-byte forms): removed from messages (they only ever carried colour), escaped in names.
_ESCAPE_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]"
                              r"|\x9b[0-?]*[ -/]*[@-~]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: object, keep_newlines: bool = False) -> str:
    """`value` as text with every control, C1 and bidirectional character shown as an escape (`\\x1b`,
    `\\u202e`). keep_newlines: leave `\\n` as is (multi-line messages for a log)."""
    text = str(value)
    return (_HIDDEN_KEEP_NEWLINES if keep_newlines else _HIDDEN).sub(_escape, text)


def clean_message(value: object) -> str:
    """A converter's or runtime's message for results.json and reports: terminal escape sequences (its
    colours) removed, anything else hidden shown escaped, newlines kept."""
    return visible(_ESCAPE_SEQUENCE.sub("", str(value)), keep_newlines=True)


def is_visible(text: str) -> bool:
    """True when `text` holds nothing `visible` would escape."""
    return _HIDDEN.search(text) is None
