"""One row per backend and batch size, from results.json data alone (no backend needed).

Used by the terminal table now and the reports later; every figure is formatted here once.
"""

from __future__ import annotations

import math
from typing import Any


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of formatted cells; the fastest faithful backend at each batch size gets `fastest: True`."""
    ref_bench = (results.get("reference") or {}).get("bench")
    ref_p50 = {s["batch"]: s["latency"]["p50_ms"] for s in (ref_bench or {}).get("sizes", [])}
    rows = []
    if ref_bench:
        rows += _rows("jax", "reference", None, ref_bench, ref_p50, [], None)
    for name, r in results["backends"].items():
        rows += _rows(name, r["status"], r.get("parity"), r.get("bench"), ref_p50, r.get("binding") or [], r)
    by_batch: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if row["backend"] != "jax" and row["status"] == "ok" and row["_p50"] is not None:
            by_batch.setdefault(row["batch"], []).append(row)
    for candidates in by_batch.values():
        min(candidates, key=lambda row: row["_p50"])["fastest"] = True
    return rows


def _rows(name, status, parity, bench, ref_p50, binding, result) -> list[dict[str, Any]]:
    worst = _worst(parity)
    dropped = ", ".join(b["name"] for b in binding if not b["used"]) or ("-" if binding else "")
    base = {
        "backend": name, "status": status,
        "max rel err": _sci(worst["stats"]["max_rel"]) if worst else "",
        "tolerance": _tol(worst["tolerance"]) if worst else "",
        "dropped leaves": dropped,
        "size": human_bytes(bench.get("artifact_bytes")) if bench else "",
    }
    sizes = (bench or {}).get("sizes") or []
    if not sizes:
        return [{**base, "batch": "", "p50 ms": "", "p99 ms": "", "vs jax": "", "throughput": "", "cold start s": "",
                 "native ms": "", "_p50": None}]
    rows = []
    for i, s in enumerate(sizes):
        lat = s["latency"]
        cold = bench["load_s"] + (s["compile_s"] or 0.0) + s["first_call_s"] if i == 0 else None
        ratio = lat["p50_ms"] / ref_p50[s["batch"]] if ref_p50.get(s["batch"]) else None
        rows.append({
            **base,
            "batch": "-" if s["batch"] is None else str(s["batch"]),
            "p50 ms": f"{lat['p50_ms']:.4g}", "p99 ms": f"{lat['p99_ms']:.4g}",
            "vs jax": f"{ratio:.2f}x" if ratio is not None and name != "jax" else ("1.00x" if name == "jax" else ""),
            "throughput": f"{_si(s['throughput_per_s'])} {s['items']}/s",
            "cold start s": f"{cold:.3g}" if cold is not None else "",
            "native ms": f"{s['native']['median_ms']:.4g}" if (s.get("native") or {}).get("median_ms") else "",
            "_p50": lat["p50_ms"],
        })
    return rows


def _worst(parity):
    if not parity:
        return None
    leaves = parity["leaves"]
    if not leaves:
        return None

    def key(v):
        rel = v["stats"]["max_rel"]
        rel = float(rel) if not isinstance(rel, str) else float(rel)
        return (not v["passed"], rel if math.isfinite(rel) else 1e300)

    return max(leaves, key=key)


def _tol(t: dict[str, float]) -> str:
    return f"rtol {t['rtol']:g}, atol {t['atol']:g}" + (f", scale {t['scale']:g}" if t.get("scale") else "")


def _sci(value) -> str:
    return f"{float(value):.2e}"


def _si(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def human_bytes(n) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
