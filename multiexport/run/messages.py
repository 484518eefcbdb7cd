"""Every message between a compare and its worker processes, as frozen dataclasses, and their one codec.

The codec is results.json's (`results.schema`: `to_data` out, `from_data` in, every field checked against
its type), so a message is declared once, as a dataclass, and validated the same way everywhere. Files a
worker leaves: `ExportReply` (export.json), `Loaded` (run.json), `BenchResult` (bench.json),
`WorkerFailure` (error.json), `DeviceStatus` (status.json), `BenchFeed` rows (a bench feed directory's
index.json). What goes to a worker: `ExportOptions` (`export --options`), `BenchConfig` (`--bench-config`).
The paired worker's protocol (run.serve), one JSON line each way: a request is {"cmd": NAME, **fields}
(`REQUESTS`), each answered by its reply type or by {"error": WorkerFailure}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InputError
from ..measure.bench import BenchConfig
from ..measure.load import MIN_REQUESTS as MIN_LOAD_REQUESTS
from ..results import BenchResult
from ..results.schema import from_data, to_data

M = TypeVar("M")


def encode(message: Any) -> str:
    """One message (a dataclass of this module, ExportOptions, BenchConfig, BenchResult) as one JSON line."""
    return json.dumps(to_data(message))


def decode(cls: type[M], text: str | bytes, where: str) -> M:
    """`cls` from one JSON text; InputError naming `where` and the field when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where} | got unreadable JSON ({exc}), expected a {cls.__name__}") from None
    return from_data(cls, data, where)


# -- files a worker leaves -------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerFailure:
    """A worker's clean error (error.json, and the paired protocol's {"error": ...}).

    category: a row category (`results.Status` value: export-failed, run-failed, out-of-memory, ...).
    message: what went wrong, in one line where the cause allows.
    """

    category: str
    message: str


@dataclass(frozen=True)
class TargetLoad:
    """How an export worker built the target.

    seconds: wall time of the build. factory_cache: whether it used the programs the parent compiled.
    cache_hits, cache_misses: JAX compilation-cache events while building.
    """

    seconds: float
    factory_cache: bool
    cache_hits: int
    cache_misses: int


@dataclass(frozen=True)
class ExportReply:
    """One finished export (export.json).

    seconds, cpu_seconds: the export's wall and CPU time. fingerprint: the target's example values and
    weights as this worker loaded them (the parent refuses an export of a different target).
    peak_rss_bytes: the worker's peak resident size so far. target_load: how the target was built.
    child_peak_rss_bytes: the largest peak resident size of a process the export started (LiteRT's prepare
    child, iree-compile), sampled while it ran (system.descendants); None when it started none.
    """

    seconds: float
    cpu_seconds: float
    fingerprint: str
    peak_rss_bytes: int | None = None
    target_load: TargetLoad | None = None
    child_peak_rss_bytes: int | None = None


