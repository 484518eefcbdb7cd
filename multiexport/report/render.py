"""report.md and report.html from results alone: no backend, no JAX needed to re-render.

The HTML is one self-contained file: inline CSS and SVG, a Content-Security-Policy that forbids any
request, no scripts. Every string from the results is escaped for the medium (report.text).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, MultiexportError, present
from ..files.owned import check_overwritable, write_owned_text
from ..results import MEANING, LatencyStats, Results, SizeResult, Status, load_results
from . import plots
from .deploy import DEPLOY_HEADER
from .deploy_report import DEPLOY_NOTE, deploy_section
from .load import load_columns, with_load_section
from .locate import with_locate_section
from .precision import PRECISION_HEADER, precision_rows
from .recommend import recommend
from .summary import COLUMNS, capped_note, summary_rows
from .tables import (
    COLD_HEADER,
    EXPORT_HEADER,
    NATIVE_HEADER,
    PARITY_HEADER,
    TIMELINE_HEADER,
    TIMING_HEADER,
    VERSION_HEADER,
    binding_table,
    cold_rows,
    environment_lines,
    excluded_lines,
    export_rows,
    native_lines,
    native_rows,
    parity_rows,
    setup_lines,
    timeline_rows,
    timing_line,
    timing_rows,
    version_rows,
    weights_line,
)
from .text import esc, md, md_code
from .tpu import SHIPPED_NOTE, TPU_HEADER, shipped_header, shipped_table, tpu_lines, tpu_section, tpu_table

__all__ = ["load_results", "render_html", "render_markdown", "write_reports"]


def write_reports(results: Results, out_dir: str | Path, source: str | Path | None = None) -> tuple[Path, Path]:
    """Render both reports, then write them (a failed rendering writes neither).

    source: the results.json `results` were read from, when they come from a file rather than from this
        process's compare. Such a file passed the schema's type checks but may still hold values no compare
        writes (a negative tolerance, a list where a mapping goes); the report cannot draw those, and that
        is one InputError naming the file rather than a crash.
    """
    out_dir = Path(out_dir)
    md_path, page = out_dir / "report.md", out_dir / "report.html"
    try:
        markdown, html = render_markdown(results), render_html(results)
        markdown, html = with_load_section(out_dir, markdown, html)  # compare --load's section (report.load)
        markdown, html = with_locate_section(out_dir, markdown, html)  # compare --locate's (report.locate)
    except MultiexportError:
        raise
    except Exception as exc:
        if source is None:
            raise
        raise InputError(f"Results '{source}' | holds values the report cannot draw ({type(exc).__name__}: {exc}) "
                         "although they have the right types; expected a results.json written by `multiexport "
                         "compare` (if this one is unchanged from such a run, it is a bug: please report it)") from exc
    # Only files multiexport wrote are replaced (their ownership stamp): both checked before either is written.
    for path in (md_path, page):
        check_overwritable(path, "Report")
    write_owned_text(md_path, markdown, "Report")
    write_owned_text(page, html, "Report")
    return md_path, page


def _md_table(header, rows) -> str:
    lines = ["| " + " | ".join(md(c) for c in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _statuses(results: Results) -> list[Status]:
    seen: list[Status] = []
    for r in results.backends.values():
        for s in [r.status] + [size.status for size in (r.bench.sizes if r.bench else [])]:
            if s not in seen and s is not Status.OK:
                seen.append(s)
    return seen


NATIVE_NOTE = ("Each artifact run from disk by a compiled program that reads only the artifact and its manifest "
               "(XLA: the PJRT C API; SavedModel: the TF C API; OpenVINO: its C API; IREE: iree-run-module), on the "
               "same trials, checked against jax.jit with the same tolerances. Its latency is measured inside the "
               "program (inputs on the device, one call per sample; compile and warm-up excluded) and summarised "
               "with the Python runner's statistic: the p50 of every timed call with its 95 % interval. 'paired': "
               "timed in the compare's interleaved rounds, a slice per round beside the Python runner's, so the "
               "speed-up's interval is over the same seconds of machine noise; 'alone': one run of at least 200 "
               "calls after the Python runner was timed.")


TPU_NOTE = ("jax.jit on the TPU at the default matmul precision is the TPU reference; each row's error is max|out - "
            "ref| / max|ref| against it (worst output leaf). An xla or native row passes within its bound: the larger "
            "of 1e-5 and what the TPU's own bf16 passes move that leaf (jax.jit at the default precision against "
            "highest). Latency: p50 per call with its 95 % interval, inputs on the device, each call synchronised; "
            "host-to-device and device-to-host transfers timed apart.")


PRECISION_NOTE = ("Each reduced-precision artifact beside its own format's fp32 one: speed-up = fp32 p50 / its p50 "
                  "(paired over the same rounds where both were timed together, with the ratio's 95% interval), size "
                  "ratio, and its accuracy against jax.jit over the checked trials (worst output leaf; top-k only on "
                  "class scores). Its status is its accuracy budget's verdict, not float parity's.")


def render_markdown(results: Results) -> str:
    rec = recommend(results)
    rows = summary_rows(results)
    out = [f"# multiexport report: {md(results.target)}", "", f"**{md(rec.verdict)}**", "", md(weights_line(results)), ""]
    if rec.precision:
        out[4:4] = [f"**{md(rec.precision)}**", ""]
    if rec.picks:
        out += ["| batch | fastest faithful | p50 ms | runner-up | runner-up / fastest | significant |",
                "|---|---|---|---|---|---|"]
        for p in rec.picks:
            ci = f" ({p.ratio_ci95[0]:.2f}-{p.ratio_ci95[1]:.2f})" if p.ratio_ci95 else ""
            out.append(f"| {'as exported' if p.batch is None else p.batch} | {md(p.backend)} | {p.p50_ms:.4g} | "
                       f"{md(p.runner_up or '-')} | {'-' if p.ratio_to_runner_up is None else f'{p.ratio_to_runner_up:.2f}x'}{ci} | "
                       f"{'-' if p.significant is None else ('yes' if p.significant else 'no (within noise)')} |")
        out.append("")
    out += _deploy_markdown(results)
    if rec.caveats:
        out += ["## Caveats", ""] + [f"- {md(c)}" for c in rec.caveats] + [""]
    columns, rows = load_columns(results.out_dir, COLUMNS, rows)  # compare --load's figures (report.load)
    out += ["## Summary", "", _md_table(columns, [[r[c] for c in columns] for r in rows]), ""]
    if capped_note(results):
        out += [md(capped_note(results)), ""]
    statuses = _statuses(results)
    if statuses:
        out += ["Statuses: " + "; ".join(f"`{s.value}`: {md(MEANING[s])}" for s in statuses) + ".", ""]
    if precision_rows(results):
        out += ["## Format x precision", "", md(PRECISION_NOTE), "", _md_table(PRECISION_HEADER, precision_rows(results)), ""]
    header, brow = binding_table(results)
    out += ["## Which leaves each format takes", "",
            "Parameter index (XLA, IREE) or input name (SavedModel, ONNX) per input leaf; `dropped`: the format does "
            "not take the leaf (the function never reads it); `(fed, unread)`: the interface still takes it but the "
            "module never reads it.", "", _md_table(header, brow), ""]
    prow = parity_rows(results)
    if prow:
        out += ["## Parity per output leaf (worst trial)", "",
                md(f"Against jax.jit over trials: {', '.join(t.name for t in results.trials)}.") + " `max err / scale` "
                "is the largest absolute error over the leaf's largest reference magnitude; the element-wise relative "
                "error beside it is dominated by elements that cancel to about zero.", "", _md_table(PARITY_HEADER, prow), ""]
        out += [f"- {md(line)}" for line in excluded_lines(results)] + ([""] if excluded_lines(results) else [])
    if timing_rows(results):
        out += ["## Latency against the fastest, and against the machine's peak", "", md(timing_line(results)), "",
                _md_table(TIMING_HEADER, timing_rows(results)), ""]
    if native_rows(results):
        out += ["## Native consumers (no Python)", "", NATIVE_NOTE, "", _md_table(NATIVE_HEADER, native_rows(results)), ""]
        out += [f"- {md(head)}: {md_code(rest) if head.endswith('command') else md(rest)}"
                for head, _, rest in (line.partition(": ") for line in native_lines(results))] + [""]
    if tpu_section(results):
        out += ["## TPU rows", "", md(TPU_NOTE), "", _md_table(TPU_HEADER, tpu_table(results)), ""]
        out += [f"- {md(line)}" for line in tpu_lines(results)] + [""]
        if shipped_table(results):
            out += ["## Trained on TPU, shipped to CPU", "", md(SHIPPED_NOTE), "",
                    _md_table(shipped_header(results), shipped_table(results)), ""]
    for title, head, body in (("Export time", EXPORT_HEADER, export_rows(results)),
                              ("Cold start and memory", COLD_HEADER, cold_rows(results)),
                              ("Versions: what produced each artifact and what reads it", VERSION_HEADER,
                               version_rows(results))):
        if body:
            out += [f"## {title}", "", _md_table(head, body), ""]
    if timeline_rows(results):
        out += ["## Where the time went", "", _md_table(TIMELINE_HEADER, timeline_rows(results)), ""]
    out += ["## Environment", ""] + [f"- {md(line)}" for line in setup_lines(results) + environment_lines(results)] + [""]
    return "\n".join(out)


def _deploy_markdown(results: Results) -> list[str]:
    """The deployment targets' section: the asked targets' verdicts in bold, then the table (report.deploy)."""
    section = deploy_section(results)
    if section is None:
        return []
    out = [f"## {md(section.title)}", ""]
    if section.asked:
        for sentence in section.sentences:
            out += [f"**{md(sentence)}**", ""]
    out += [md(DEPLOY_NOTE), "", _md_table(DEPLOY_HEADER, section.rows), ""]
    return out + [f"- {md(n)}" for n in section.notes] + ([""] if section.notes else [])


def _deploy_html(results: Results) -> str:
    section = deploy_section(results)
    if section is None:
        return ""
    verdicts = "".join(f"<p class='verdict'>{esc(s)}</p>" for s in section.sentences) if section.asked else ""
    notes = "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in section.notes) + "</ul>" if section.notes else ""
    return (f"<h2>{esc(section.title)}</h2>{verdicts}<p class='note'>{esc(DEPLOY_NOTE)}</p>"
            + _html_table(DEPLOY_HEADER, section.rows) + notes)


CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}.ok{color:#17702a;font-weight:bold}.bad{color:#b00020;font-weight:bold}.verdict{font-size:1.2em;
padding:.6em 1em;background:#eef6ee;border-left:4px solid #17702a}.plots{display:flex;flex-wrap:wrap;gap:1em}
code{background:#f5f5f5;padding:0 3px}.note{color:#555}
"""


