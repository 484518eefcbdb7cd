"""The load report: the verdicts for a server, the summary table (max rate under the p99 bound, offline peak), the
per-rate table and the latency-vs-throughput plot (load.md, load.html; the HTML fragment also goes into a compare's
report.html when it ran `--load`)."""

from __future__ import annotations

import html
import math
import statistics
from pathlib import Path
from typing import Sequence

from ..results.bench import BASELINE_PREFIX
from ..results.load import LoadResults, LoadRow, read_load_results
from .load_verdicts import by_driver, driver_short, multistream_verdict, number as _num, verdicts as verdicts
from .plots import PALETTE, latency_throughput, set_colors
from .regression import PAIRED_AB, Check, Diff

# The throughput rules' default thresholds (benchmarks/load.md, "The throughput gate's calibration"): paired, A/A
# 0/24 at 1.25 (1/24 at 1.10) with a planted 1.5x drop found 19/24 at both; cross-run, A/A 3/36 at 1.5 and 0/36 at 2.
PAIRED_THROUGHPUT = 1.25
CROSS_RUN_THROUGHPUT = 2.0


def _range(median: float | None, low: float | None, high: float | None) -> str:
    if median is None:
        return "-"
    return f"{_num(median)} [{_num(low)}, {_num(high)}]"


def summary_rows(results: LoadResults) -> list[list[str]]:
    """Per format: max rate under the bound [rounds' range], offline peak [range] at its batch, single-stream p50."""
    out = []
    for row in results.rows:
        if not row.ok:
            out.append([row.name, row.status, "-", "-", "-", "-", row.reason[:200]])
            continue
        server = row.server
        rate = _range(server.max_rate_per_s, server.max_rate_low, server.max_rate_high) if server else "-"
        peak = row.offline_peak()
        offline = (f"{_range(peak.samples_per_s, peak.low, peak.high)} (batch {peak.batch if peak.batch else '-'})"
                   if peak else "-")
        multi = row.multistream
        multistream = (f"{_range(multi.p99_ms, multi.p99_low_ms, multi.p99_high_ms)} ({multi.samples_per_query}/query)"
                       if multi else "-")
        out.append([row.name, "ok", rate, offline, multistream, _num(row.single_stream_p50_ms), _config_text(row)])
    return out


SUMMARY_HEADER = ["format", "status", "max req/s at p99 bound [rounds]", "offline peak samples/s [rounds]",
                  "multistream p99 ms [rounds]", "single-stream p50 ms", "throughput configuration"]
MULTISTREAM_HEADER = ["format", "samples/query", "queries", "p50 ms", "p90 ms", "p99 ms [rounds]", "samples/s"]
RATE_HEADER = ["format", "target req/s", "achieved req/s", "requests", "p50 ms", "p90 ms", "p99 ms [rounds]",
               "meets bound"]
OFFLINE_HEADER = ["format", "batch", "samples/s [rounds]", "calls", "note"]


def _config_text(row: LoadRow) -> str:
    shown = {k: v for k, v in row.throughput_config.items() if k != "how"}
    how = row.throughput_config.get("how", "")
    extra = ", ".join(f"{k}={v}" for k, v in shown.items())
    return "; ".join(t for t in (str(how), extra) if t)


def rate_rows(results: LoadResults) -> list[list[str]]:
    out = []
    for row in results.rows:
        for p in row.server.points if row.server else []:
            out.append([row.name, _num(p.rate_per_s), _num(p.achieved_per_s), str(p.n), _num(p.p50_ms),
                        _num(p.p90_ms), f"{_num(p.p99_ms)} [{_num(p.p99_low_ms)}, {_num(p.p99_high_ms)}]",
                        "yes" if p.meets_bound else "no"])
    return out


def multistream_rows(results: LoadResults) -> list[list[str]]:
    out = []
    for row in results.rows:
        m = row.multistream
        if m is not None:
            out.append([row.name, str(m.samples_per_query), str(m.queries), _num(m.p50_ms), _num(m.p90_ms),
                        f"{_num(m.p99_ms)} [{_num(m.p99_low_ms)}, {_num(m.p99_high_ms)}]", _num(m.samples_per_s)])
    return out


def offline_rows(results: LoadResults) -> list[list[str]]:
    out = []
    for row in results.rows:
        for p in row.offline:
            out.append([row.name, str(p.batch) if p.batch else "example", _range(p.samples_per_s, p.low, p.high),
                        str(p.calls), p.reason])
    return out


