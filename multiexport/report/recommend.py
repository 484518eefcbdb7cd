"""Which format to ship: the fastest backend that passed parity at each batch size, and what to watch.

Works from results alone. A lead smaller than the noise is called a tie, not a win: with paired timing,
when the interval of the ratio measured over the same rounds includes 1; otherwise when the 95%
intervals of the two medians overlap. A size an artifact does not support is no evidence for or against it: the pick at that
size is among the artifacts that do, and the caveats say which could not be checked there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..results import Results, Status
from .precision import precision_verdict


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
    """picks: one per batch size; caveats: failures, unsupported sizes, warnings; verdict: one sentence;
    precision: one sentence on the reduced-precision rows (report.precision), empty without them."""

    picks: list[Pick] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    verdict: str = ""
    precision: str = ""


def recommend(results: Results) -> Recommendation:
    """The picks per batch size, the caveats and the one-sentence verdict for `results`.

    A format whose artifact takes only some sizes of a symbolic dimension (a converter that could not keep
    it) is never the verdict over one that takes every size without the verdict saying so first.
    """
    rec = Recommendation()
    # Faithful is float parity's word: a reduced-precision row within its accuracy budget is not "faithful"
    # (report.precision weighs those against their own format's fp32 row).
    faithful = {n: r for n, r in results.backends.items() if r.status is Status.OK and r.precision == "fp32"}
    sizes: dict = {}
    unsupported: dict = {}
    for name, r in faithful.items():
        for s in (r.bench.sizes if r.bench else []):
            if s.status is Status.SIZE_UNSUPPORTED:
                unsupported.setdefault(s.batch, []).append(name)
            elif s.latency is not None:
                sizes.setdefault(s.batch, []).append((name, s.latency))
    rec.picks = [_pick(results, batch, entries, unsupported.get(batch, [])) for batch, entries in sizes.items()]
    limited = {n: fixed for n, r in faithful.items() if (fixed := fixed_dims(r))}
    full_picks = [_pick(results, batch, kept, []) for batch, entries in sizes.items()
                  if (kept := [e for e in entries if e[0] not in limited])]

    for name, r in results.backends.items():
        if r.status is Status.UNSUPPORTED_PRECISION:
            continue  # an answer, not a caveat: the format x precision table says what each format lacks
        if r.status is not Status.OK:
            rec.caveats.append(f"{name}: {r.status.value}: {r.reason}")
        elif r.reason:
            rec.caveats.append(f"{name}: {r.reason}")
        if name in limited:
            rec.caveats.append(f"{name}: {Status.SIZE_UNSUPPORTED.value}: its artifact supports {_sizes(limited[name])} "
                               "only; it is faithful there and was not checked or timed at other sizes")
        for note in (r.parity.notes if r.parity and r.precision == "fp32" else []):  # a variant's: its budget decides
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
    elif any(p.backend in limited for p in rec.picks):
        rec.verdict = _size_limited_verdict(rec.picks, full_picks, limited)
    else:
        rec.verdict = _verdict(rec.picks, faithful)
        gaps = sorted({n for p in rec.picks for n in p.unsupported})
        if gaps:
            rec.verdict += f" ({', '.join(gaps)}: faithful, but not at every size; see the caveats.)"
    rec.verdict = _weak_prefix(faithful, rec.picks) + rec.verdict

    rec.precision = precision_verdict(results)
    return rec


def _weak_prefix(faithful: dict, picks: list[Pick]) -> str:
    """What the verdict must say first when the parity behind it could not have failed much."""
    named = {p.backend for p in picks} or set(faithful)
    weak = sorted({leaf for n in named if faithful[n].parity for leaf in faithful[n].parity.weak})
    if not weak:
        return ""
    everywhere = all(faithful[n].parity and faithful[n].parity.weak_everywhere() for n in named)
    what = "every output" if everywhere else ", ".join(weak)
    return (f"Weak evidence: parity on {what} could not have failed much (jax.jit's output is zero, the same in "
            "every trial, or saturated; see the caveats), so 'faithful' below says little; check with real "
            "weights and inputs. ")


def fixed_dims(row) -> dict[str, list[int]]:
    """The symbolic dims a row's artifact takes at some sizes only, with those sizes (empty: every size)."""
    return {d: list(v) for d, v in (row.supports.get("dims") or {}).items() if v != "any"}


def _pick(results: Results, batch, entries: list, unsupported: list[str]) -> Pick:
    entries = sorted(entries, key=lambda e: e[1].p50_ms)
    best_name, best = entries[0]
    pick = Pick(batch=batch, backend=best_name, p50_ms=best.p50_ms, unsupported=list(unsupported))
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
    return pick


def _verdict(picks: list[Pick], faithful: dict) -> str:
    winners = {p.backend for p in picks}
    if len(faithful) == 1:
        return f"Ship {next(iter(faithful))}: the only backend measured that passed parity."
    if len(winners) == 1:
        w = next(iter(winners))
        ties = [p for p in picks if p.significant is False]
        tie_note = f" (a tie within noise with {ties[0].runner_up} at batch {_b(ties[0].batch)})" if ties else ""
        return f"Ship {w}: it passed parity and is the fastest faithful backend at every batch size measured{tie_note}."
    per = ", ".join(f"{p.backend} at batch {_b(p.batch)}" for p in picks)
    return f"The fastest faithful backend depends on the batch size: {per}."


def _size_limited_verdict(picks: list[Pick], full_picks: list[Pick], limited: dict[str, dict]) -> str:
    """The verdict when a format that takes only some sizes is the fastest somewhere: the size limit first,
    then the fastest format that takes every size, if any passed."""
    fast = sorted({p.backend for p in picks if p.backend in limited})
    where = "; ".join(f"{n} takes {_sizes(limited[n])} only" for n in fast)
    if not full_picks:
        return (f"Only at fixed sizes: {where} (its converter could not keep the symbolic dimension), and no "
                f"faithful backend measured takes every size; ship {' or '.join(fast)} only if every size you "
                "serve is among those.")
    full = {p.backend for p in full_picks}
    if len(full) == 1:
        lead = f"Ship {next(iter(full))} if you serve more than the fixed sizes: it is the fastest faithful backend " \
               "that takes every size."
    else:
        lead = ("For every size, the fastest faithful backend depends on the batch size: "
                + ", ".join(f"{p.backend} at batch {_b(p.batch)}" for p in full_picks) + ".")
    by_batch = {p.batch: p for p in full_picks}
    faster = []
    for p in picks:
        other = by_batch.get(p.batch)
        if p.backend in limited and other is not None and p.p50_ms > 0:
            faster.append(f"{p.backend} {other.p50_ms / p.p50_ms:.2f}x faster at batch {_b(p.batch)}")
    return (f"{lead} Faster where it runs: {', '.join(faster) or ', '.join(fast)}, but {where} (its converter could "
            "not keep the symbolic dimension): ship it only if every size you serve is among those.")


def _sizes(fixed: dict[str, list[int]]) -> str:
    return ", ".join(f"{d}={','.join(map(str, v))}" for d, v in fixed.items())


def _b(batch) -> str:
    return "as exported" if batch is None else str(batch)
