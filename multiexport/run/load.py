"""Formats under load: each artifact in its own `serve` worker (run.serve), measured one at a time in rounds.

The parent (`measure_load`) starts one worker per artifact, has each load its runner and warm up (the paired
protocol's Load and Prepare), times its single-stream latency (TimeSlice), then in every round, the formats' order
rotating, asks each worker in turn for its Offline figure per batch size, its Server figure per rate and its
MultiStream figure (`run.load_serve.LoadRun`); only one worker runs at a time, the others block on a read. Under
`driver="auto"` (the default) or `"native"` a format whose native consumer has the load loops runs the scenarios in
that program instead (`run.load_native.native_loops` decides, and says why not), its worker waiting meanwhile (it
still times the single-stream figure); the native loops run on the CPU (on another device every format stays on
the Python driver). Under "auto" such a format first runs a short Offline probe in each driver (`PROBE_SECONDS`,
alternating), then its rounds in the faster one: the C loop is not always the faster (LiteRT's example CNN on a quiet
host: the Python Interpreter lanes 1.29x lite_run), and a row measured in the slower driver under-reports its format.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import MultiexportError, RunError
from ..exporting.manifest import Manifest
from ..files.npz import load_npz
from ..measure.bench import BenchConfig, summarize
from ..measure.inputs import trial_at
from ..measure.load import (
    LADDER,
    LoadConfig,
    ServerRun,
    ladder,
    multistream_result,
    poisson_schedule,
    server_result,
    spread,
)
from ..report.load import verdicts
from ..results.bench import BASELINE_PREFIX
from ..results.load import LoadResults, LoadRow, OfflinePoint
from ..system.timing_lock import machine_share
from .load_native import NativeLoop, close, native_loops, native_multistream, native_offline, native_server
from .messages import ColdStart, LoadAnswer, LoadRun, Prepare, Samples, TimeSlice
from .paired import Servers
from .runs import write_bench_feeds

SINGLE_STREAM_SECONDS = 1.0
# The driver probe under auto: each driver runs the Offline scenario on the example twice for this long, in the order
# C, Python, Python, C (the same for every format), so a drift over the probe weighs on both alike: 0.5 s each.
PROBE_SECONDS = 0.25
PROBE_ORDER = ("native", "python", "python", "native")
# The Python lanes run the rounds only when their probe rate beats the C loop's by more than this factor: two drivers
# within the probe's noise keep the C loop, whose figures are the runtime's by construction (the quiet host's LiteRT
# CNN, 1.29x, is past it; on a shared 2-core machine single 1 s rounds of one driver differ up to 2.6x, so there the
# probe's choice between close drivers is noise either way).
PROBE_MARGIN = 1.1


# -- the parent ------------------------------------------------------------------------------------------

@dataclass
class _Format:
    """What the rounds gather for one format."""

    name: str
    artifact: Path
    sizes: list[tuple[int | None, str]]  # (batch, reason when unsupported: "" when measured)
    offline: dict[int, list[float]] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    server: dict[float, list[ServerRun]] = field(default_factory=dict)
    rates: tuple[float, ...] = ()
    lanes: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    single_p50_ms: float | None = None
    multistream: list[tuple[np.ndarray, float]] = field(default_factory=list)
    native: dict[int, NativeLoop] = field(default_factory=dict)  # per size index, under the native driver
    native_refused: str = ""  # under the auto or native driver: why this format runs in the Python lanes
    probe: dict[str, float] = field(default_factory=dict)  # under auto: each driver's probe rate, calls/s
    probe_note: str = ""  # under auto: why the rounds did not run in the driver the probe chose ('' when they did)


def feeds_for(manifest: Manifest, directory: Path, batch_sizes: Sequence[int], seed: int
              ) -> list[tuple[int | None, dict | None, str]]:
    """(batch, feed, reason) per size: first the artifact's own example (what a Server request is), then each of
    `batch_sizes` the artifact can take (one symbolic dimension, a size it supports), else a reason."""
    if "example_inputs" not in manifest.files:
        raise ValueError(f"Artifact '{directory}' | has no example_inputs.npz, expected one to build the requests")
    example = load_npz(manifest.path(directory, "example_inputs"))
    symbols = list(manifest.symbolic_dims)
    fixed = {d: s for d, s in (manifest.supports.get("dims") or {}).items() if isinstance(s, list)}
    out: list[tuple[int | None, dict | None, str]] = [(_example_batch(manifest, example), example, "")]
    rng = np.random.default_rng(seed + 1)
    for size in batch_sizes:
        if size == out[0][0]:
            continue  # the example is that size already
        if len(symbols) != 1:
            out.append((size, None, f"the artifact has {len(symbols)} symbolic dimensions, expected one batch "
                                    "dimension: re-export the target with a symbolic batch to time other sizes"))
            continue
        sym = symbols[0]
        if sym in fixed and size not in fixed[sym]:
            out.append((size, None, f"the artifact was built for {sym}={','.join(map(str, fixed[sym]))} only (its "
                                    "converter could not keep the symbolic dimension)"))
            continue
        out.append((size, trial_at(manifest.inputs, example, {sym: size}, rng, f"load {sym}={size}").feed, ""))
    return out


def _example_batch(manifest: Manifest, example: dict) -> int | None:
    """The example's batch: its size of the one symbolic dimension (None for a static artifact: its figures are
    calls, not items; which leading axis is a batch is the target's, not the artifact's, to say)."""
    if len(manifest.symbolic_dims) != 1:
        return None
    sym = manifest.symbolic_dims[0]
    for leaf in manifest.inputs:
        if sym in leaf.shape and leaf.name in example:
            return int(np.shape(example[leaf.name])[list(leaf.shape).index(sym)])
    return None


def measure_load(artifacts: Sequence[tuple[str, Path]], config: LoadConfig, device: str = "cpu",
                 timeout: float = 600.0, progress: Callable[[str], None] = lambda _: None) -> LoadResults:
    """Every artifact under the scenarios of `config`, one worker each, measured one at a time in rotating rounds,
    holding the machine's timing lock alone where a sweep set one (system.timing_lock). A format whose worker fails
    is that row's failure only."""
    with machine_share(progress) as machine, machine.exclusive(True):  # a sweep's compares do not time beside it
        return _measure(artifacts, config, device, timeout, progress)


