"""The sweep's matrix: ok counted over the models XLA runs, every failure named once, escapes shown not sent."""

from __future__ import annotations

from multiexport.sweeps.matrix import Cell, Row, html, markdown, ok_counts
from multiexport.sweeps.state import DIED, DONE, RowOutcome


def _row(name: str, state: str = DONE, reason: str = "", **cells: Cell) -> Row:
    return Row(RowOutcome(name, state, 0 if state == DONE else None, 1.0, 1 if state == DONE else 2, reason), cells)


ROWS = [
    _row("a", xla=Cell("ok", p50_ms=0.25), onnx=Cell("ok")),
    _row("b", xla=Cell("ok"), onnx=Cell("unsupported-op", "no Einsum for \x1b[1mint32\nsecond line")),
    _row("c", xla=Cell("export-failed", "x"), onnx=Cell("ok")),
    _row("d", DIED, "compare was killed by SIGKILL"),
]


def test_the_matrix_counts_ok_over_the_models_xla_runs_and_names_each_failure():
    assert ok_counts(ROWS) == {"xla": (2, 2), "onnx": (1, 2)}  # c is not counted: XLA does not run it
    text = markdown(ROWS)
    assert "| **ok / models XLA runs** | | | 2/2 | 1/2 |" in text
    assert "| a | done | 1 | ok 0.25 ms | ok |" in text
    # shown as the characters \x1b[ (Markdown-escaped), the reason's first line only
    assert "- b/onnx: unsupported-op: no Einsum for \\\\x1b\\[1mint32\n" in text and "second line" not in text
    assert "- d: **died** after 2 attempt(s): compare was killed by SIGKILL" in text
    assert "\x1b" not in text  # a converter's ANSI escapes are shown, not sent to the terminal or the .md


def test_the_html_matrix_escapes_names_and_reasons():
    page = html([_row("<b>x</b>", xla=Cell("unsupported-op", '"><script>alert(1)</script>'))], "sweep <i>")
    assert "<script>" not in page and "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "<title>sweep &lt;i&gt;</title>" in page
