"""Where a model x backend's latency or parity moved over the sweeps' history: change points, not pairs.

Two sweeps differ by the machine's noise, so "this run is slower than the last" says little; a series
says more: a change point splits it where the level moved and stayed moved. The search is ruptures'
PELT (exact minimisation of the segments' squared error plus a penalty per change; installed with
`multiexport[sweep]`), on log p50 for latency and log10 of the worst error / scale for parity. The
penalty is BIC-like, PENALTY * sigma^2 * log(n), with sigma the series' own noise estimated robustly
from its successive differences (a step moves one difference, not the median), floored so a series of
identical figures (a deterministic error) is not split by rounding. A change is reported only when the
medians either side differ by at least MIN_LATENCY_SHIFT (latency) or MIN_PARITY_SHIFT (parity); each
segment holds at least MIN_SIZE sweeps, so one slow sweep is noise, not a change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import UsageError
from ..files.text import visible
from ..report.regression import HISTORY, Check, Diff, publish
from .history import HistoryRow

MIN_SIZE = 2
PENALTY = 5.0  # gate_calibration --history: 2/200 noise series of 20 sweeps split, 191/200 1.2x steps found
MIN_LATENCY_SHIFT = 1.10
MIN_PARITY_SHIFT = 2.0
NOISE_FLOOR = {"latency": 0.01, "parity": 0.05}  # log units: 1% of a p50; 12% of an error
PARITY_FLOOR = 1e-12  # an error of exactly 0 (bit-exact) as the smallest on the log scale


@dataclass(frozen=True)
class Shift:
    """One change point of a model x backend series.

    model, backend: the series. measure: "latency" (p50 at the first measured size) or "parity" (worst
    error / scale). sweep, created: the first sweep after the change (the one that moved it); after_sweep:
    the last sweep before it. before, after: the series' median either side (ms, or error / scale).
    ratio: after / before. runs_before, runs_after: how many sweeps each side's segment holds.
    """

    model: str
    backend: str
    measure: str
    sweep: str
    created: str
    after_sweep: str
    before: float
    after: float
    ratio: float
    runs_before: int
    runs_after: int


def require_ruptures():
    """The ruptures module, or a one-line UsageError naming the extra that installs it."""
    try:
        import ruptures  # type: ignore[import-untyped]
    except ImportError:
        raise UsageError("Change points | need ruptures, expected it installed: pip install 'multiexport[sweep]'") \
            from None
    return ruptures


def shifts(rows: Iterable[HistoryRow]) -> list[Shift]:
    """Every latency and parity change point of every model x backend in `rows` (oldest sweep first, as
    `History.rows` gives them), oldest first within each series."""
    require_ruptures()
    series: dict[tuple[str, str], list[HistoryRow]] = {}
    for row in rows:
        if row.status == "ok":  # a failed row has no figure: its status change is `History.changes`'
            series.setdefault((row.model, row.backend), []).append(row)
    out = []
    for (model, backend), runs in series.items():
        for measure in ("latency", "parity"):
            out += _series_shifts(model, backend, measure, runs)
    return out


def _series_shifts(model: str, backend: str, measure: str, runs: Sequence[HistoryRow]) -> list[Shift]:
    if measure == "latency":
        kept = [(r, r.p50_ms) for r in runs if r.p50_ms is not None and r.p50_ms > 0]
        values = [math.log(v) for _, v in kept]
    else:
        kept = [(r, r.err_scale) for r in runs if r.err_scale is not None and math.isfinite(r.err_scale)]
        values = [math.log10(max(v, PARITY_FLOOR)) for _, v in kept]
    least = MIN_LATENCY_SHIFT if measure == "latency" else MIN_PARITY_SHIFT
    edges = [0, *change_points(values, NOISE_FLOOR[measure]), len(values)]
    out = []
    for start, cut, end in zip(edges, edges[1:], edges[2:]):
        before = _median([v for _, v in kept[start:cut]])
        after = _median([v for _, v in kept[cut:end]])
        ratio = after / before if before > 0 else math.inf if after > 0 else 1.0
        if ratio >= least or ratio <= 1 / least:
            row, last = kept[cut][0], kept[cut - 1][0]
            out.append(Shift(model, backend, measure, row.sweep, row.created, last.sweep, before, after, ratio,
                             cut - start, end - cut))
    return out


def change_points(values: Sequence[float], noise_floor: float) -> list[int]:
    """Indices where a new segment of `values` starts (PELT, l2 cost, the BIC-like penalty on the series'
    robust noise); [] for a series too short to hold two segments."""
    import numpy as np

    rpt = require_ruptures()
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2 * MIN_SIZE:
        return []
    steps = np.diff(x)
    # MAD of the successive differences / sqrt(2): the noise of one figure, blind to a few steps
    sigma = max(1.4826 * float(np.median(np.abs(steps - np.median(steps)))) / math.sqrt(2), noise_floor)
    found = rpt.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(x.reshape(-1, 1)).predict(
        pen=PENALTY * sigma**2 * math.log(len(x)))
    return [int(i) for i in found[:-1]]  # the last "break" is the series' end


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def render_shifts(found: Sequence[Shift]) -> str:
    """One line per change point: the sweep that moved the series, and by how much."""
    lines = []
    for s in found:
        unit = " ms" if s.measure == "latency" else " (error / scale)"
        word = ("slower" if s.ratio > 1 else "faster") if s.measure == "latency" else (
            "worse" if s.ratio > 1 else "better")
        lines.append(f"{s.model}/{s.backend}: {s.measure} moved in sweep {s.sweep!r} ({s.created}), after sweep "
                     f"{s.after_sweep!r}: {s.before:.4g} -> {s.after:.4g}{unit} ({s.ratio:.3g}x {word}; medians of "
                     f"{s.runs_before} and {s.runs_after} sweeps)")
    return "\n".join(visible(line) for line in lines)  # every string came from a database: shown escaped


def history_checks(found: Sequence[Shift]) -> list:
    """The gate against the history (report.regression.Check, kind "history"): per series, its last change
    point, whose segment runs to the latest sweep; a regression when latency moved slower by at least
    MIN_LATENCY_SHIFT or parity worse by at least MIN_PARITY_SHIFT, judged on the medians of whole segments
    of sweeps (each at least MIN_SIZE), not on two runs."""

    last: dict[tuple[str, str, str], Shift] = {}
    for s in found:
        last[(s.model, s.backend, s.measure)] = s  # oldest first: the last one stands
    checks = []
    for s in last.values():
        least = MIN_LATENCY_SHIFT if s.measure == "latency" else MIN_PARITY_SHIFT
        verdict = "regression" if s.ratio >= least else "improvement"
        checks.append(Check(f"{s.model}/{s.backend}", f"{s.measure} history", verdict,
                            f"history: {s.before:.4g} -> {s.after:.4g} ({s.ratio:.3g}x) from sweep {s.sweep!r}, medians "
                            f"of {s.runs_before} and {s.runs_after} sweeps (change point, ruptures PELT)",
                            s.before, s.after, s.ratio, HISTORY))
    return checks


def describe(rows: Sequence[HistoryRow]) -> str:
    """`history --changes`' lines on latency and parity: each change point ("" when there is none), or why
    none was searched."""
    try:
        found = shifts(rows)
    except UsageError as exc:  # ruptures not installed: the status changes above still stand
        return f"latency and parity change points: not searched ({exc})"
    return render_shifts(found)


def history_gate(rows: Sequence[HistoryRow], junit_path=None) -> int:
    """`history --gate`: the gate against the history; prints its lines, publishes the Markdown (and JUnit
    when asked); returns 1 when a series' last change made it slower or worse."""

    diff = Diff(history_checks(shifts(rows)))
    print(publish(diff, junit_path))
    return diff.exit_code