@dataclass(frozen=True)
class Loaded:
    """A runner loaded: a run worker's run.json, and the paired worker's answer to `Load`.

    load_s: the load's seconds. runner: its `describe()`.
    """

    load_s: float
    runner: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceStatus:
    """A device probe's answer (status.json). ok: the backend can run there. reason: why not, or its note."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class BenchFeed:
    """One size of a bench feed directory's index.json.

    file: the .npz of the feed in that directory, or None for a size the runner cannot take.
    batch: the batch size (None: the target's one static size). reason: why a size has no file.
    """

    file: str | None
    batch: int | None
    reason: str = ""


def write_bench_index(directory: Path, rows: list[BenchFeed]) -> None:
    """A bench feed directory's index.json (its .npz files written by the caller)."""
    (directory / "index.json").write_text(json.dumps(to_data(rows)))


def read_bench_index(directory: Path) -> list[BenchFeed]:
    """A bench feed directory's index.json, every row checked."""
    where = str(directory / "index.json")
    try:
        data = json.loads((directory / "index.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"Bench feeds '{where}' | unreadable ({exc}), expected a list of BenchFeed rows") from None
    if not isinstance(data, list):
        raise InputError(f"Bench feeds '{where}' | got {type(data).__name__}, expected a list of BenchFeed rows")
    return [from_data(BenchFeed, row, f"{where}[{i}]") for i, row in enumerate(data)]


# -- the paired worker's protocol (run.serve) -------------------------------------------------------------

@dataclass(frozen=True)
class Imported:
    """The worker has imported its runtime. import_s, import_cpu_s: the import's wall and CPU seconds."""

    import_s: float
    import_cpu_s: float


@dataclass(frozen=True)
class Load:
    """Load the runner, timed. artifact: its directory, for a worker started before it was written."""

    artifact: str | None = None


@dataclass(frozen=True)
class Parity:
    """Run each feeds/NNNN.npz, writing out/NNNN.npz. feeds, out: directories."""

    feeds: str
    out: str


@dataclass(frozen=True)
class Done:
    """A request that gives nothing back has been done."""

    ok: bool = True


@dataclass(frozen=True)
class Prepare:
    """Cold start of every size (prepare, compile, first call, warm-up) under `config`.

    bench_feeds: the bench feed directory (index.json of BenchFeed rows). config: how long to warm up.
    """

    bench_feeds: str
    config: BenchConfig


@dataclass(frozen=True)
class ColdStart:
    """The cold start of every size. bench: the BenchResult of it (the rounds give the steady state)."""

    bench: BenchResult


@dataclass(frozen=True)
class TimeSlice:
    """One slice of timed calls at size index `size`: `seconds` of them, at least `min_calls`, at most
    `max_calls`."""

    size: int
    seconds: float
    min_calls: int
    max_calls: int


@dataclass(frozen=True)
class Samples:
    """A timed slice. file: the .npy of every call's ns. n: how many calls. stopped: what ended the loop
    ("time", "max_iters"), None when unknown."""

    file: str
    n: int
    stopped: str | None = None


@dataclass(frozen=True)
class Peak:
    """Ask for the machine's float32 matmul peak through XLA."""


@dataclass(frozen=True)
class PeakFigure:
    """The peak. gflops: GFLOP/s. how: what was measured."""

    gflops: float
    how: str


@dataclass(frozen=True)
class Quit:
    """End the worker (no answer)."""


@dataclass(frozen=True)
class LoadRun:
    """One scenario run in a serve worker, on the size at index `size` of the bench feed directory `feeds`.

    scenario: "offline" (every lane back to back for `seconds`), "server" (Poisson arrivals at `rate` per second,
    at least `seconds` of them and `min_requests`, drawn from `seed`) or "multistream" (queries of
    `samples_per_query` samples, each issued when the previous completes; `min_requests` is the fewest queries).
    lanes: requests in flight (0: the runtime's own choice).
    """

    scenario: str
    feeds: str
    size: int
    lanes: int
    seconds: float
    rate: float = 0.0
    seed: int = 0
    min_requests: int = MIN_LOAD_REQUESTS
    samples_per_query: int = 0  # MultiStream's K (>= 1 for that scenario; 0 for the others)


@dataclass(frozen=True)
class LoadAnswer:
    """A LoadRun's figures. calls: calls completed. seconds: from the start to the last completion. file: the .npy
    of every request's latency in ns (server; "" for offline). lanes: the lanes used. config: the throughput
    configuration the runner reports."""

    calls: int
    seconds: float
    lanes: int
    file: str = ""
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Export:
    """Export with the target the reference's worker has built, before it loads anything (run.export_worker's
    command line, as `workers.worker_command` would be given it): the exports that need the built target, made
    without building it again in another process.

    args: the export worker's arguments ("export", TARGET, BACKEND, ...), with a --register for each backend the
        compare has registered by now; the worker adds its own (those it was started with) for any other name.
    """

    args: tuple[str, ...]


@dataclass(frozen=True)
class ExportsDone:
    """An `Export` ended. returncode: what an export worker with that command line would have exited with (each
    export's own result is its export.json or error.json, as from a worker of its own). target_changed: an
    export changed the target this worker would time (the program it traces to, or the constants it bakes in):
    it must not be the reference's worker."""

    returncode: int
    target_changed: bool = False


# request name -> (its type, its reply's type)
REQUESTS: dict[str, tuple[type, type | None]] = {
    "load": (Load, Loaded), "parity": (Parity, Done), "prepare": (Prepare, ColdStart), "time": (TimeSlice, Samples),
    "peak": (Peak, PeakFigure), "load-run": (LoadRun, LoadAnswer), "export": (Export, ExportsDone), "quit": (Quit, None),
}
_NAMES = {cls: name for name, (cls, _) in REQUESTS.items()}


def encode_request(request: Any) -> str:
    """A protocol request as its JSON line: {"cmd": NAME, **fields}."""
    return json.dumps({"cmd": _NAMES[type(request)], **to_data(request)})


def decode_request(line: str) -> Any:
    """A protocol request from its JSON line; InputError for an unknown command or a wrong field."""
    data = json.loads(line)
    command = data.pop("cmd", None) if isinstance(data, dict) else None
    if command not in REQUESTS:
        raise InputError(f"Request {line.strip()[:200]!r} | unknown command, expected one of {', '.join(REQUESTS)}")
    return from_data(REQUESTS[command][0], data, f"request '{command}'")


def decode_answer(data: dict[str, Any], reply: type[M], where: str) -> M | WorkerFailure:
    """A protocol answer (parsed JSON): the reply type, or the worker's failure."""
    if isinstance(data, dict) and "error" in data:
        return from_data(WorkerFailure, data["error"], f"{where}.error")
    return from_data(reply, data, where)
