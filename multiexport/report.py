"""report.md and report.html from results.json alone: no backend, no JAX needed to re-render.

The HTML is one self-contained file: inline CSS and SVG, a Content-Security-Policy that forbids
any request, no scripts.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from .errors import InputError
from .manifest import write_text_atomic
from .recommend import recommend
from .signature import shape_text
from .summary import _tol, human_bytes, summary_rows

RESULT_COLUMNS = ("backend", "status", "batch", "max rel err", "tolerance", "p50 ms", "p99 ms", "vs jax",
                  "throughput", "cold start s", "size", "native ms")


def load_results(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"Results '{path}' | does not exist, expected a results.json written by `multiexport compare`") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"Results '{path}' | unreadable ({exc}), expected JSON") from exc
    if not str(data.get("schema", "")).startswith("multiexport.results/"):
        raise InputError(f"Results '{path}' | got schema {data.get('schema')!r}, expected multiexport.results/1")
    return data


def write_reports(results: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    md, page = out_dir / "report.md", out_dir / "report.html"
    write_text_atomic(md, render_markdown(results))
    write_text_atomic(page, render_html(results))
    return md, page


# -- shared pieces ------------------------------------------------------------------------------

def binding_table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Leaf x backend: the parameter each format binds the leaf to, or 'dropped'."""
    names = [n for n, r in results["backends"].items() if r.get("binding")]
    header = ["input leaf", "shape", "dtype"] + names
    rows = []
    for leaf in results["signature"]["inputs"]:
        row = [leaf["name"], shape_text(leaf["shape"]), leaf["dtype"]]
        for n in names:
            b = next((b for b in results["backends"][n]["binding"] if b["name"] == leaf["name"]), None)
            if b is not None and b["used"]:
                row.append(str(b["param"]))
            elif b is not None and b.get("caller_key"):
                row.append(f"{b['caller_key']} (fed, unread)")
            else:
                row.append("dropped")
        rows.append(row)
    return header, rows


def cold_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    entries = [("jax (reference)", (results.get("reference") or {}).get("bench"))]
    entries += [(n, r.get("bench")) for n, r in results["backends"].items()]
    for name, bench in entries:
        if not bench or not bench.get("sizes"):
            continue
        first = bench["sizes"][0]
        mem = bench.get("memory", {})
        rows.append([
            name, f"{bench['load_s']:.3f}", "-" if first.get("compile_s") is None else f"{first['compile_s']:.3f}",
            f"{first['first_call_s']:.4f}",
            _fmt_opt(bench.get("extra", {}).get("process_start_to_first_output_s"), "{:.2f}"),
            _mib(mem.get("peak_rss_bytes")), "-" if bench.get("artifact_bytes") is None else human_bytes(bench["artifact_bytes"]),
            bench.get("runner", {}).get("calling_path", ""),
        ])
    return rows


def export_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, r in results["backends"].items():
        if r.get("export_seconds") is None:
            continue
        setup = r.get("export_setup") or {}
        share = (f"{setup['seconds']:.2f} s ({100 * setup['seconds'] / r['export_seconds']:.0f}%): {setup['what']}"
                 if setup.get("seconds") and r["export_seconds"] else "-")
        rows.append([name, f"{r['export_seconds']:.2f}", share, _mib(r.get("export_peak_rss_bytes")),
                     storage_text(r.get("weights") or {})])
    return rows


EXPORT_HEADER = ["backend", "export s (in its worker)", "of which one-time setup", "export peak RSS", "weights stored"]


def storage_text(w: dict[str, Any]) -> str:
    """Where one artifact keeps the weights, e.g. 'external: weights.safetensors (1.2 GiB)'."""
    if w.get("storage") == "external":
        return f"external: {w.get('file', '?')} ({human_bytes(w.get('external_bytes', 0))})"
    if w.get("storage") == "embedded":
        return f"embedded ({human_bytes(w.get('embedded_bytes', 0))})"
    return "-"


def weights_line(results: dict[str, Any]) -> str:
    w = results["signature"].get("weights") or {}
    if not w:
        return ""
    return (f"Weights: {'baked in (closed over; where each artifact keeps them: Export time table)' if w['mode'] == 'baked' else 'taken as input leaves'} "
            f"(constants {human_bytes(w['baked_bytes'])} in {w['baked_arrays']} arrays; input leaves {human_bytes(w['input_bytes'])})")

COLD_HEADER = ["backend", "load s", "compile s", "first call s", "process start to first output s", "peak RSS",
               "artifact size", "calling path"]