def _md(header: list[str], rows: list[list[str]]) -> str:
    cells = [[c.replace("|", "\\|") for c in row] for row in rows]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
                      *("| " + " | ".join(r) + " |" for r in cells)])


def render_markdown(results: LoadResults) -> str:
    config = results.config
    parts = ["# Load", "", f"Scenario {config.get('scenario')}, p99 bound {config.get('p99_ms')} ms, "
             f"{config.get('rounds')} rounds of {config.get('seconds')} s per rate and size, "
             f"{results.machine.get('threads')} thread(s) per format on {results.machine.get('cpu_count')} cores; "
             "latency from each request's scheduled (Poisson) arrival to its completion.", ""]
    for line in (results.server_verdict, multistream_verdict(results), results.single_stream_verdict):
        if line:
            parts += [f"**{line}**", ""]
    if results.rankings_differ is not None:
        parts += ["The server ranking " + ("differs from" if results.rankings_differ else "is the same as")
                  + " the single-stream one.", ""]
    parts += [_md(SUMMARY_HEADER, summary_rows(results)), ""]
    if rate_rows(results):
        parts += ["## Server: latency per target rate", "", _md(RATE_HEADER, rate_rows(results)), ""]
    if offline_rows(results):
        parts += ["## Offline: samples per second", "", _md(OFFLINE_HEADER, offline_rows(results)), ""]
    if multistream_rows(results):
        parts += ["## MultiStream: query latency", "", _md(MULTISTREAM_HEADER, multistream_rows(results)), ""]
    return "\n".join(parts)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def plot(results: LoadResults) -> str:
    """The latency-vs-throughput chart: per format, each rate's pooled p99 against the rate it achieved."""
    series: dict[str, Sequence[tuple[float, float]]] = {
        row.name: [(p.achieved_per_s, p.p99_ms) for p in row.server.points]
              for row in results.rows if row.server is not None and row.server.points}
    bound = float(results.config.get("p99_ms") or 0.0) or 1.0
    set_colors({name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)})  # one colour per format here
    return latency_throughput(series, bound, "Server scenario: p99 latency against throughput")


def html_section(results: LoadResults) -> str:
    """The load section of an HTML page: verdicts, tables, the plot."""
    parts = ["<h2>Load</h2>"]
    for line in (results.server_verdict, multistream_verdict(results), results.single_stream_verdict):
        if line:
            parts.append(f"<p><strong>{html.escape(line)}</strong></p>")
    if results.rankings_differ is not None:
        parts.append("<p>The server ranking " + ("differs from" if results.rankings_differ else "is the same as")
                     + " the single-stream one.</p>")
    parts.append(_html_table(SUMMARY_HEADER, summary_rows(results)))
    chart = plot(results)
    if chart:
        parts.append(f"<figure>{chart}</figure>")
    if rate_rows(results):
        parts += ["<h3>Server: latency per target rate</h3>", _html_table(RATE_HEADER, rate_rows(results))]
    if offline_rows(results):
        parts += ["<h3>Offline: samples per second</h3>", _html_table(OFFLINE_HEADER, offline_rows(results))]
    if multistream_rows(results):
        parts += ["<h3>MultiStream: query latency</h3>", _html_table(MULTISTREAM_HEADER, multistream_rows(results))]
    return "\n".join(parts)


def render_html(results: LoadResults) -> str:
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>multiexport load</title><style>{style}</style>"
            f"</head><body>{html_section(results)}</body></html>")


def write_load_reports(results: LoadResults, out_dir: Path) -> tuple[Path, Path]:
    """load.md and load.html in `out_dir`."""
    md, page = out_dir / "load.md", out_dir / "load.html"
    md.write_text(render_markdown(results))
    page.write_text(render_html(results))
    return md, page


LOAD_COLUMNS = ("max req/s at p99 bound", "offline peak /s")


def beside(out_dir: str | Path) -> LoadResults | None:
    """The load.json a compare --load wrote beside its results (None: none there)."""
    path = Path(out_dir) / "load.json"
    return read_load_results(path) if path.is_file() else None


