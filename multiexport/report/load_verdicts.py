"""The load report's verdicts for a server: the Server and MultiStream rankings, with rows measured under different
drivers (a native consumer's C loop, the serve worker's Python lanes) ranked like with like, and the single-stream
verdict beside them (report.load renders them)."""

from __future__ import annotations

import math
from typing import Sequence

from ..results.bench import BASELINE_PREFIX
from ..results.load import LoadResults, LoadRow, ServerResult


def number(value: float | None, unit: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "-" if value is None else ("inf" if value > 0 else str(value))
    text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text}{unit}"


# Who issued a row's requests (`throughput_config["driver"]`): rows of different drivers are not ranked as equals.
# Under "native" the consumer's C loop ran the scenario: its figures are the runtime's. Under "python" the serve
# worker's Python lanes did: for calls of tens of microseconds the lanes, not the runtime, can set the rate
# (benchmarks/load.md, the harness against a bare C loop: 0.11-0.76 of the C rate measured). A Python row that ran
# there because auto's probe found its lanes faster than its own C loop is ranked with the C loops (`rank_group`).
DRIVERS = {"native": "the C loops (not limited by the harness)",
           "python": "the Python lanes (the harness may limit them, not the runtime)"}

DRIVER_SHORT = {"native": "C loop", "python": "Python lanes"}


def driver_of(row: LoadRow) -> str:
    """The driver a row ran under ("native" or "python"; a row that recorded none ran under the Python driver)."""
    return str(row.throughput_config.get("driver") or "python")


def probed_faster(row: LoadRow) -> bool:
    """Whether `row` ran in the Python lanes because auto's probe found them faster than its own C loop
    (`throughput_config["driver_probe"]`): then the harness did not limit it (it beat the bare loop)."""
    probe = row.throughput_config.get("driver_probe")
    return (driver_of(row) == "python" and isinstance(probe, dict)
            and float(probe.get("python") or 0.0) > float(probe.get("native") or 0.0))


def rank_group(row: LoadRow) -> str:
    """The group a row is ranked in: "native" for the C loops' rows and the Python rows that beat their C loop
    (`probed_faster`), else its driver."""
    return "native" if probed_faster(row) else driver_of(row)


def driver_short(row: LoadRow) -> str:
    """The row's driver in a table cell ("C loop", "Python lanes", or "Python lanes, faster than its C loop")."""
    short = DRIVER_SHORT.get(driver_of(row), driver_of(row))
    return f"{short}, faster than its C loop" if probed_faster(row) else short


def by_driver(rows: Sequence[LoadRow]) -> list[tuple[str, list[LoadRow]]]:
    """`rows` grouped as they are ranked (`rank_group`), order kept within a group, the C loops' group first."""
    groups: dict[str, list[LoadRow]] = {}
    for row in rows:
        groups.setdefault(rank_group(row), []).append(row)
    return sorted(groups.items(), key=lambda kv: (kv[0] != "native", kv[0]))


def _among(driver: str, groups: list) -> str:
    """'among the C loops (...), ' when the rows ran under more than one driver, else ''; the C loops' group names
    the Python lanes that beat their C loop when it holds any."""
    if len(groups) < 2:
        return ""
    rows = dict(groups).get(driver, [])
    if driver == "native" and any(probed_faster(r) for r in rows):
        return "among the C loops and the Python lanes faster than their C loop (not limited by the harness), "
    return f"among {DRIVERS.get(driver, driver)}, "


def _server_ranking(served: list[LoadRow], bound_ms: float, lead: str) -> str:
    best = served[0].server or ServerResult(bound_ms, "")
    text = f"{lead}{served[0].name}: {number(best.max_rate_per_s)} req/s"
    if len(served) > 1:
        nxt = served[1].server or ServerResult(bound_ms, "")
        text += f", the next best {served[1].name}: {number(nxt.max_rate_per_s)} req/s"
        if best.max_rate_per_s == nxt.max_rate_per_s:
            text += " (the same ladder rate: ranked by the offline peak)"
        elif (best.max_rate_low or 0.0) <= (nxt.max_rate_high or 0.0):
            text += " (the rounds' ranges overlap: within the noise on this machine)"
    return text