def _measure(artifacts: Sequence[tuple[str, Path]], config: LoadConfig, device: str, timeout: float,
             progress: Callable[[str], None]) -> LoadResults:
    servers = Servers(device, config.threads, timeout)
    formats: dict[str, _Format] = {}
    failed: dict[str, tuple[str, str]] = {}
    try:
        for name, directory in artifacts:
            try:  # an unreadable artifact is its row's failure, before any worker starts
                manifest = Manifest.read(directory)
                sizes = feeds_for(manifest, directory, config.batch_sizes, config.seed)
            except (MultiexportError, ValueError, OSError) as exc:
                formats[name] = _Format(name, directory, [])
                servers.failures[name] = ("load-failed", str(exc))
                continue
            servers.spawn(name, ["run", str(directory)], manifest.backend)
            feeds_dir = Path(tempfile.mkdtemp(prefix="load-feeds-", dir=servers.work))
            write_bench_feeds(feeds_dir, [(b, f) for b, f, _ in sizes],
                              {b: r for b, f, r in sizes if f is None})
            formats[name] = _Format(name, directory, [(b, r) for b, _, r in sizes])
            formats[name].config = {"feeds": str(feeds_dir)}
            try:
                feeds = [(i, f) for i, (_, f, _) in enumerate(sizes) if f is not None]
                formats[name].native, formats[name].native_refused = native_loops(
                    directory, manifest.backend, feeds, config.driver, device, config.threads, servers.work,
                    servers.timeout)
            except (MultiexportError, ValueError, OSError) as exc:  # --driver native: the row fails, saying why
                _failed(servers, formats[name], exc)
        for name, fmt in formats.items():
            if name not in servers.alive:
                continue
            progress(f"{name}: load and warm up")
            _start(servers, fmt, config)
            if fmt.native and config.driver == "auto" and name in servers.alive:
                _probe(servers, fmt, config)
        _choose_drivers(formats, progress)
        for i in range(config.rounds):
            live = [n for n in formats if n in servers.alive]
            order = live[i % len(live):] + live[:i % len(live)] if live else []
            for name in order:
                progress(f"round {i + 1}/{config.rounds}: {name}")
                _round(servers, formats[name], config, i)
    finally:
        failed = dict(servers.failures)
        for fmt in formats.values():
            for loop in fmt.native.values():
                close(loop)
        servers.close()
    rows = [_row(fmt, config, failed.get(name)) for name, fmt in formats.items()]
    server_verdict, single_verdict, differ = verdicts(rows, config.p99_ms)
    return LoadResults(config=_config_data(config), machine={"cpu_count": os.cpu_count(), "threads": config.threads,
                                                             "device": device},
                       rows=rows, server_verdict=server_verdict, single_stream_verdict=single_verdict,
                       rankings_differ=differ)


