"""The native driver of a load measurement (`multiexport load --driver native`): a format whose native consumer has
the load loops in C (its `NativeConsumer.load_loop`: ort_run, built with native/csrc/common/mx_load.h) runs the
Offline, Server and MultiStream scenarios in that program, with no Python between requests.

The Python side keeps what is not on a request's path: it writes the example (or batch-size) feed as the program's
.npy inputs, draws the Poisson schedule (`measure.load.poisson_schedule`, the same arrivals the Python driver serves)
into a .npy the program reads, and reads back every request's latency, which the same statistics
(`measure.load.server_result`, `multistream_result`) turn into figures. So under this driver the harness's rate *is*
the C loop's: there is no Python path to cost anything, and a row says so (`throughput_config["driver"]`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..dtypes import npy_storable
from ..errors import MultiexportError, RunError
from ..exporting.feed import check_feed
from ..exporting.manifest import Manifest
from ..exporting.native_section import INPUT_DIR, OUTPUT_DIR, check_section, consumer_for
from ..measure.load import ServerRun
from ..measure.plan import native_supports
from ..native.run import command
from ..system.process import run_command


@dataclass(frozen=True)
class NativeLoop:
    """A native consumer ready to run load loops over one feed.

    argv, env: the consumer's command over the feed (`native.run.command`), to which the --load-* flags are added.
    cwd: the artifact directory (where the program runs). work: the feed's and the latencies' directory.
    program: the program's name (for messages and the row's configuration).
    """

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    work: Path
    program: str


def has_load_loop(backend: str) -> bool:
    """Whether `backend`'s native consumer runs the load scenarios itself (`NativeConsumer.load_loop`)."""
    consumer = consumer_for(backend)
    return consumer is not None and bool(getattr(consumer, "load_loop", False))


def native_loops(directory: Path, backend: str, feeds: Sequence[tuple[int, Mapping[str, Any]]], driver: str,
                 device: str, threads: int, work: Path, timeout: float) -> tuple[dict[int, NativeLoop], str]:
    """The C loops (by size index, `feeds` being (index, feed)) one format runs in under `driver`, or none and why
    not ('' under "python", which asks for none). The Python lanes measure a format whose consumer has no load loop,
    a device other than the CPU, or sizes the consumer cannot run. Under "auto" a consumer that fails to build here
    (no compiler, its runtime library missing) or to run a first short loop falls back too, the failure its
    reason; under "native" that failure is raised, to fail the row: the user asked for the C loop."""
    if driver == "python":
        return {}, ""
    if device != "cpu":
        return {}, f"the native load loops run on the CPU, not on --device {device}"
    consumer = consumer_for(backend)
    if consumer is None or not getattr(consumer, "load_loop", False):
        what = "no native consumer" if consumer is None else f"a native consumer ({consumer.program}) without a load loop"
        return {}, f"the format has {what}"
    loops: dict[int, NativeLoop] = {}
    try:
        refused = native_refusal(directory, [feed for _, feed in feeds])
        if refused:
            return {}, f"the native consumer cannot run every size: {refused}"
        for index, feed in feeds:
            loops[index] = native_loop(directory, feed, threads, work)
        if driver == "auto":  # a program that builds but cannot run here (a library it loads, a crash) is found now
            native_offline(loops[feeds[0][0]], 1, 0.01, timeout)
    except (MultiexportError, ValueError, OSError) as exc:
        for loop in loops.values():
            close(loop)
        if driver != "auto":
            raise
        said = " ".join(str(exc).split())
        return {}, f"the native consumer failed here, so the Python lanes ran: {said[:1500]}"
    return loops, ""


def native_refusal(directory: Path, feeds: Sequence[Mapping[str, Any]]) -> str:
    """'' when the artifact's native consumer can run every one of `feeds`, else why not: pjrt_run runs a symbolic
    XLA artifact through its refined static modules only, so a batch size the export did not refine is one it
    cannot run (the Python runner compiles any). The caller then measures the whole format on the Python driver,
    so a row's figures all come from one driver."""
    manifest = Manifest.read(Path(directory))
    for feed in feeds:
        _, bound = check_feed(manifest.inputs, dict(feed))
        why = native_supports(manifest.native, bound)
        if why:
            return why
    return ""


