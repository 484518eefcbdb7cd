"""Regression gate: compare a run with its baseline per backend, batch size and check.

Latency is judged on the strongest evidence the run has, and each verdict says which (`Check.kind`):
- **paired A/B**: the baseline's artifacts timed in the same interleaved rounds as the new ones: a slowdown
  when the interval of new / baseline (measure.pairing: per-round ratios, Hodges-Lehmann, signed-rank
  interval; 99% on rounds added past the planned ones) lies above the threshold in the first pair of worker
  processes and in the fresh pair started to confirm it (an intersection-union test: one process slow for a
  whole run under load does not make a verdict);
- **cross-run**: only the baseline's recorded figures: two runs differ by more than either's interval says, so
  the p50 ratio must pass a wider threshold, calibrated with A/A runs, with the two intervals apart.
The defaults (`PAIRED`, `CROSS_RUN`, wider under `TINY_MS`) are the calibrated ones (benchmarks/gate.md);
`max_slowdown` given replaces them. Parity: a backend that passed and now fails, or a leaf whose worst error
grew more than `max_parity_drift` times (ignoring growth below `drift_floor` and below a tenth of the leaf's
rtol: rounding moving around, not drift).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ..errors import UsageError
from ..files.owned import write_owned_text
from ..files.text import visible
from ..results import BackendResult, Pairing, Results, Status
from ..results.bench import Ratio, new_over_baseline
from ..results.legacy import LEGACY_SCALE
from .text import md, one_line

PAIRED_AB, CROSS_RUN_KIND, HISTORY = "paired A/B", "cross-run", "history"
# Default thresholds, set from benchmarks/gate_calibration.py (benchmarks/gate.md):
# a paired slowdown is flagged when its interval's low end passes PAIRED; a cross-run one when its p50
# ratio passes CROSS_RUN. Calls under TINY_MS (thread wake-ups dominate them) get the wider figures.
PAIRED, PAIRED_TINY = 1.05, 1.10
CROSS_RUN, CROSS_RUN_TINY = 1.50, 3.00
TINY_MS = 0.030


@dataclass
class Check:
    """One comparison between two runs.

    backend: the backend (or model/backend in a zoo). check: "status", "parity LEAF", "latency@BATCH",
    "version NAME". verdict: ok | regression | improvement | new | missing | changed | slower | faster.
    detail: one line saying what changed. base, current, ratio: the figures compared.
    kind: what the verdict rests on: "paired A/B" (timed in the same rounds), "cross-run" or "history".
    rounds, low, high, pairs: for a paired A/B latency check (else None), the rounds its ratio rests on, the
        interval of new / baseline (with a fresh process pair, the union of both pairs'), the process pairs.
    """

    backend: str
    check: str
    verdict: str
    detail: str
    base: float | str | None = None
    current: float | str | None = None
    ratio: float | None = None
    kind: str = CROSS_RUN_KIND
    rounds: int | None = None
    low: float | None = None
    high: float | None = None
    pairs: int | None = None


@dataclass
class Diff:
    """All checks between two runs; `regressions` fail the gate (exit 1). max_slowdown: the threshold given
    for every latency check, or None for the calibrated defaults by kind and call size."""

    checks: list[Check] = field(default_factory=list)
    max_slowdown: float | None = None
    max_parity_drift: float = 10.0

    @property
    def regressions(self) -> list[Check]:
        return [c for c in self.checks if c.verdict in ("regression", "missing")]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_thresholds(max_slowdown: float | None, max_parity_drift: float) -> None:
    """Refuse thresholds that cannot mean anything (validated before any run, from the API too); a
    max_slowdown of None means the calibrated defaults."""
    for name, value in (("max_slowdown", max_slowdown), ("max_parity_drift", max_parity_drift)):
        if name == "max_slowdown" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
            raise UsageError(f"Option '{name}' | got {value!r}, expected a finite number >= 1")


def slowdown_threshold(kind: str, base_ms: float, given: float | None) -> float:
    """The p50 ratio a slowdown must pass: `given`, else the calibrated default for the comparison's kind and
    the call's size (the baseline's p50)."""
    if given is not None:
        return given
    tiny = base_ms < TINY_MS
    if kind == PAIRED_AB:
        return PAIRED_TINY if tiny else PAIRED
    return CROSS_RUN_TINY if tiny else CROSS_RUN


def paired_decided(low: float, high: float, base_ms: float, given: float | None = None) -> bool:
    """Whether a paired ratio's interval (new / baseline) is wholly above the threshold or wholly below it;
    else more rounds can decide it (run.paired's sequential rounds)."""
    limit = slowdown_threshold(PAIRED_AB, base_ms, given)
    return low > limit or high < limit


def paired_flagged(low: float, base_ms: float, given: float | None = None) -> bool:
    """Whether a paired ratio's interval lies wholly above the threshold: then a fresh process pair measures it
    again (run.paired.confirm), and the regression stands only if that pair agrees."""
    return low > slowdown_threshold(PAIRED_AB, base_ms, given)


def diff_results(base: Results | None, current: Results, *, max_slowdown: float | None = None,
                 max_parity_drift: float = 10.0, drift_floor: float = 1e-7) -> Diff:
    """Every check of `current` against `base` (None: a baseline with artifacts and no results.json, so only
    the latency measured against them in this run's rounds is judged)."""
    check_thresholds(max_slowdown, max_parity_drift)
    out = Diff(max_slowdown=max_slowdown, max_parity_drift=max_parity_drift)
    if base is None:
        for name, row in current.backends.items():
            out.checks.extend(_latency_checks(name, None, row, max_slowdown, current.pairing))
        return out
    for name, b in base.backends.items():
        c = current.backends.get(name)
        if c is None:
            out.checks.append(Check(name, "status", "missing", "backend is in the baseline but not in this run",
                                    b.status.value, None))
            continue
        out.checks.append(_status_check(name, b, c))
        out.checks.extend(_parity_checks(name, b, c, max_parity_drift, drift_floor))
        out.checks.extend(_latency_checks(name, b, c, max_slowdown, current.pairing))
        out.checks.extend(_version_checks(name, b, c))
    for name, c in current.backends.items():
        if name not in base.backends:
            out.checks.append(Check(name, "status", "new", "not in the baseline", None, c.status.value))
    return out


def _status_check(name, b: BackendResult, c: BackendResult) -> Check:
    was, now = b.status.value, c.status.value
    if was == now:
        return Check(name, "status", "ok", now, was, now)
    if b.status is Status.OK:
        return Check(name, "status", "regression", f"was ok, now {now}: {c.reason}", was, now)
    if c.status is Status.OK:
        return Check(name, "status", "improvement", f"was {was}, now ok", was, now)
    return Check(name, "status", "ok", f"still failing: {now}", was, now)


def _version_checks(name, b: BackendResult, c: BackendResult) -> list[Check]:
    """A producer or consumer version that changed between the runs: flagged (not failed), since it explains
    a difference (a StableHLO the new consumer cannot read, a faster runtime)."""
    checks = []
    for key in sorted(set(b.versions) | set(c.versions)):
        if key in ("python",):
            continue
        was, now = b.versions.get(key), c.versions.get(key)
        if was != now:
            checks.append(Check(name, f"version {key}", "changed", f"{key} {was} -> {now}", was, now))
    for key in sorted(set(b.requires) | set(c.requires)):
        if key == "note":
            continue
        was, now = b.requires.get(key), c.requires.get(key)
        if was != now:
            checks.append(Check(name, f"requires {key}", "changed", f"{key} {was} -> {now}", str(was), str(now)))
    return checks


def _worst_rel(parity, elementwise: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """Per output leaf: the worst headline error (relative to the leaf's scale) over trials, and its rtol;
    elementwise: the worst element-wise relative error instead."""
    worst: dict[str, float] = {}
    rtol: dict[str, float] = {}
    for v in (parity.leaves if parity else []):
        value = (v.stats.max_rel if elementwise else v.stats.err_scale) if v.stats.compared else math.inf
        worst[v.name] = max(worst.get(v.name, 0.0), value)
        rtol[v.name] = float(v.tolerance.rtol)
    return worst, rtol


def _parity_checks(name, b, c, factor, floor) -> list[Check]:
    # A schema-1 baseline has no error relative to scale: both sides are then compared element-wise.
    elementwise = any(v.stats.err_scale == LEGACY_SCALE for v in (b.parity.leaves if b.parity else []))
    (base, _), (cur, rtols) = _worst_rel(b.parity, elementwise), _worst_rel(c.parity, elementwise)
    what = "max element-wise rel error (the baseline, schema 1, has no error / scale)" if elementwise else \
        "max error / scale"
    checks = []
    for leaf, now in cur.items():
        was = base.get(leaf)
        if was is None:
            continue
        # Growth far inside the tolerance (below a tenth of its rtol) is rounding moving around, not drift.
        limit = max(was * factor, floor, 0.1 * rtols.get(leaf, 0.0))
        grew = now > limit if math.isfinite(now) else math.isfinite(was)
        verdict = "regression" if grew else "ok"
        ratio = now / was if was > 0 and math.isfinite(now) else None
        checks.append(Check(name, f"parity {leaf}", verdict, f"{what} {was:.3g} -> {now:.3g}", was, now, ratio))
    return checks


def _latency_checks(name, b: BackendResult | None, c: BackendResult, given: float | None,
                    pairing: Pairing | None) -> list[Check]:
    base = {s.batch: s.latency for s in (b.bench.measured() if b is not None and b.bench else [])}
    checks = []
    for s in (c.bench.measured() if c.bench else []):
        now = s.latency
        if now is None:  # measured() keeps only the sizes with a latency
            continue
        batch = "as exported" if s.batch is None else s.batch
        first = pairing.baseline_ratio(s.batch, name) if pairing is not None else None
        if first is not None and pairing is not None:
            fresh = pairing.confirmation(s.batch, name)
            checks.append(_paired_check(name, f"latency@{batch}", first, fresh, base.get(s.batch), now, given,
                                        pairing.rounds, pairing.confirmation_failures.get(name)))
            continue
        was = base.get(s.batch)
        if was is None:
            continue
        ratio = now.p50_ms / was.p50_ms if was.p50_ms > 0 else math.inf
        limit = slowdown_threshold(CROSS_RUN_KIND, was.p50_ms, given)
        separated_slower = now.ci95_low_ms > was.ci95_high_ms
        separated_faster = now.ci95_high_ms < was.ci95_low_ms
        if ratio > limit and separated_slower:
            verdict = "regression"
        elif ratio < 1 / limit and separated_faster:
            verdict = "improvement"
        else:
            verdict = "ok"
        why = "intervals separate" if separated_slower or separated_faster else "intervals overlap"
        unpaired = (pairing.baseline_failures.get(name) if pairing is not None else None) or "no baseline artifacts"
        checks.append(Check(name, f"latency@{batch}", verdict,
                            f"cross-run: p50 {was.p50_ms:.4g} -> {now.p50_ms:.4g} ms ({ratio:.2f}x, {why}; threshold "
                            f"{limit:g}x across runs; not paired: {unpaired})", was.p50_ms, now.p50_ms, ratio,
                            CROSS_RUN_KIND))
    return checks


def _rounds(r: Ratio, planned: int) -> int | None:
    """The rounds a ratio against its baseline rests on: its own record (0: the pairing's planned rounds)."""
    return None if getattr(r, "rounds", None) is None else int(r.rounds or planned)


def _pair_text(r: Ratio, name: str, planned: int) -> str:
    ratio, low, high = new_over_baseline(r, name)
    rounds = _rounds(r, planned)
    return (f"over {rounds if rounds is not None else f'at least {planned}'} rounds: new/baseline {ratio:.3f}x, "
            f"{getattr(r, 'level', 0.95):.0%} interval {low:.3f}-{high:.3f}")


def _paired_check(name, check, first: Ratio, fresh: Ratio | None, was, now, given: float | None, planned: int,
                  fresh_failed: str | None = None) -> Check:
    """Latency on the ratio new / baseline of the same rounds: a regression when the interval lies above the
    threshold in the first process pair and in the fresh pair where one measured it (the check then has the
    union of both intervals and the less regressed pair's ratio); an improvement when the first lies below."""
    ratio, low, high = new_over_baseline(first, name)
    # the baseline's p50 in this run, as the rounds measured it (else as the ratio implies): the call size
    base_ms = float(first.base_ms) if first.base_ms else now.p50_ms / ratio if ratio > 0 else float(now.p50_ms)
    limit = slowdown_threshold(PAIRED_AB, base_ms, given)
    recorded = f"; recorded baseline p50 {was.p50_ms:.4g} ms" if was is not None else ""
    per_round = f" on each round's p{first.quantile}" if first.quantile else ""
    text, pairs = f"paired A/B {_pair_text(first, name, planned)}", 1
    if fresh is not None:
        again, low2, high2 = new_over_baseline(fresh, name)
        pairs, agreed = 2, low2 > limit
        text += (f"; a fresh process pair {_pair_text(fresh, name, planned)}" +
                 ("" if agreed or low <= limit else ": not confirmed (its interval reaches the threshold: the first "
                                                    "pair's excess can be its processes' own)"))
        ratio, low, high = min(ratio, again), min(low, low2), max(high, high2)  # the less regressed pair's
    elif low > limit:
        text += f"; one process pair ({fresh_failed or 'no fresh pair measured it again'})"
    verdict = "regression" if low > limit else "improvement" if high < 1 / limit else "ok"
    return Check(name, check, verdict, f"{text} (threshold {limit:g}x{per_round}; p50 {base_ms:.4g} -> "
                 f"{now.p50_ms:.4g} ms in this run{recorded})",
                 base_ms, now.p50_ms, ratio, PAIRED_AB, _rounds(first, planned), low, high, pairs)


def aggregate_latency(diff: Diff, max_slowdown: float | None, group=lambda backend: backend,
                      paired_slowdown: float | None = None) -> Diff:
    """Gate latency per backend on the geometric mean of its p50 ratios, not on each entry: one tiny call of a
    suite can move 3-5x between runs of the same code, a real regression moves every model. Entries stay in
    the table as information ("slower"/"faster"); the gate is one check per backend group and comparison
    kind: the geometric mean above the threshold, with at least half of the entries slower beyond their
    intervals (paired: the interval, both pairs' where two measured it, wholly above the threshold); cross-run
    at `max_slowdown` (None: CROSS_RUN), paired A/B at `paired_slowdown` (None: the default by call size)."""
    max_slowdown = max_slowdown if max_slowdown is not None else CROSS_RUN  # a suite's baseline is another run
    groups: dict[tuple[str, str], list[Check]] = {}
    kept = []
    for c in diff.checks:
        if c.check.startswith("latency@") and c.ratio is not None and math.isfinite(c.ratio) and c.ratio > 0:
            groups.setdefault((group(c.backend), PAIRED_AB if c.kind == PAIRED_AB else CROSS_RUN_KIND), []).append(c)
            if c.verdict == "regression":
                c.verdict, c.detail = "slower", c.detail + " (gated per backend, below)"
            elif c.verdict == "improvement":
                c.verdict = "faster"
        kept.append(c)
    for (name, kind), checks in groups.items():
        # every check here has a ratio: only those with a finite ratio > 0 were grouped, above
        ratios = [c.ratio for c in checks if c.ratio is not None]
        geo = math.exp(sum(math.log(r) for r in ratios) / len(checks))
        if kind == PAIRED_AB:
            sizes = sorted(float(c.base) for c in checks if isinstance(c.base, (int, float)))
            limit = slowdown_threshold(PAIRED_AB, sizes[len(sizes) // 2] if sizes else 0.0, paired_slowdown)
            separated = sum(c.low is not None and c.low > limit for c in checks)  # as one entry's verdict: above it
            title = f"latency (paired A/B, geometric mean of {len(checks)})"
            rounds = sorted(c.rounds for c in checks if c.rounds is not None)
            over = f", {rounds[0]}-{rounds[-1]} rounds each" if rounds else ""
        else:
            limit = max_slowdown
            separated = sum(r > 1 and "intervals separate" in c.detail for c, r in zip(checks, ratios))
            title, over = f"latency (geometric mean of {len(checks)})", ""
        flagged = geo > limit and separated * 2 >= len(checks)
        kept.append(Check(name, title, "regression" if flagged else "ok",
                          f"{kind}: p50 ratio {geo:.2f}x over {len(checks)} model x batch entries{over} (threshold "
                          f"{limit:g}x), {separated} slower beyond their intervals", None, None, geo, kind))
    return Diff(kept, diff.max_slowdown, diff.max_parity_drift)


def _thresholds(diff: Diff) -> str:
    if diff.max_slowdown is not None:
        return f"slowdown threshold {diff.max_slowdown:g}x (given)"
    return (f"slowdown thresholds: paired A/B {PAIRED:g}x on the interval's low end ({PAIRED_TINY:g}x under "
            f"{TINY_MS * 1000:g} us), cross-run {CROSS_RUN:g}x with separated intervals ({CROSS_RUN_TINY:g}x under "
            f"{TINY_MS * 1000:g} us)")


def markdown(diff: Diff, title: str = "multiexport regression check") -> str:
    mark = {"ok": "ok", "regression": "**REGRESSION**", "missing": "**MISSING**", "improvement": "improved", "new": "new",
            "slower": "slower", "faster": "faster", "changed": "changed"}
    lines = [f"### {title}", "",
             f"{len(diff.regressions)} regression(s); {_thresholds(diff)}; parity drift threshold "
             f"{diff.max_parity_drift:g}x.", "",
             "| backend | check | verdict | kind | detail |", "|---|---|---|---|---|"]
    for c in diff.checks:
        lines.append(f"| {md(c.backend)} | {md(c.check)} | {mark.get(c.verdict, md(c.verdict))} | {md(c.kind)} | "
                     f"{_md_text(c.detail)} |")
    return "\n".join(lines) + "\n"


def _md_text(value: object) -> str:
    """`md`, with its '&gt;' back to '>': md escapes '&' first, so every '&gt;' it returns was a '>', and a '>'
    inside a table cell opens no tag (only '<' does) and quotes nothing ("p50 1 -> 2 ms" reads as written)."""
    return md(value).replace("&gt;", ">")


def terminal(diff: Diff, title: str = "multiexport regression check") -> str:
    """The gate as plain lines for a terminal or a CI log: no Markdown, no HTML entities; every name and
    detail one line with control characters escaped."""
    mark = {"regression": "REGRESSION", "missing": "MISSING", "improvement": "improved"}
    lines = [f"{title}: {len(diff.regressions)} regression(s); {_thresholds(diff)}; parity drift threshold "
             f"{diff.max_parity_drift:g}x"]
    for c in diff.checks:
        lines.append(f"  {mark.get(c.verdict, c.verdict):<10}  {one_line(c.backend)}  {one_line(c.check)}  "
                     f"[{c.kind}] {one_line(c.detail)}")
    return "\n".join(lines) + "\n"


def junit(diff: Diff, suite: str = "multiexport") -> str:
    """JUnit XML: one test case per backend x check; regressions are failures."""
    cases = []
    for c in diff.checks:
        # a name or detail may hold characters XML 1.0 cannot carry at all (C0 controls): shown escaped
        detail, backend, check = visible(c.detail), visible(c.backend), visible(c.check)
        # which kind of comparison the verdict rests on: a property, and the failure message's first words
        rounds = f'<property name="rounds" value="{c.rounds}"/>' if c.rounds is not None else ""
        rounds += f'<property name="process_pairs" value="{c.pairs}"/>' if c.pairs is not None else ""
        body = f'<properties><property name="comparison" value={quoteattr(c.kind)}/>{rounds}</properties>'
        if c.verdict in ("regression", "missing"):
            message = f"[{c.kind}] {detail}"
            body += f"<failure message={quoteattr(message)}>{escape(message)}</failure>"
        elif c.verdict == "new":
            body += f"<skipped message={quoteattr('not in the baseline')}/>"
        cases.append(f'  <testcase classname={quoteattr(f"{visible(suite)}.{backend}")} name={quoteattr(check)}>{body}</testcase>')
    failures = sum(c.verdict in ("regression", "missing") for c in diff.checks)
    skipped = sum(c.verdict == "new" for c in diff.checks)
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name={quoteattr(visible(suite))} tests="{len(diff.checks)}" '
            f'failures="{failures}" skipped="{skipped}">\n' + "\n".join(cases) + "\n</testsuite>\n")


def publish(diff: Diff, junit_path: str | os.PathLike | None = None) -> str:
    """Write the JUnit file if asked and append the Markdown to $GITHUB_STEP_SUMMARY when set; returns the
    terminal lines (what the caller prints)."""
    text = markdown(diff)
    if junit_path:
        write_owned_text(Path(junit_path), junit(diff), "Option '--junit'")  # never over a file of the user's
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(text)
    return terminal(diff)