def _start(servers: Servers, fmt: _Format, config: LoadConfig) -> None:
    """Load, warm every size up, and time single-stream calls on the example (size 0)."""
    servers.load(fmt.name)
    warm = BenchConfig(warmup_iters=3, warmup_time=0.1, min_iters=1, bench_time=0.0, max_iters=3)
    if servers.ask(fmt.name, Prepare(fmt.config["feeds"], warm), ColdStart, servers.timeout) is None:
        return
    samples = servers.ask(fmt.name, TimeSlice(0, SINGLE_STREAM_SECONDS, 20, 100_000), Samples, servers.timeout)
    if samples is not None:
        fmt.single_p50_ms = summarize(np.load(samples.file)).p50_ms


def _probe(servers: Servers, fmt: _Format, config: LoadConfig) -> None:
    """Under auto, a format with a C loop: a short Offline probe on the example in each driver (`PROBE_ORDER`), the
    row's lanes and threads, both rates kept for the row (`_choose_drivers` then picks). A C loop that fails here
    leaves the format to the Python lanes, the failure its reason, as in `native_loops`."""
    done: dict[str, list[float]] = {"native": [0.0, 0.0], "python": [0.0, 0.0]}
    for driver in PROBE_ORDER:
        if driver == "native":
            try:
                calls, seconds, _ = native_offline(fmt.native[0], config.lanes or config.threads, PROBE_SECONDS,
                                                   servers.timeout)
            except (MultiexportError, ValueError, OSError) as exc:
                said = " ".join(str(exc).split())
                _to_python(fmt, f"the native consumer failed here, so the Python lanes ran: {said[:1500]}")
                return
        else:
            answer = servers.ask(fmt.name, LoadRun("offline", fmt.config["feeds"], 0, config.lanes, PROBE_SECONDS),
                                 LoadAnswer, servers.timeout)
            if answer is None:
                return  # the worker failed: the row's failure
            calls, seconds = answer.calls, answer.seconds
        done[driver][0] += calls
        done[driver][1] += seconds
    fmt.probe = {d: round(c / s, 1) if s > 0 else 0.0 for d, (c, s) in done.items()}


