"""Which format to ship: the fastest backend that passed parity at each batch size, and what to watch.

Works from results alone. A lead smaller than the noise is called a tie, not a win: with paired timing,
when the interval of the ratio measured over the same rounds includes 1; otherwise when the 95%
intervals of the two medians overlap. A size an artifact does not support is no evidence for or against it: the pick at that
size is among the artifacts that do, and the caveats say which could not be checked there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..results import Results, Status


@dataclass
class Pick:
    """The fastest faithful backend at one batch size.

    batch: the size (None: as exported). backend, p50_ms: the winner and its median.
    runner_up, ratio_to_runner_up: the next fastest and its median over the winner's.
    ratio_ci95: the ratio's 95% interval when both were timed in the same interleaved rounds (paired).
    significant: paired: the ratio's interval excludes 1; sequential: the 95% intervals of the two
        medians do not overlap. Otherwise a tie within noise.
    unsupported: faithful backends whose artifact does not support this size.
    """

    batch: int | None
    backend: str
    p50_ms: float
    runner_up: str | None = None
    ratio_to_runner_up: float | None = None
    significant: bool | None = None
    ratio_ci95: tuple[float, float] | None = None
    unsupported: list[str] = field(default_factory=list)


@dataclass
class Recommendation:
    """picks: one per batch size; caveats: failures, unsupported sizes, warnings; verdict: one sentence."""

    picks: list[Pick] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    verdict: str = ""


def recommend(results: Results) -> Recommendation:
    rec = Recommendation()
    faithful = {n: r for n, r in results.backends.items() if r.status is Status.OK}
    sizes: dict = {}
    unsupported: dict = {}
    for name, r in faithful.items():
        for s in (r.bench.sizes if r.bench else []):
            if s.status is Status.SIZE_UNSUPPORTED:
                unsupported.setdefault(s.batch, []).append(name)
            elif s.latency is not None:
                sizes.setdefault(s.batch, []).append((name, s.latency))
    for batch, entries in sizes.items():
        entries.sort(key=lambda e: e[1].p50_ms)
        best_name, best = entries[0]
        pick = Pick(batch=batch, backend=best_name, p50_ms=best.p50_ms, unsupported=unsupported.get(batch, []))
        if len(entries) > 1:
            second_name, second = entries[1]
            pick.runner_up = second_name
            paired = results.pairing.ratio(batch, best_name, second_name) if results.pairing else None
            if paired is not None:  # measured over the same rounds: the ratio's own interval decides
                pick.ratio_to_runner_up = paired.ratio
                pick.ratio_ci95 = (paired.ci95_low, paired.ci95_high)
                pick.significant = paired.significant
            else:
                pick.ratio_to_runner_up = second.p50_ms / best.p50_ms if best.p50_ms > 0 else None
                pick.significant = best.ci95_high_ms < second.ci95_low_ms
        rec.picks.append(pick)

    for name, r in results.backends.items():
        if r.status is not Status.OK:
            rec.caveats.append(f"{name}: {r.status.value}: {r.reason}")
        elif r.reason:
            rec.caveats.append(f"{name}: {r.reason}")
        fixed = {d: v for d, v in (r.supports.get("dims") or {}).items() if v != "any"}
        if fixed and r.status is Status.OK:
            shown = ", ".join(f"{d}={','.join(map(str, v))}" for d, v in fixed.items())
            rec.caveats.append(f"{name}: {Status.SIZE_UNSUPPORTED.value}: its artifact supports {shown} only; it is "
                               "faithful there and was not checked or timed at other sizes")
        for note in (r.parity.notes if r.parity else []):
            rec.caveats.append(f"{name}: {note}")
        if r.native is not None and r.native.status is not Status.OK:
            rec.caveats.append(f"{name} native ({r.native.consumer}): {r.native.status.value}: {r.native.reason}")
        for warning in r.warnings:
            rec.caveats.append(f"{name}: {warning}")
    dropped = {n: sorted(r.dropped()) for n, r in results.backends.items() if r.binding}
    if len({tuple(v) for v in dropped.values()}) > 1:
        parts = "; ".join(f"{n} drops {', '.join(v) or 'nothing'}" for n, v in dropped.items())
        rec.caveats.append(f"formats take different inputs: {parts} (see the binding table)")

    if results.interrupted:
        rec.verdict = "Interrupted: the rows below are what finished; re-run for a verdict."
    elif not faithful:
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
            rec.verdict = (f"Ship {w}: it passed parity and is the fastest faithful backend at every batch size "
                           f"measured{tie_note}.")
        else:
            per = ", ".join(f"{p.backend} at batch {_b(p.batch)}" for p in rec.picks)
            rec.verdict = f"The fastest faithful backend depends on the batch size: {per}."
        gaps = sorted({n for p in rec.picks for n in p.unsupported})
        if gaps:
            rec.verdict += f" ({', '.join(gaps)}: faithful, but not at every size; see the caveats.)"
    return rec


def _b(batch) -> str:
    return "as exported" if batch is None else str(batch)