def _fmt_opt(v, fmt) -> str:
    return "-" if v is None else fmt.format(v)


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def _md_table(header, rows) -> str:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def _parity_rows(results):
    rows = []
    for name, r in results["backends"].items():
        parity = r.get("parity")
        if not parity:
            continue
        worst: dict[str, dict] = {}
        for v in parity["leaves"]:
            cur = worst.get(v["name"])
            if cur is None or (not v["passed"], _f(v["stats"]["max_rel"])) > (not cur["passed"], _f(cur["stats"]["max_rel"])):
                worst[v["name"]] = v
        for leaf, v in worst.items():
            s = v["stats"]
            rows.append([name, leaf, "pass" if v["passed"] else "FAIL", f"{_f(s['max_abs']):.3g}", f"{_f(s['max_rel']):.3g}",
                         "-" if s.get("max_ulp") is None else str(s["max_ulp"]), f"{_f(s['mismatch_ratio']):.3g}",
                         f"{_f(s['min_rtol']):.3g}", _tol(v["tolerance"]),
                         v["trial"]])
    return rows


PARITY_HEADER = ["backend", "output leaf", "verdict", "max abs", "max rel", "max ULP", "mismatch ratio",
                 "min rtol to pass", "tolerance", "worst trial"]


def _f(v) -> float:
    return float(v)


def setup_lines(results: dict[str, Any]) -> list[str]:
    """Device and timing mode: what the figures mean."""
    plan = results.get("device") or {}
    lines = []
    if plan:
        lines.append(f"Device: requested {plan.get('requested')}, ran on {plan.get('chosen')}"
                     + (f" ({plan['note']})" if plan.get("note") else ""))
        for name, found in (plan.get("found") or {}).items():
            lines.append(f"{name}: {'sees a GPU' if found['gpu'] else 'no GPU'} ({found['reason']})")
    configs = [b["config"] for b in [(results.get("reference") or {}).get("bench")]
               + [r.get("bench") for r in results["backends"].values()] if b]
    if configs:
        c = configs[0]
        mode = ("end to end: host inputs copied to the device and outputs copied back in every timed call"
                if c.get("include_transfers") else
                "inputs already on the device, outputs left there; every timed call synchronised")
        lines.append(f"Timing: {mode}; {c.get('warmup_iters')} warm-up calls, then at least {c.get('min_iters')} calls "
                     f"and {c.get('bench_time')} s per batch size; each backend in its own worker process")
    return lines


# -- markdown -----------------------------------------------------------------------------------

def render_markdown(results: dict[str, Any]) -> str:
    rec = recommend(results)
    rows = summary_rows(results)
    out = [f"# multiexport report: {results['target']}", "", f"**{rec.verdict}**", ""]
    if weights_line(results):
        out += [weights_line(results), ""]
    if rec.picks:
        out += ["| batch | fastest faithful | p50 ms | runner-up | runner-up / fastest | significant |", "|---|---|---|---|---|---|"]
        for p in rec.picks:
            out.append(f"| {'as exported' if p.batch is None else p.batch} | {p.backend} | {p.p50_ms:.4g} | "
                       f"{p.runner_up or '-'} | {'-' if p.ratio_to_runner_up is None else f'{p.ratio_to_runner_up:.2f}x'} | "
                       f"{'-' if p.significant is None else ('yes' if p.significant else 'no (within noise)')} |")
        out.append("")
    if rec.caveats:
        out += ["## Caveats", ""] + [f"- {c}" for c in rec.caveats] + [""]
    out += ["## Summary", "", _md_table(RESULT_COLUMNS, [[r[c] for c in RESULT_COLUMNS] for r in rows]), ""]
    header, brow = binding_table(results)
    out += ["## Which leaves each format takes", "",
            "Parameter index (XLA, IREE) or input name (SavedModel, ONNX) per input leaf; `dropped`: the format "
            "does not take the leaf (the function never reads it); `(fed, unread)`: the interface still takes "
            "it (a SavedModel signature keeps every key) but the module never reads it.", "", _md_table(header, brow), ""]
    prow = _parity_rows(results)
    if prow:
        out += ["## Parity per output leaf (worst trial)", "", f"Against jax.jit over trials: {', '.join(results['trials'])}.",
                "", _md_table(PARITY_HEADER, prow), ""]
    erow = export_rows(results)
    if erow:
        out += ["## Export time", "", _md_table(EXPORT_HEADER, erow), ""]
    crow = cold_rows(results)
    if crow:
        out += ["## Cold start and memory", "", "Separate from the steady-state percentiles above.", "",
                _md_table(COLD_HEADER, crow), ""]
    env = results.get("environment", {})
    out += ["## Environment", ""] + [f"- {line}" for line in setup_lines(results)] + [
            f"- CPU: {env.get('cpu', '?')} ({env.get('cores', '?')} cores)",
            f"- Python {env.get('python', '?')} on {env.get('platform', '?')}",
            "- " + ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items()), ""]
    return "\n".join(out)