def verdicts(rows: Sequence[LoadRow], bound_ms: float) -> tuple[str, str, bool | None]:
    """(server verdict, single-stream verdict, whether the two rankings differ).

    Server: the format with the highest max rate under the bound (ServerResult.max_rate_per_s; a tie on the ladder
    broken by the offline peak), and the next best. A lead whose
    rounds' ranges overlap the next best's is said to be within the noise. Rows measured under different drivers
    (`driver_of`: a native consumer's C loop, the Python lanes) are ranked like with like: the C loops' ranking
    first (it ships), then the Python lanes' apart, each group named. Single stream: the lowest p50 with no
    load (timed the same way for every format). The rankings differ when the order by max rate is not the order by
    single-stream p50 (only formats with both figures, in the leading driver's group; None with fewer than two)."""
    def rank(row: LoadRow) -> tuple[float, float]:  # max rate, then the offline peak breaks a tie on the ladder
        peak = row.offline_peak()
        return (-((row.server.max_rate_per_s if row.server else None) or 0.0),
                -((peak.samples_per_s if peak else None) or 0.0))

    rows = [r for r in rows if not r.name.startswith(BASELINE_PREFIX)]  # a paired run's baselines are not candidates
    groups = by_driver(sorted([r for r in rows if r.ok and r.server is not None and r.server.max_rate_per_s],
                              key=rank))
    served = groups[0][1] if groups else []
    if served:
        text = f"at p99 <= {bound_ms:g} ms, " + "; ".join(
            _server_ranking(group, bound_ms, _among(driver, groups) + ("ship " if k == 0 else ""))
            for k, (driver, group) in enumerate(groups))
    elif any(r.server is not None for r in rows):
        text = f"at p99 <= {bound_ms:g} ms no format held any rate measured (raise --p99-ms or lower --rates)"
    else:
        text = ""
    timed = sorted([r for r in rows if r.ok and r.single_stream_p50_ms is not None],
                   key=lambda r: r.single_stream_p50_ms or 0.0)
    single = ""
    if timed:
        single = f"single stream (one call at a time): {timed[0].name} at p50 {number(timed[0].single_stream_p50_ms)} ms"
        if len(timed) > 1:
            single += f", the next best {timed[1].name}: {number(timed[1].single_stream_p50_ms)} ms"
    both = [r for r in served if r.single_stream_p50_ms is not None]
    if len(both) < 2:
        return text, single, None
    by_rate = [r.name for r in both]
    by_latency = [r.name for r in sorted(both, key=lambda r: r.single_stream_p50_ms or 0.0)]
    return text, single, by_rate != by_latency


def multistream_verdict(results: LoadResults) -> str:
    """The MultiStream verdict: the format with the lowest p99 query latency, and the next best (within the noise
    when their rounds' p99 ranges overlap); rows of different drivers ranked apart, as the server verdict's."""
    rows = sorted([r for r in results.rows if r.ok and r.multistream is not None
                   and not r.name.startswith(BASELINE_PREFIX)],
                  key=lambda r: r.multistream.p99_ms if r.multistream else math.inf)
    groups = by_driver(rows)
    if not groups:
        return ""
    parts, per_query = [], 0
    for driver, group in groups:
        best = group[0].multistream
        if best is None:
            continue
        per_query = best.samples_per_query
        text = f"{_among(driver, groups)}{group[0].name} at p99 {number(best.p99_ms)} ms"
        nxt = group[1].multistream if len(group) > 1 else None
        if nxt is not None:
            text += f", the next best {group[1].name}: {number(nxt.p99_ms)} ms"
            if best.p99_high_ms >= nxt.p99_low_ms:
                text += " (the rounds' ranges overlap: within the noise on this machine)"
        parts.append(text)
    return f"multistream ({per_query} samples per query): " + "; ".join(parts)