def load_columns(out_dir: str | Path, columns: Sequence[str], rows: list[dict]) -> tuple[tuple[str, ...], list[dict]]:
    """The compare's summary table with the load figures where `compare --load` ran (OUT/load.json): the max rate
    under the p99 bound and the offline peak [rounds' range] on each format's first row (a format's figures, not a
    batch size's), each cell naming its driver when the rows ran under more than one; unchanged without a
    load.json."""
    loaded = beside(out_dir)
    if loaded is None:
        return tuple(columns), rows
    cells: dict[str, list[str]] = {}
    mixed = len(by_driver([r for r in loaded.rows if r.ok])) > 1  # then each cell says its driver
    for row in loaded.rows:
        server, peak = row.server, row.offline_peak()
        bound = f" (p99 <= {server.p99_bound_ms:g} ms)" if server else ""
        driver = f" [{driver_short(row)}]" if mixed and row.ok else ""
        cells[row.name] = [
            (_range(server.max_rate_per_s, server.max_rate_low, server.max_rate_high) + bound + driver) if server
            else "-",
            (_range(peak.samples_per_s, peak.low, peak.high) + driver if peak else "-") if row.ok else row.status]
    out, seen = [], set()
    for r in rows:
        got = cells.get(r["backend"]) if r["backend"] not in seen else None
        seen.add(r["backend"])
        out.append({**r, **dict(zip(LOAD_COLUMNS, got or ["", ""]))})
    return (*columns, *LOAD_COLUMNS), out


def with_load_section(out_dir: Path, markdown: str, page: str) -> tuple[str, str]:
    """A compare's report.md and report.html with the Load section added when OUT/load.json exists (`compare
    --load` wrote it), and its verdicts for a server placed under the single-stream verdict at the top (the
    report's first bold line); unchanged otherwise."""
    loaded = beside(out_dir)
    if loaded is None:
        return markdown, page
    section = render_markdown(loaded).replace("# Load", "## Load", 1).replace("\n## ", "\n### ")
    html_part = html_section(loaded)
    page = page.replace("</body>", html_part + "</body>", 1) if "</body>" in page else page + html_part
    lines = [line for line in (loaded.server_verdict, multistream_verdict(loaded)) if line]
    if lines:
        top = [f"**Under load: {line}**" for line in lines]
        head, sep, rest = markdown.partition("\n**")  # after the single-stream verdict's paragraph
        if sep:
            verdict, gap, tail = rest.partition("\n\n")
            markdown = head + sep + verdict + gap + "\n\n".join(top) + "\n\n" + tail
        marker = "<p class='verdict'>"
        at = page.find(marker)
        if at >= 0:
            end = page.find("</p>", at) + len("</p>")
            page = page[:end] + "".join(f"{marker}Under load: {html.escape(line)}</p>" for line in lines) + page[end:]
    return markdown.rstrip("\n") + "\n\n" + section + "\n", page


def throughput_checks(base: LoadResults, current: LoadResults, max_slowdown: float | None) -> list[Check]:
    """The gate's cross-run throughput rule (two load.json from separate runs): per format in both, the offline
    peak at each batch size and the max rate under the p99 bound (same bound only) are a regression when the new
    figure is below base / threshold and the two runs' round ranges do not overlap (new highest round below the
    baseline's lowest). threshold: --max-slowdown, else CROSS_RUN_THROUGHPUT (A/A runs on this shared machine
    differed by up to 2.06x). A format the baseline measured and the new run did not is `missing`."""
    limit = max_slowdown if max_slowdown is not None else CROSS_RUN_THROUGHPUT
    now = {row.name: row for row in current.rows}
    checks: list[Check] = []
    for old in base.rows:
        if not old.ok:
            continue
        new = now.get(old.name)
        if new is None or not new.ok:
            checks.append(Check(old.name, "throughput", "missing", f"measured under load in the baseline, "
                                f"{'absent' if new is None else new.status} now"))
            continue
        pairs = []
        by_batch = {p.batch: p for p in new.offline if p.samples_per_s is not None}
        for point in old.offline:
            other = by_batch.get(point.batch)
            if point.samples_per_s is not None and other is not None:
                pairs.append((f"offline samples/s@{point.batch or 'example'}", point.samples_per_s, point.low,
                              other.samples_per_s, other.high))
        if (old.server and new.server and old.server.p99_bound_ms == new.server.p99_bound_ms
                and old.server.max_rate_per_s and new.server.max_rate_per_s is not None):
            pairs.append((f"max req/s@p99<={old.server.p99_bound_ms:g}ms", old.server.max_rate_per_s,
                          old.server.max_rate_low, new.server.max_rate_per_s, new.server.max_rate_high))
        drivers = (f"; drivers differ: {driver_short(old)} then, {driver_short(new)} now"
                   if driver_short(old) != driver_short(new) else "")  # auto's probe can choose differently per run
        for name, was, was_low, got, got_high in pairs:
            ratio = was / got if got else math.inf
            apart = got_high is not None and was_low is not None and got_high < was_low
            verdict = "regression" if ratio > limit and apart else ("slower" if ratio > 1 else "ok")
            checks.append(Check(old.name, name, verdict, f"{_num(was)} -> {_num(got)} ({ratio:.2f}x lower; "
                                f"threshold {limit:g}x, rounds {'apart' if apart else 'overlap'}{drivers})",
                                base=was, current=got, ratio=ratio))
    return checks


