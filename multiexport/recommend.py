"""Which format to ship: the fastest backend that passed parity at each batch size, and what to watch.

Works from results.json data alone. A lead smaller than the noise (95% intervals of the medians
overlap) is called a tie, not a win.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Pick:
    batch: int | None
    backend: str
    p50_ms: float
    runner_up: str | None = None
    ratio_to_runner_up: float | None = None  # runner-up p50 / winner p50
    significant: bool | None = None  # the 95% intervals of the two medians do not overlap


@dataclass
class Recommendation:
    picks: list[Pick] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    verdict: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recommend(results: dict[str, Any]) -> Recommendation:
    rec = Recommendation()
    faithful = {n: r for n, r in results["backends"].items() if r["status"] == "ok"}
    sizes: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
    for name, r in faithful.items():
        for s in ((r.get("bench") or {}).get("sizes") or []):
            sizes.setdefault(s["batch"], []).append((name, s["latency"]))
    for batch, entries in sizes.items():
        entries.sort(key=lambda e: e[1]["p50_ms"])
        best_name, best = entries[0]
        pick = Pick(batch=batch, backend=best_name, p50_ms=best["p50_ms"])
        if len(entries) > 1:
            second_name, second = entries[1]
            pick.runner_up = second_name
            pick.ratio_to_runner_up = second["p50_ms"] / best["p50_ms"] if best["p50_ms"] > 0 else None
            pick.significant = best["ci95_high_ms"] < second["ci95_low_ms"]
        rec.picks.append(pick)

    for name, r in results["backends"].items():
        if r["status"] != "ok":
            rec.caveats.append(f"{name}: {r['status']}: {r['reason']}")
        for warning in r.get("warnings") or []:
            rec.caveats.append(f"{name}: {warning}")
    dropped = {n: sorted(b["name"] for b in r.get("binding") or [] if not b["used"]) for n, r in results["backends"].items()
               if r.get("binding")}
    if len({tuple(v) for v in dropped.values()}) > 1:
        parts = "; ".join(f"{n} drops {', '.join(v) or 'nothing'}" for n, v in dropped.items())
        rec.caveats.append(f"formats take different inputs: {parts} (see the binding table)")

    if not faithful:
        rec.verdict = "No backend passed parity: ship none of them until the failures above are understood."
    elif not rec.picks:
        rec.verdict = f"Faithful: {', '.join(faithful)} (no latency measured)."
    else:
        winners = {p.backend for p in rec.picks}
        if len(faithful) == 1:
            rec.verdict = f"Ship {next(iter(faithful))}: the only backend measured that passed parity."
        elif len(winners) == 1:
            w = next(iter(winners))
            ties = [p for p in rec.picks if p.significant is False]
            tie_note = f" (a tie within noise with {ties[0].runner_up} at batch {_b(ties[0].batch)})" if ties else ""
            rec.verdict = f"Ship {w}: it passed parity and is the fastest faithful backend at every batch size measured{tie_note}."
        else:
            per = ", ".join(f"{p.backend} at batch {_b(p.batch)}" for p in rec.picks)
            rec.verdict = f"The fastest faithful backend depends on the batch size: {per}."
    return rec


def _b(batch) -> str:
    return "as exported" if batch is None else str(batch)
