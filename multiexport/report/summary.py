"""One row per backend and batch size, from results alone (no backend needed): the terminal table and
both reports' summary. Every figure is formatted here once.

A row that failed shows no latency (a number beside a failure reads like a measurement of something that
worked); a size the artifact does not support says so instead of a number; a leaf that failed on shape or
NaN pattern shows that, not a "0.00e+00" error. The headline error is relative to each leaf's scale.
"""

from __future__ import annotations

from typing import Any

from ..results import BackendResult, BenchResult, Results, Status
from .text import human_bytes, sci, si

COLUMNS = ("backend", "status", "batch", "max err / scale", "elementwise rel", "tolerance", "p50 ms", "p99 ms",
           "vs jax", "throughput", "cold start s", "size", "native ms")


def headline(row: BackendResult) -> tuple[str, str, str]:
    """(error relative to the leaf's scale, element-wise relative error, tolerance) of the worst leaf."""
    worst = row.parity.headline() if row.parity else None
    if worst is None:
        return "", "", ""
    s = worst.stats
    if not s.compared:
        return "shape differs" if not s.shape_match else "not compared", "", worst.tolerance.text()
    if s.nan_mismatch or s.inf_mismatch:
        return "NaN/Inf differ", sci(s.max_rel), worst.tolerance.text()
    return sci(s.err_scale), sci(s.max_rel), worst.tolerance.text()


WEAK_OK = "ok (weak check)"


def status_text(row) -> str:
    """A row's status as shown: `ok (weak check)` when its parity could not have failed much on some leaf."""
    if row.status is Status.OK and row.parity is not None and row.parity.weak:
        return WEAK_OK
    return row.status.value


def summary_rows(results: Results) -> list[dict[str, Any]]:
    """Rows of formatted cells; the fastest faithful backend at each batch size gets `fastest: True`."""
    ref_bench = results.reference.bench
    ref_p50 = {s.batch: s.latency.p50_ms for s in (ref_bench.measured() if ref_bench else [])
               if s.latency is not None}  # always true for measured(); narrows the type
    rows = []
    if ref_bench:
        rows += _rows("jax", "reference", ("", "", ""), ref_bench, ref_p50, True)
    for name, r in results.backends.items():
        rows += _rows(name, status_text(r), headline(r), r.bench, ref_p50, r.status is Status.OK, _native_cells(r))
    by_batch: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if row["backend"] != "jax" and row["status"] in ("ok", WEAK_OK) and row["_p50"] is not None:
            by_batch.setdefault(row["batch"], []).append(row)
    for candidates in by_batch.values():
        min(candidates, key=lambda row: row["_p50"])["fastest"] = True
    return rows


def _native_cells(row: BackendResult) -> dict[Any, str]:
    """batch -> the "native ms" cell: the in-program p50, or the native verdict when it is not ok."""
    n = row.native
    if n is None:
        return {}
    if n.status is not Status.OK:
        return {s.batch: n.status.value for s in (row.bench.sizes if row.bench else [])} or {None: n.status.value}
    return {s.batch: (f"{s.median_ms:.4g}" if s.status is Status.OK and s.median_ms is not None else s.status.value)
            for s in n.sizes}


def _rows(name: str, status: str, errors: tuple[str, str, str], bench: BenchResult | None, ref_p50, show_latency: bool,
          native: dict[Any, str] | None = None):
    native = native or {}
    base = {
        "backend": name, "status": status, "max err / scale": errors[0], "elementwise rel": errors[1],
        "tolerance": errors[2], "size": human_bytes(bench.artifact_bytes) if bench else "",
    }
    empty = {"p50 ms": "", "p99 ms": "", "vs jax": "", "throughput": "", "cold start s": "", "native ms": "", "_p50": None}
    if not bench or not bench.sizes or not show_latency:
        return [{**base, "batch": "", **empty, "native ms": next(iter(native.values()), "")}]
    rows: list[dict[str, Any]] = []
    first = True
    for s in bench.sizes:
        batch = "-" if s.batch is None else str(s.batch)
        if s.latency is None or s.status is not Status.OK:
            rows.append({**base, **empty, "batch": batch, "p50 ms": s.status.value})
            continue
        lat = s.latency
        cold = bench.load_s + (s.compile_s or 0.0) + (s.first_call_s or 0.0) if first else None
        first = False
        ratio = lat.p50_ms / ref_p50[s.batch] if ref_p50.get(s.batch) else None
        rows.append({
            **base,
            "batch": batch,
            "p50 ms": f"{lat.p50_ms:.4g}" + ("*" if lat.stopped_by == "max_iters" else ""),
            "p99 ms": f"{lat.p99_ms:.4g}",
            "vs jax": ("1.00x" if name == "jax" else (f"{ratio:.2f}x" if ratio is not None else "")),
            "throughput": f"{si(s.throughput_per_s)} {s.items}/s",
            "cold start s": f"{cold:.3g}" if cold is not None else "",
            "native ms": native.get(s.batch, ""),
            "_p50": lat.p50_ms,
        })
    return rows


def capped_note(results: Results) -> str:
    """A note when a timed loop hit its call cap before its time (the figure then covers fewer seconds)."""
    capped = [n for n, r in results.backends.items() if r.bench and any(
        s.latency is not None and s.latency.stopped_by == "max_iters" for s in r.bench.sizes)]
    if not capped:
        return ""
    return (f"* {', '.join(capped)}: the timed loop reached max_iters before --bench-time (very fast calls); the "
            "percentiles cover fewer seconds than asked")