def paired_throughput_checks(results: LoadResults, max_slowdown: float | None) -> list[Check]:
    """The paired throughput rule: a load run that measured each format's baseline artifact in the same rounds
    (rows `baseline:NAME` beside `NAME`: `compare --load` with `--baseline-artifacts`, or `multiexport load NEW
    --baseline BASE`). Per format and offline batch size, round i's ratio is baseline / new samples/s (the two
    measured one after the other in that round, so the machine's drift hits both); a regression when the median
    ratio is above the threshold (--max-slowdown, else PAIRED_THROUGHPUT) and every round's ratio is above 1 (the
    new artifact slower in every round). A format whose baseline was measured and which was not is `missing`."""
    limit = max_slowdown if max_slowdown is not None else PAIRED_THROUGHPUT
    rows = {row.name: row for row in results.rows}
    checks: list[Check] = []
    for name, base in rows.items():
        if not name.startswith(BASELINE_PREFIX) or not base.ok:
            continue
        new = rows.get(name[len(BASELINE_PREFIX):])
        label = name[len(BASELINE_PREFIX):]
        if new is None or not new.ok:
            checks.append(Check(label, "throughput", "missing", f"its baseline measured under load, it "
                                f"{'absent' if new is None else new.status}", kind=PAIRED_AB))
            continue
        by_batch = {p.batch: p for p in new.offline if p.per_round}
        for point in base.offline:
            other = by_batch.get(point.batch)
            if not point.per_round or other is None:
                continue
            ratios = [b / n if n > 0 else math.inf for b, n in zip(point.per_round, other.per_round)]
            median = statistics.median(ratios)
            every = all(r > 1 for r in ratios)
            verdict = "regression" if median > limit and every else ("slower" if median > 1 else "ok")
            checks.append(Check(label, f"offline samples/s@{point.batch or 'example'}", verdict,
                                f"{_num(point.samples_per_s)} -> {_num(other.samples_per_s)} (paired in {len(ratios)} "
                                f"rounds: baseline / new {median:.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]; "
                                f"threshold {limit:g}x{', slower in every round' if every else ''})",
                                base=point.samples_per_s, current=other.samples_per_s, ratio=median, kind=PAIRED_AB,
                                rounds=len(ratios), low=min(ratios), high=max(ratios)))
    return checks


def gate_load(diff: Diff, base_dir: Path | None, current_dir: Path) -> Diff:
    """`diff` with the throughput checks: the paired ones where the current load.json measured baselines in its
    rounds (those formats then get no cross-run check), the cross-run ones where a load.json is beside both runs'
    results (else unchanged)."""
    new = Path(current_dir) / "load.json"
    current = read_load_results(new) if new.is_file() else None
    paired = paired_throughput_checks(current, diff.max_slowdown) if current is not None else []
    diff.checks += paired
    if base_dir is None or current is None:
        return diff
    old = Path(base_dir) / "load.json"
    if old.is_file():
        judged = {c.backend for c in paired}
        diff.checks += [c for c in throughput_checks(read_load_results(old), without_baselines(current),
                                                     diff.max_slowdown) if c.backend not in judged]
    return diff


def without_baselines(results: LoadResults) -> LoadResults:
    """`results` less its baseline rows (a paired run's `baseline:NAME`)."""
    import dataclasses

    return dataclasses.replace(results, rows=[r for r in results.rows if not r.name.startswith(BASELINE_PREFIX)])
