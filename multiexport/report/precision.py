"""Format x precision: each reduced-precision row beside its own format's fp32 row, and which one to ship.

A reduced-precision row is judged by its accuracy budget, never called "faithful" (that word is float
parity's); what it buys is read against the same format's fp32 artifact: speed-up (paired over the same rounds
when both were timed together), size, and how far the answer moved. Works from results alone.
"""

from __future__ import annotations

from ..results import BackendResult, Results, Status
from .text import human_bytes

PRECISION_HEADER = ["format", "precision", "status", "batch", "p50 ms (95% CI)", "vs its fp32", "size", "vs fp32 size",
                    "cosine", "SQNR dB", "top-1", "top-5", "method"]


def variant_rows(results: Results) -> list[tuple[str, BackendResult]]:
    """(name, row) of every reduced-precision row, in the compare's order."""
    return [(n, r) for n, r in results.backends.items() if r.precision != "fp32"]


def _base(name: str) -> str:
    return name.partition("@")[0]


def speedup(results: Results, name: str, row: BackendResult
            ) -> tuple[int | None, float, tuple[float, float] | None, bool] | None:
    """(batch, fp32 p50 / this p50, the ratio's 95% interval when paired, whether this row is faster beyond
    the noise) at the first size both measured: paired, the interval above 1; else the two medians' 95%
    intervals apart."""
    base = results.backends.get(_base(name))
    if base is None or not row.bench or not base.bench:
        return None
    mine = {s.batch: s.latency for s in row.bench.sizes if s.latency is not None}
    for size in base.bench.sizes:
        if size.latency is None or size.batch not in mine:
            continue
        paired = results.pairing.ratio(size.batch, name, _base(name)) if results.pairing else None
        if paired is not None:  # slower / faster over the same rounds (>= 1): turned into fp32 / this
            if paired.faster == name:
                return size.batch, paired.ratio, (paired.ci95_low, paired.ci95_high), paired.ci95_low > 1
            return size.batch, 1 / paired.ratio, (1 / paired.ci95_high, 1 / paired.ci95_low), False
        own = mine[size.batch]
        return size.batch, size.latency.p50_ms / own.p50_ms, None, own.ci95_high_ms < size.latency.ci95_low_ms
    return None


def precision_rows(results: Results) -> list[list[str]]:
    """One row per reduced-precision row, in PRECISION_HEADER's columns, for the reports."""
    out = []
    for name, row in variant_rows(results):
        base = results.backends.get(_base(name))
        fast = speedup(results, name, row)
        first = next((s for s in (row.bench.sizes if row.bench else []) if s.latency is not None), None)
        p50 = (f"{first.latency.p50_ms:.4g} ({first.latency.ci95_low_ms:.4g}-{first.latency.ci95_high_ms:.4g})"
               if first and first.latency else "-")
        ratio = "-"
        if fast is not None:
            ratio = f"{fast[1]:.2f}x" + (f" ({fast[2][0]:.2f}-{fast[2][1]:.2f})" if fast[2] else "")
        size = _size(row.artifact_bytes)
        vs_size = (f"{row.artifact_bytes / base.artifact_bytes:.2f}x" if base is not None and base.artifact_bytes
                   and row.artifact_bytes else "-")
        out.append([_base(name), row.precision, row.status.value, "-" if first is None else str(first.batch), p50, ratio,
                    size, vs_size, _figure(row, "cosine", "{:.6f}"), _figure(row, "sqnr_db", "{:.1f}"),
                    _figure(row, "top1", "{:.1%}"), _figure(row, "top5", "{:.1%}"),
                    str((row.precision_facts or {}).get("method", row.reason if row.status.is_failure else ""))[:160]])
    return out


def _figure(row: BackendResult, key: str, fmt: str) -> str:
    """The row's worst `key` over its output leaves, formatted; "-" when not measured."""
    value = row.accuracy.worst(key) if row.accuracy is not None else None
    return "-" if value is None else fmt.format(value)


def precision_verdict(results: Results) -> str:
    """One sentence on which reduced precision to ship, or why none, with what the figures can prove."""
    rows = variant_rows(results)
    if not rows:
        return ""
    within = [(n, r, fast) for n, r in rows if r.status is Status.OK and (fast := speedup(results, n, r)) is not None
              and results.backends[_base(n)].status is Status.OK]
    calibrated = any(r.precision == "int8" for _, r in rows)  # only static int8 calibrates
    real = results.config.get("inputs") == "given" and (bool(results.config.get("calibration")) or not calibrated)
    caveat = ("" if real else " Random weights or synthetic inputs make these figures a check of the toolchain, not "
              "of task accuracy: give --inputs and --calibration from real data to judge a deployment.")
    faster = [(n, r, f) for n, r, f in within if f[1] > 1 and f[3]]
    if not faster:
        failed = [n for n, r in rows if r.status is Status.ACCURACY_FAILED]
        said = f" ({', '.join(failed)} beyond budget)" if failed else ""
        return (f"Precision: no reduced-precision artifact was measurably faster than its format's fp32 within its "
                f"accuracy budget here{said}.{caveat}")
    name, row, (batch, ratio, ci, _) = max(faster, key=lambda e: e[2][1])
    acc = row.accuracy
    figures = []
    scored = [leaf for leaf in (acc.leaves if acc is not None else []) if leaf.top1 is not None]
    if scored:
        leaf = min(scored, key=lambda e: e.top1 or 0.0)
        figures.append(f"top-1 agreement {leaf.top1:.1%} over {leaf.rows} rows")
    if acc is not None:
        figures.append(f"cosine {acc.worst('cosine'):.5f}")
    size = ""
    base = results.backends[_base(name)]
    if row.artifact_bytes and base.artifact_bytes:
        size = f", {row.artifact_bytes / base.artifact_bytes:.2f}x the size"
    interval = f" (95% CI {ci[0]:.2f}-{ci[1]:.2f})" if ci else ""
    at = "as exported" if batch is None else f"at batch {batch}"
    return (f"Precision: ship {name}: {ratio:.2f}x faster than its fp32 {at}{interval}{size}, "
            f"{', '.join(figures)}, within budget.{caveat}")


def _size(n: int | None) -> str:
    return human_bytes(n) if n else "-"