def _html_table(header, rows, status_col: int | None = None) -> str:
    h = "".join(f"<th>{esc(c)}</th>" for c in header)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            cls = ""
            if i == status_col:
                cls = ' class="ok"' if c in ("ok", "pass", "reference") else ' class="bad"'
            cells.append(f"<td{cls}>{esc(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{h}</tr>{''.join(body)}</table>"


def _latency(size: SizeResult) -> LatencyStats:
    return present(size.latency, "the charts draw measured() sizes only, which all have a latency")


def _point(x: float | None, y: float | None) -> tuple[float, float]:
    # the sweep keeps sizes with a batch only, and a measured size has its throughput
    return present(x, "a swept size has a batch"), present(y, "a measured size has its throughput")


def _charts(results: Results) -> list[str]:
    plots.set_colors({n: r.display.get("color", "") for n, r in results.backends.items()})
    benches = {"jax": results.reference.bench} if results.reference.bench else {}
    benches.update({n: r.bench for n, r in results.backends.items() if r.status is Status.OK and r.bench})
    benches = {n: b for n, b in benches.items() if b.measured()}
    charts = []
    if benches:
        charts.append(plots.latency_cdf({n: _latency(b.measured()[0]).quantiles_ms for n, b in benches.items()},
                                        "Latency distribution (first batch size)"))
        sweep = {n: b.measured() for n, b in benches.items() if len(b.measured()) > 1 and all(s.batch for s in b.measured())}
        if sweep:
            charts.append(plots.lines({n: [_point(s.batch, _latency(s).p50_ms) for s in ss] for n, ss in sweep.items()},
                                      "p50 latency vs batch size", "batch size (log)", "p50 ms (log)"))
            charts.append(plots.lines({n: [_point(s.batch, s.throughput_per_s) for s in ss] for n, ss in sweep.items()},
                                      "Throughput vs batch size", "batch size (log)", "items/s (log)"))
    errors, tols = {}, {}
    for name, r in results.backends.items():
        if r.parity:
            per: dict[str, float] = {}
            for v in r.parity.leaves:
                if v.stats.compared:
                    per[v.name] = max(per.get(v.name, 0.0), v.stats.err_scale)
                tols[v.name] = v.tolerance.scale + v.tolerance.rtol
            errors[name] = per
    if errors:
        charts.append(plots.error_bars(errors, tols, "Parity: max error / leaf scale per output leaf"))
    return charts


def render_html(results: Results) -> str:
    rec = recommend(results)
    rows = summary_rows(results)
    header, brow = binding_table(results)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>multiexport: {esc(results.target)}</title><style>{CSS}</style></head><body>",
        f"<h1>multiexport report: <code>{esc(results.target)}</code></h1>",
        f"<p class='verdict'>{esc(rec.verdict)}</p>",
        f"<p class='verdict'>{esc(rec.precision)}</p>" if rec.precision else "",
        f"<p>{esc(weights_line(results))}</p>",
    ]
    parts.append(_deploy_html(results))
    if rec.caveats:
        parts.append("<h2>Caveats</h2><ul>" + "".join(f"<li>{esc(c)}</li>" for c in rec.caveats) + "</ul>")
    columns, rows = load_columns(results.out_dir, COLUMNS, rows)  # compare --load's figures (report.load)
    parts.append("<h2>Summary</h2>" + _html_table(columns, [[r[c] for c in columns] for r in rows], 1))
    if capped_note(results):
        parts.append(f"<p class='note'>{esc(capped_note(results))}</p>")
    statuses = _statuses(results)
    if statuses:
        parts.append("<p class='note'>" + "; ".join(f"<code>{esc(s.value)}</code>: {esc(MEANING[s])}" for s in statuses)
                     + ".</p>")
    if precision_rows(results):
        parts.append(f"<h2>Format x precision</h2><p>{esc(PRECISION_NOTE)}</p>"
                     + _html_table(PRECISION_HEADER, precision_rows(results), 2))
    parts.append("<div class='plots'>" + "".join(c for c in _charts(results) if c) + "</div>")
    parts.append("<h2>Which leaves each format takes</h2><p>Parameter index (XLA, IREE) or input name (SavedModel, "
                 "ONNX) per input leaf; <em>dropped</em>: the format does not take it.</p>" + _html_table(header, brow))
    prow = parity_rows(results)
    if prow:
        parts.append(f"<h2>Parity per output leaf (worst trial)</h2><p>Against jax.jit over trials: "
                     f"{esc(', '.join(t.name for t in results.trials))}.</p>" + _html_table(PARITY_HEADER, prow, 2))
        if excluded_lines(results):
            parts.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in excluded_lines(results)) + "</ul>")
    if timing_rows(results):
        parts.append(f"<h2>Latency against the fastest, and against the machine's peak</h2><p>{esc(timing_line(results))}"
                     "</p>" + _html_table(TIMING_HEADER, timing_rows(results)))
    if native_rows(results):
        parts.append(f"<h2>Native consumers (no Python)</h2><p>{esc(NATIVE_NOTE)}</p>"
                     + _html_table(NATIVE_HEADER, native_rows(results), 2))
        parts.append("<ul>" + "".join(f"<li><code>{esc(line)}</code></li>" for line in native_lines(results)) + "</ul>")
    if tpu_section(results):
        parts.append(f"<h2>TPU rows</h2><p>{esc(TPU_NOTE)}</p>" + _html_table(TPU_HEADER, tpu_table(results), 2)
                     + "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in tpu_lines(results)) + "</ul>")
        if shipped_table(results):
            parts.append(f"<h2>Trained on TPU, shipped to CPU</h2><p>{esc(SHIPPED_NOTE)}</p>"
                         + _html_table(shipped_header(results), shipped_table(results)))
    for title, head, body in (("Export time", EXPORT_HEADER, export_rows(results)),
                              ("Cold start and memory", COLD_HEADER, cold_rows(results)),
                              ("Versions", VERSION_HEADER, version_rows(results))):
        if body:
            parts.append(f"<h2>{esc(title)}</h2>" + _html_table(head, body))
    if timeline_rows(results):
        parts.append("<h2>Where the time went</h2>" + _html_table(TIMELINE_HEADER, timeline_rows(results)))
    parts.append("<h2>Environment</h2><ul>" + "".join(
        f"<li>{esc(line)}</li>" for line in setup_lines(results) + environment_lines(results)) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