# -- html ---------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}.ok{color:#17702a;font-weight:bold}.bad{color:#b00020;font-weight:bold}.verdict{font-size:1.2em;
padding:.6em 1em;background:#eef6ee;border-left:4px solid #17702a}.plots{display:flex;flex-wrap:wrap;gap:1em}
code{background:#f5f5f5;padding:0 3px}
"""


def _html_table(header, rows, status_col: int | None = None) -> str:
    h = "".join(f"<th>{html.escape(str(c))}</th>" for c in header)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            cls = ""
            if i == status_col:
                cls = ' class="ok"' if c in ("ok", "pass", "reference") else ' class="bad"'
            cells.append(f"<td{cls}>{html.escape(str(c))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{h}</tr>{''.join(body)}</table>"


def render_html(results: dict[str, Any]) -> str:
    from . import plots

    rec = recommend(results)
    rows = summary_rows(results)
    benches = {"jax": (results.get("reference") or {}).get("bench")}
    benches.update({n: r.get("bench") for n, r in results["backends"].items() if r["status"] == "ok"})
    benches = {n: b for n, b in benches.items() if b and b.get("sizes")}
    charts = []
    if benches:
        charts.append(plots.latency_cdf({n: b["sizes"][0]["latency"].get("quantiles_ms", []) for n, b in benches.items()},
                                        "Latency distribution (first batch size)"))
        sweep = {n: b["sizes"] for n, b in benches.items() if len(b["sizes"]) > 1 and all(s["batch"] for s in b["sizes"])}
        if sweep:
            charts.append(plots.lines({n: [(s["batch"], s["latency"]["p50_ms"]) for s in ss] for n, ss in sweep.items()},
                                      "p50 latency vs batch size", "batch size (log)", "p50 ms (log)"))
            charts.append(plots.lines({n: [(s["batch"], s["throughput_per_s"]) for s in ss] for n, ss in sweep.items()},
                                      "Throughput vs batch size", "batch size (log)", "items/s (log)"))
    errors, tols = {}, {}
    for name, r in results["backends"].items():
        if r.get("parity"):
            per: dict[str, float] = {}
            for v in r["parity"]["leaves"]:
                per[v["name"]] = max(per.get(v["name"], 0.0), _f(v["stats"]["max_rel"]))
                tols[v["name"]] = v["tolerance"]["rtol"]
            errors[name] = per
    if errors:
        charts.append(plots.error_bars(errors, tols, "Parity: max relative error per output leaf"))

    header, brow = binding_table(results)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>multiexport: {html.escape(results['target'])}</title><style>{CSS}</style></head><body>",
        f"<h1>multiexport report: <code>{html.escape(results['target'])}</code></h1>",
        f"<p class='verdict'>{html.escape(rec.verdict)}</p>",
        f"<p>{html.escape(weights_line(results))}</p>",
    ]
    if rec.caveats:
        parts.append("<h2>Caveats</h2><ul>" + "".join(f"<li>{html.escape(c)}</li>" for c in rec.caveats) + "</ul>")
    parts.append("<h2>Summary</h2>" + _html_table(RESULT_COLUMNS, [[r[c] for c in RESULT_COLUMNS] for r in rows], 1))
    parts.append("<div class='plots'>" + "".join(c for c in charts if c) + "</div>")
    parts.append("<h2>Which leaves each format takes</h2><p>Parameter index (XLA, IREE) or input name (SavedModel, "
                 "ONNX) per input leaf; <em>dropped</em>: the format does not take it.</p>" + _html_table(header, brow))
    prow = _parity_rows(results)
    if prow:
        parts.append(f"<h2>Parity per output leaf (worst trial)</h2><p>Against jax.jit over trials: "
                     f"{html.escape(', '.join(results['trials']))}.</p>" + _html_table(PARITY_HEADER, prow, 2))
    erow = export_rows(results)
    if erow:
        parts.append("<h2>Export time</h2>" + _html_table(EXPORT_HEADER, erow))
    crow = cold_rows(results)
    if crow:
        parts.append("<h2>Cold start and memory</h2><p>Separate from the steady-state percentiles.</p>"
                     + _html_table(COLD_HEADER, crow))
    env = results.get("environment", {})
    parts.append("<h2>Environment</h2><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in setup_lines(results))
                 + f"<li>CPU: {html.escape(str(env.get('cpu', '?')))} ({env.get('cores', '?')} cores)</li>"
                 f"<li>Python {html.escape(str(env.get('python', '?')))} on {html.escape(str(env.get('platform', '?')))}</li>"
                 f"<li>{html.escape(', '.join(f'{k} {v}' for k, v in env.get('versions', {}).items()))}</li></ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
