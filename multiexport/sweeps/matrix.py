"""The sweep's combined view: model x backend, in the terminal (Markdown), OUT/matrix.md and OUT/matrix.html.

A cell is the backend's status in that model's results.json, with the median latency at the first measured
size when the row was timed. Below the table: per backend, the ok rows over the models XLA runs (the zoo's
denominator: a model no format can export is not a gap of one format), then every cell that is not ok,
with the first line of its reason, and every task that ended without results.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import MultiexportError
from ..files import write_text_atomic
from ..files.confined import under
from ..report.text import esc, md
from ..results import load_results
from .state import DONE, RowOutcome, SweepDir

ORDER = ("xla", "savedmodel", "onnx", "iree", "litert", "openvino")


@dataclass(frozen=True)
class Cell:
    """One model x backend: status and reason from results.json; p50_ms at the first measured size
    (None when not timed); err_scale: the worst leaf's error relative to its scale (None when not compared)."""

    status: str
    reason: str = ""
    p50_ms: float | None = None
    err_scale: float | None = None


@dataclass(frozen=True)
class Row:
    """One task: how it ended and, when it wrote results.json, its cells by backend."""

    outcome: RowOutcome
    cells: dict[str, Cell] = field(default_factory=dict)


def read_row(outcome: RowOutcome, results_path: Path) -> Row:
    """The row of a task, its cells read from its results.json (none when it wrote none)."""
    if outcome.state != DONE:
        return Row(outcome)

    try:
        results = load_results(results_path)
    except Exception as exc:  # a row must not take the matrix down: it says what is wrong with it
        return Row(RowOutcome(**{**asdict(outcome), "state": "unreadable", "reason": f"{results_path}: {exc}"}))
    cells = {}
    for name, r in results.backends.items():
        first = r.first_measured()
        cells[name] = Cell(r.status.value, " ".join(r.reason.split())[:400],
                           first.latency.p50_ms if first and first.latency else None, r.worst_err_scale())
    return Row(outcome, cells)


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    """OUT/summary.json: every row, as plain JSON."""
    return {r.outcome.name: {**asdict(r.outcome), "backends": {b: asdict(c) for b, c in r.cells.items()}}
            for r in rows}


def backends_of(rows: Sequence[Row]) -> list[str]:
    seen = {b for r in rows for b in r.cells}
    return [b for b in ORDER if b in seen] + sorted(seen - set(ORDER))


def ok_counts(rows: Sequence[Row]) -> dict[str, tuple[int, int]]:
    """Per backend: (ok rows, models whose XLA row is ok)."""
    runs = [r for r in rows if r.cells.get("xla", Cell("-")).status == "ok"]
    return {b: (sum(r.cells.get(b, Cell("-")).status == "ok" for r in runs), len(runs)) for b in backends_of(rows)}


def _cell_text(cell: Cell | None) -> str:
    if cell is None:
        return "-"
    return cell.status + (f" {cell.p50_ms:.3g} ms" if cell.p50_ms is not None else "")


def markdown(rows: Sequence[Row], title: str = "") -> str:
    """The matrix as Markdown (also what the terminal shows)."""
    backends = backends_of(rows)
    lines = [f"# {md(title)}", ""] if title else []
    lines += ["| model | row | s | " + " | ".join(backends) + " |", "|---|---|---|" + "---|" * len(backends)]
    for r in rows:
        o = r.outcome
        lines.append(f"| {md(o.name)} | {md(o.state)} | {o.seconds:.0f} | "
                     + " | ".join(md(_cell_text(r.cells.get(b))) for b in backends) + " |")
    counts = ok_counts(rows)
    lines.append("| **ok / models XLA runs** | | | " + " | ".join(f"{counts[b][0]}/{counts[b][1]}" for b in backends)
                 + " |")
    lines.append("")
    for r in rows:
        if r.outcome.state != DONE:
            lines.append(f"- {md(r.outcome.name)}: **{md(r.outcome.state)}** after {r.outcome.attempts} attempt(s): "
                         f"{md(r.outcome.reason)}")
        for b, c in r.cells.items():
            if c.status != "ok":
                lines.append(f"- {md(r.outcome.name)}/{md(b)}: {md(c.status)}: {md(_first_line(c.reason))}")
    return "\n".join(lines) + "\n"


def html(rows: Sequence[Row], title: str) -> str:
    """The matrix as one self-contained HTML page (no script, no external request)."""
    backends = backends_of(rows)
    head = "".join(f"<th>{esc(b)}</th>" for b in backends)
    body = []
    for r in rows:
        o = r.outcome
        cells = "".join(
            f"<td class=\"{'ok' if c and c.status == 'ok' else 'bad' if c else 'none'}\""
            f"{' title=' + chr(34) + esc(c.reason) + chr(34) if c and c.reason else ''}>{esc(_cell_text(c))}</td>"
            for c in (r.cells.get(b) for b in backends))
        body.append(f"<tr><th>{esc(o.name)}</th><td class=\"{'ok' if o.state == DONE else 'bad'}\""
                    f"{' title=' + chr(34) + esc(o.reason) + chr(34) if o.reason else ''}>{esc(o.state)}</td>"
                    f"<td>{o.seconds:.0f}</td>{cells}</tr>")
    counts = ok_counts(rows)
    foot = "".join(f"<td>{counts[b][0]}/{counts[b][1]}</td>" for b in backends)
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + esc(title) + "</title><style>"
            "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}th,td{border:1px solid #ccc;"
            "padding:.3em .6em;text-align:left}td.ok{background:#e6f4ea}td.bad{background:#fce8e6}"
            "td.none{color:#999}</style></head><body>"
            f"<h1>{esc(title)}</h1><p>Model x backend: the status in each model's results.json, with the median "
            "latency at the first measured size; hover a cell for its reason.</p>"
            f"<table><tr><th>model</th><th>row</th><th>s</th>{head}</tr>{''.join(body)}"
            f"<tr><th>ok / models XLA runs</th><td></td><td></td>{foot}</tr></table></body></html>\n")


def write(directory: Path, rows: Sequence[Row], title: str) -> str:
    """Write summary.json, matrix.md and matrix.html into `directory`; returns the Markdown."""

    text = markdown(rows, title)
    write_text_atomic(directory / "summary.json", json.dumps(summary(rows), indent=1) + "\n")
    write_text_atomic(directory / "matrix.md", text)
    write_text_atomic(directory / "matrix.html", html(rows, title))
    return text


def rows_of(directory: Path, outcomes: Mapping[str, RowOutcome], order: Sequence[str]) -> list[Row]:
    """Every ended task's row, in `order`; a results.json reached through a link is no row's (unreadable)."""

    rows = []
    for n in (n for n in order if n in outcomes):
        try:
            path = under(directory, f"rows/{n}/results.json", f"Sweep '{directory}'")
        except MultiexportError as exc:
            o = outcomes[n]
            rows.append(Row(RowOutcome(**{**asdict(o), "state": "unreadable", "reason": str(exc)})))
            continue
        rows.append(read_row(outcomes[n], path))
    return rows


def _first_line(text: str) -> str:
    first = (text.strip().splitlines() or [""])[0]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in first)  # a converter's ANSI escapes


def merged(directories: Sequence[Path]) -> list[Row]:
    """The rows of several sweep directories (shards of one spec, say) as one list, in their order; a model
    in two of them keeps the later directory's row."""

    out: dict[str, Row] = {}
    for directory in directories:
        sweep = SweepDir.read(directory)
        ended = sweep.ended()
        for row in rows_of(directory, ended, sweep.meta.get("tasks", list(ended))):
            out[row.outcome.name] = row
    return list(out.values())