def _choose_drivers(formats: dict[str, _Format], progress: Callable[[str], None]) -> None:
    """Each probed format's rounds in the driver its probe chose (`faster_driver`), except that a format and its
    baseline (`baseline:NAME`, the paired throughput check's two rows) whose probes chose differently both keep the
    C loop: the paired check divides one row's rates by the other's, which only means something from one driver."""
    choice = {name: faster_driver(fmt.probe) for name, fmt in formats.items() if fmt.probe}
    for name, fmt in formats.items():
        if name not in choice:
            continue
        partner = name.removeprefix(BASELINE_PREFIX) if name.startswith(BASELINE_PREFIX) else BASELINE_PREFIX + name
        split = partner in choice and choice[partner] != choice[name]
        if split:
            fmt.probe_note = "the C loop: the probe of its paired row chose the other driver"
        elif choice[name] == "python":
            _to_python(fmt, "")
        chosen = "the Python lanes" if not fmt.native else "the C loop"
        progress(f"{name}: driver probe: C loop {fmt.probe['native']:,.0f} calls/s, Python lanes "
                 f"{fmt.probe['python']:,.0f} calls/s: the rounds run in {chosen}"
                 + (" (its paired row's probe chose the other driver)" if split else ""))


def faster_driver(probe: dict[str, float]) -> str:
    """The driver that runs the rounds: "python" only when its lanes' probe rate (calls/s) beats the C loop's by more
    than `PROBE_MARGIN`, else "native"."""
    return "python" if probe["python"] > PROBE_MARGIN * probe["native"] else "native"


def _to_python(fmt: _Format, why: str) -> None:
    """The format's rounds run in the Python lanes after all (`why`: the C loop's failure; '' when it was slower)."""
    for loop in fmt.native.values():
        close(loop)
    fmt.native, fmt.native_refused = {}, why


def _ask(servers: Servers, fmt: _Format, request: LoadRun) -> LoadAnswer | None:
    answer = servers.ask(fmt.name, request, LoadAnswer, servers.timeout)
    if answer is not None:
        fmt.lanes, fmt.config = answer.lanes, {**answer.config, "feeds": fmt.config["feeds"]}
    return answer


def _failed(servers: Servers, fmt: _Format, exc: Exception) -> None:
    """The native driver failed on `fmt`: its row's failure; its worker is stopped."""
    servers.failures[fmt.name] = (getattr(exc, "category", None) or "run-failed", str(exc))
    servers.discard(fmt.name)


def _native(servers: Servers, fmt: _Format, config: LoadConfig, run: Callable[[int], Any]) -> Any:
    """`run(lanes)` of the native driver, its configuration recorded; None (the row failed) on a RunError."""
    lanes = config.lanes or config.threads
    try:
        *figures, own = run(lanes)
    except (RunError, ValueError, OSError) as exc:
        _failed(servers, fmt, exc)
        return None
    fmt.lanes, fmt.config = lanes, {**own, "feeds": fmt.config["feeds"]}
    return figures[0] if len(figures) == 1 else tuple(figures)


def _offline(servers: Servers, fmt: _Format, config: LoadConfig, index: int) -> tuple[int, float] | None:
    """(calls, seconds) of the Offline scenario at size `index`, from the format's driver."""
    if fmt.native:
        return _native(servers, fmt, config, lambda lanes: native_offline(fmt.native[index], lanes, config.seconds,
                                                                          servers.timeout))
    answer = _ask(servers, fmt, LoadRun("offline", fmt.config["feeds"], index, config.lanes, config.seconds))
    return None if answer is None else (answer.calls, answer.seconds)


def _server(servers: Servers, fmt: _Format, config: LoadConfig, rate: float, seed: int) -> ServerRun | None:
    """One rate of the Server scenario on the example, from the format's driver (the same schedule for both)."""
    if fmt.native:
        arrivals = poisson_schedule(rate, config.seconds, seed, config.min_requests)
        return _native(servers, fmt, config, lambda lanes: native_server(fmt.native[0], lanes, arrivals,
                                                                         servers.timeout))
    answer = _ask(servers, fmt, LoadRun("server", fmt.config["feeds"], 0, config.lanes, config.seconds, rate, seed,
                                        config.min_requests))
    if answer is None:
        return None
    run = ServerRun(np.load(answer.file), answer.seconds)
    os.unlink(answer.file)
    return run


