"""Typed records of a load measurement (`multiexport load`, `compare --load`): the Server and Offline scenarios.

Server (MLPerf LoadGen's Server scenario): requests arrive as a Poisson process at a target rate, a fixed schedule
drawn from a seed; each request's latency runs from its *scheduled* arrival to its completion, so time spent
queued behind busy lanes counts. Offline: every lane calls back to back, the figure is samples per second.
Every figure comes with the range over its rounds. The codec is results.json's (`results.schema`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .schema import from_data, to_data

LOAD_SCHEMA = "multiexport.load/1"


@dataclass(frozen=True)
class RatePoint:
    """One target rate of the Server scenario, its requests pooled over the rounds.

    rate_per_s: the target (Poisson) arrival rate. achieved_per_s: completed requests over the time from the first
    scheduled arrival to the last completion (below the target once the runtime cannot keep up).
    n: requests measured. rounds: how many rounds ran this rate.
    p50_ms, p90_ms, p99_ms: latency percentiles from scheduled arrival to completion, pooled over the rounds.
    p99_low_ms, p99_high_ms: the lowest and highest per-round p99 (the spread of the figure across rounds).
    meets_bound: pooled p99 <= the bound.
    """

    rate_per_s: float
    achieved_per_s: float
    n: int
    rounds: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p99_low_ms: float
    p99_high_ms: float
    meets_bound: bool


@dataclass(frozen=True)
class ServerResult:
    """The Server scenario of one format.

    p99_bound_ms: the latency bound. search: how the rates were chosen ("ladder: fractions of the offline batch-1
    peak" or "ladder: --rates"). points: every rate measured, ascending. max_rate_per_s: the highest rate that,
    with every lower rate measured, met the bound with its pooled p99 (None: the lowest did not).
    max_rate_low, max_rate_high: the lowest and highest of the per-round maxima (the same rule on each round's own
    p99s; 0 for a round whose lowest rate missed).
    """

    p99_bound_ms: float
    search: str
    points: list[RatePoint] = field(default_factory=list)
    max_rate_per_s: float | None = None
    max_rate_low: float | None = None
    max_rate_high: float | None = None


@dataclass(frozen=True)
class MultiStreamResult:
    """The MultiStream scenario of one format (MLPerf LoadGen's): a query of `samples_per_query` samples (the example
    input each) is issued when the previous query completed, its samples spread over the lanes.

    samples_per_query: K. queries: queries measured, all rounds. rounds: how many rounds ran it.
    p50_ms, p90_ms, p99_ms: the queries' latency (issue to the last sample's completion), pooled over the rounds;
    p99 is the scenario's figure. p99_low_ms, p99_high_ms: the lowest and highest per-round p99.
    samples_per_s: samples completed over the time the queries took.
    """

    samples_per_query: int
    queries: int
    rounds: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p99_low_ms: float
    p99_high_ms: float
    samples_per_s: float


@dataclass(frozen=True)
class OfflinePoint:
    """The Offline scenario at one batch size.

    batch: the batch size (None: the artifact's one static shape, not a batch). status: "ok" or "size-unsupported".
    reason: why a size was not measured. samples_per_s: the median over rounds of items per second (batch x calls
    per second, every lane together). low, high: the lowest and highest round. per_round: each round's figure.
    calls: calls completed over all rounds.
    """

    batch: int | None
    status: str = "ok"
    reason: str = ""
    samples_per_s: float | None = None
    low: float | None = None
    high: float | None = None
    per_round: list[float] = field(default_factory=list)
    calls: int = 0


@dataclass(frozen=True)
class LoadRow:
    """One format under load.

    name: the runner's name (the format). artifact: its directory. status: "ok", or the failure's category.
    reason: why it failed. lanes: requests in flight at once (one thread each, each with its own prepared inputs).
    throughput_config: what the runtime was set to for throughput, as the runner reports it (e.g. OpenVINO's
    PERFORMANCE_HINT and streams; "driver": "native" when the native consumer's C loop ran the scenarios;
    "driver_probe": each driver's calls/s in auto's probe, where one ran).
    single_stream_p50_ms: one call at a time, no load (the single-stream figure the server ranking is compared
    against). server, offline, multistream: the scenarios' results.
    """

    name: str
    artifact: str
    status: str = "ok"
    reason: str = ""
    lanes: int = 1
    throughput_config: dict[str, Any] = field(default_factory=dict)
    single_stream_p50_ms: float | None = None
    server: ServerResult | None = None
    offline: list[OfflinePoint] = field(default_factory=list)
    multistream: MultiStreamResult | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def offline_peak(self) -> OfflinePoint | None:
        """The batch size with the highest median samples/s."""
        measured = [p for p in self.offline if p.samples_per_s is not None]
        return max(measured, key=lambda p: p.samples_per_s or 0.0, default=None)


@dataclass(frozen=True)
class LoadResults:
    """A load run: every format's row, the settings, and the verdicts.

    schema: LOAD_SCHEMA. config: the settings (LoadConfig's fields). machine: cores and threads given to each format.
    rows: one per format. server_verdict, single_stream_verdict: the sentences the report prints.
    rankings_differ: whether ordering the formats by max rate under the bound differs from ordering them by
    single-stream p50 (None: fewer than two formats with both figures).
    """

    schema: str = LOAD_SCHEMA
    config: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    rows: list[LoadRow] = field(default_factory=list)
    server_verdict: str = ""
    single_stream_verdict: str = ""
    rankings_differ: bool | None = None

    def write(self, path: Path) -> None:
        import json

        path.write_text(json.dumps(to_data(self), indent=1))


def read_load_results(path: str | Path) -> LoadResults:
    """A load.json, every field checked; InputError naming the file otherwise."""
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"Load results '{path}' | unreadable ({exc}), expected a load.json") from None
    if not isinstance(data, dict) or data.get("schema") != LOAD_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"Load results '{path}' | got schema {got!r}, expected {LOAD_SCHEMA!r}")
    return from_data(LoadResults, data, str(path))
