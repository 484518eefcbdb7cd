"""files.text: every control, C1, bidirectional and non-text character shown escaped; messages lose their colours.
The property tests (random names through the sanitiser into Markdown, HTML, JUnit XML) are in
tests/hostile/test_names.py, where hypothesis keeps no files in the repository."""

from __future__ import annotations

from multiexport.files.text import clean_message, visible


def test_escapes_are_shown_not_obeyed():
    assert visible("t\x1b]0;pwned\x07x") == "t\\x1b]0;pwned\\x07x"
    assert visible("\x1b[2Jclear") == "\\x1b[2Jclear"
    assert visible("exe.\u202etxt") == "exe.\\u202etxt"
    assert visible("caf\u00e9 \u6a21\u578b") == "caf\u00e9 \u6a21\u578b"  # letters stay letters
    assert visible("a\nb") == "a\\x0ab" and visible("a\nb", keep_newlines=True) == "a\nb"


def test_a_converter_message_loses_its_colours_and_hyperlinks():
    raw = "\x1b[1;31merror:\x1b[0m op \x1b]8;;http://evil.example\x07scatter\x1b]8;;\x07 unsupported\x9b2J\x1bc"
    assert clean_message(raw) == "error: op scatter unsupported"


def test_a_bare_url_in_a_name_is_not_a_github_autolink():
    from multiexport.report.text import md

    shown = md("leaf https://evil.example/x and http://e.x and www.evil.example")
    # a backslash before ':' or '.' is a CommonMark escape: rendered as the character, not matched as a link
    assert "https\\://evil.example/x" in shown and "http\\://e.x" in shown and "www\\.evil.example" in shown
    assert "://" not in shown.replace("\\://", "")