def _multistream(servers: Servers, fmt: _Format, config: LoadConfig) -> tuple[np.ndarray, float] | None:
    """One round of the MultiStream scenario on the example: (each query's latency in ns, seconds)."""
    if fmt.native:
        return _native(servers, fmt, config, lambda lanes: native_multistream(
            fmt.native[0], lanes, config.samples_per_query, config.seconds, config.min_requests, servers.timeout))
    answer = _ask(servers, fmt, LoadRun("multistream", fmt.config["feeds"], 0, config.lanes, config.seconds,
                                        min_requests=config.min_requests, samples_per_query=config.samples_per_query))
    if answer is None:
        return None
    latencies = np.load(answer.file)
    os.unlink(answer.file)
    return latencies, answer.seconds


def _round(servers: Servers, fmt: _Format, config: LoadConfig, i: int) -> None:
    """One round of one format: Offline on every size it takes (always the example: the ladder's base), the
    MultiStream scenario, then the Server ladder, climbing until the first rate whose p99 misses the bound."""
    for index, (batch, reason) in enumerate(fmt.sizes):
        if reason or (index > 0 and not config.offline):
            continue
        got = _offline(servers, fmt, config, index)
        if got is None:
            return
        calls, seconds = got
        fmt.offline.setdefault(index, []).append((batch or 1) * calls / seconds if seconds > 0 else 0.0)
        fmt.calls[index] = fmt.calls.get(index, 0) + calls
    if config.multistream:
        queries = _multistream(servers, fmt, config)
        if queries is None:
            return
        fmt.multistream.append(queries)
    if not config.server:
        return
    if not fmt.rates:
        calls_per_s = fmt.offline[0][0] / (fmt.sizes[0][0] or 1)
        fmt.rates = tuple(config.rates) or ladder(calls_per_s)
    for rate in sorted(fmt.rates):
        run = _server(servers, fmt, config, rate, config.seed + 1000 * i + int(rate * 1000) % 997)
        if run is None:
            return
        fmt.server.setdefault(rate, []).append(run)
        if np.percentile(run.latencies_ns, 99, method="higher") / 1e6 > config.p99_ms:
            return  # higher rates only queue more


def _row(fmt: _Format, config: LoadConfig, failure: tuple[str, str] | None) -> LoadRow:
    offline = []
    for index, (batch, reason) in enumerate(fmt.sizes):
        if reason:
            offline.append(OfflinePoint(batch, "size-unsupported", reason))
        elif index in fmt.offline and (config.offline or index == 0):
            median, low, high = spread(fmt.offline[index])
            offline.append(OfflinePoint(batch, samples_per_s=median, low=low, high=high,
                                        per_round=fmt.offline[index], calls=fmt.calls[index]))
    server = None
    if config.server and fmt.server:
        search = "ladder: --rates" if config.rates else (
            "ladder: " + ", ".join(f"{f:g}" for f in LADDER) + " x the offline peak on the example")
        server = server_result(fmt.server, config.p99_ms, search)
    config_out = {k: v for k, v in fmt.config.items() if k != "feeds"}
    if fmt.config and not fmt.native:
        config_out = {"driver": "python", **config_out}
        if fmt.native_refused:
            config_out["native_refused"] = fmt.native_refused
    if fmt.probe and fmt.config:
        config_out["driver_probe"] = dict(fmt.probe)
        if fmt.probe_note:
            config_out["driver_probe_overruled"] = fmt.probe_note
    multistream = multistream_result(fmt.multistream, config.samples_per_query) if fmt.multistream else None
    return LoadRow(name=fmt.name, artifact=str(fmt.artifact), status=failure[0] if failure else "ok",
                   reason=failure[1] if failure else "", lanes=fmt.lanes, throughput_config=config_out,
                   single_stream_p50_ms=fmt.single_p50_ms, server=server, offline=offline, multistream=multistream)


def _config_data(config: LoadConfig) -> dict[str, Any]:
    data = asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