def native_loop(directory: Path, feed: Mapping[str, Any], threads: int, work: Path) -> NativeLoop:
    """The native consumer of the artifact in `directory` over `feed`, its inputs written under `work` (a fresh
    directory of its own there). Raises RunError when the artifact's consumer has no load loop."""
    directory = Path(directory).resolve()
    manifest = Manifest.read(directory)
    if not has_load_loop(manifest.backend):
        raise RunError(f"Artifact '{directory}' | backend '{manifest.backend}' has no native load loop, expected one "
                       "whose native consumer has (--driver python measures it in the serve worker)")
    native = check_section(manifest, directory)
    arrays, _ = check_feed(manifest.inputs, dict(feed))
    own = Path(tempfile.mkdtemp(prefix="native-load-", dir=work))
    inputs, outputs = own / INPUT_DIR, own / OUTPUT_DIR
    inputs.mkdir()
    outputs.mkdir()
    for entry in native["args"]:
        if entry.get("kind") != "leaf":
            continue
        value = np.asarray(arrays[entry["index"]], order="C")
        if entry.get("encoding") == "raw":
            value.tofile(inputs / entry["file"])
        else:
            np.save(inputs / entry["file"], npy_storable(value), allow_pickle=False)
    argv, env = command(directory, inputs_dir=str(inputs), outputs_dir=str(outputs), threads=threads, warmup=3)
    return NativeLoop(list(argv), dict(env), directory, own, Path(argv[0]).name)


def _run(loop: NativeLoop, flags: list[str], timeout: float) -> dict[str, Any]:
    """One load loop of the program: its JSON line."""
    outcome = run_command([*loop.argv, "--no-outputs", *flags], timeout=timeout, cwd=loop.cwd, env=loop.env)
    if outcome.timed_out:
        raise RunError(f"Native program '{loop.program}' | its load loop ran past {timeout:g} s and was stopped, "
                       "expected it to finish (--timeout)", category="timeout")
    if outcome.start_error or outcome.returncode != 0:
        said = " ".join((outcome.stderr.strip() or outcome.stdout.strip()).split())[-2000:]
        raise RunError(f"Native program '{loop.program}' | {outcome.how_it_ended()}: {said}")
    for line in outcome.stdout.splitlines():
        if line.startswith("{") and '"scenario"' in line:
            return json.loads(line)
    raise RunError(f"Native program '{loop.program}' | printed no load figures, expected a JSON line with "
                   f"'scenario': {outcome.stdout.strip()[-300:]!r}")


def _config(figures: Mapping[str, Any], loop: NativeLoop) -> dict[str, Any]:
    drop = {"scenario", "calls", "seconds", "calls_per_s", "requests", "completed", "queries"}
    return {"driver": "native", "how": f"the native consumer's own load loop ({loop.program}: one pthread per lane)",
            **{k: v for k, v in figures.items() if k not in drop}}


def native_offline(loop: NativeLoop, lanes: int, seconds: float, timeout: float) -> tuple[int, float, dict[str, Any]]:
    """Every lane back to back for `seconds` in C: (calls, seconds to the last completion, configuration)."""
    got = _run(loop, ["--load-lanes", str(lanes), "--load-seconds", f"{seconds:g}"], timeout)
    return int(got["calls"]), float(got["seconds"]), _config(got, loop)


def native_server(loop: NativeLoop, lanes: int, arrivals_s: np.ndarray, timeout: float
                  ) -> tuple[ServerRun, dict[str, Any]]:
    """The Server scenario in C on the arrivals given (seconds from the start): every request's latency."""
    schedule, latencies = loop.work / "schedule.npy", loop.work / "latencies.npy"
    np.save(schedule, np.asarray(arrivals_s, dtype=np.float64))
    try:
        got = _run(loop, ["--load-lanes", str(lanes), "--load-schedule", str(schedule), "--load-latencies",
                          str(latencies)], timeout)
        return ServerRun(np.load(latencies), float(got["seconds"])), _config(got, loop)
    finally:
        schedule.unlink(missing_ok=True)
        latencies.unlink(missing_ok=True)


def native_multistream(loop: NativeLoop, lanes: int, samples_per_query: int, seconds: float, min_queries: int,
                       timeout: float) -> tuple[np.ndarray, float, dict[str, Any]]:
    """The MultiStream scenario in C: (each query's latency in ns, seconds, configuration)."""
    latencies = loop.work / "queries.npy"
    try:
        got = _run(loop, ["--load-lanes", str(lanes), "--load-seconds", f"{seconds:g}", "--load-samples-per-query",
                          str(samples_per_query), "--load-min-queries", str(min_queries), "--load-latencies",
                          str(latencies)], timeout)
        return np.load(latencies), float(got["seconds"]), _config(got, loop)
    finally:
        latencies.unlink(missing_ok=True)


def close(loop: NativeLoop) -> None:
    shutil.rmtree(loop.work, ignore_errors=True)
