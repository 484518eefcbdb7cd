"""The serve worker's side of a load measurement: the `load-run` request, its answer, and how a worker runs it.

In the worker (`answer_load_run`) the runner's lanes (`throughput_lanes`: the backend's throughput configuration
where its runner declares one, else one thread per lane calling the one runner) run a scenario of `measure.load`.
The request and its answer are the paired protocol's (run.messages: LoadRun, LoadAnswer). A MultiStream request
carries its K samples per query (`LoadRun.samples_per_query`; its `min_requests` is the fewest queries). A
benchmark's planted slowdown ($MULTIEXPORT_PLANTED_SLOWDOWN: FACTOR) makes every request of the lanes run the
runtime's call FACTOR times on average (`planted_calls`): the throughput gate's calibration plants it
(benchmarks/load_calibration.py). Not measure.pairing's spin: a lane spinning in Python holds the GIL, and under
several lanes that stalls the others (a 1.5x spin measured 6-60x lower throughput on the seed).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..files.npz import load_npz
from ..measure.load import poisson_schedule, run_multistream, run_offline, run_server
from ..measure.pairing import FIRST_ONLY, PLANTED_ENV
from .messages import LoadAnswer, LoadRun, read_bench_index


def default_lanes(runner: Any, feed_prepared: Callable[[], Any], lanes: int) -> tuple[list[Callable[[], None]], dict]:
    """Lanes for a runner that declares no throughput configuration: `lanes` threads (0: the runner's threads)
    calling the one runner, each on its own prepared inputs (a prepared binding is not shared between threads)."""
    count = lanes or max(1, int(runner.options.thread_count or 1))
    calls: list[Callable[[], None]] = []
    for _ in range(count):
        calls.append(functools.partial(runner.run_prepared, feed_prepared()))
    return calls, {"how": f"{count} thread(s) calling one runner concurrently, each with its own prepared inputs",
                   "lanes": count}


def separate_runners(state: dict, feed: Any, lanes: int) -> tuple[list[Callable[[], None]], dict]:
    """Lanes for a runner that cannot be called from several threads at once (`shared_across_threads = False`:
    LiteRT's Interpreter, IREE's VM context): one runner per lane, loaded by the backend from the same directory,
    the threads divided between them (lanes 0: one per thread)."""
    runner = state["runner"]
    threads = max(1, int(runner.options.thread_count or 1))
    count = lanes or threads
    options = dataclasses.replace(runner.options, threads=max(1, threads // count))
    runners = state.setdefault("lane_runners", [])
    calls: list[Callable[[], None]] = []
    for _ in range(count):
        own = state["backend"].load(runner.directory, options)
        runners.append(own)  # kept alive (and closed with the worker)
        calls.append(functools.partial(own.run_prepared, own.prepare(feed)))
    return calls, {"how": f"{count} runner(s) loaded side by side, one thread each (the runtime's calls are not "
                          f"for concurrent threads), {options.threads} thread(s) per runner", "lanes": count,
                   "threads_per_runner": options.threads}


def answer_load_run(state: dict, request: LoadRun) -> LoadAnswer:
    """Run one scenario in a serve worker (its state: the runner, the bench feeds given with Prepare)."""
    state["stage"] = "bench"
    runner = state["runner"]
    index = read_bench_index(Path(request.feeds))
    if not 0 <= request.size < len(index) or not index[request.size].file:
        raise ValueError(f"asked to load size {request.size}, which has no feed")
    key = (request.feeds, request.size, request.lanes)
    cache = state.setdefault("lanes", {})
    if key not in cache:
        feed = load_npz(Path(request.feeds) / str(index[request.size].file))
        own = getattr(runner, "throughput_lanes", None)
        if own is not None:  # the backend's own throughput configuration
            cache[key] = own(feed, request.lanes)
        elif getattr(runner, "shared_across_threads", True) or state.get("backend") is None:
            cache[key] = default_lanes(runner, lambda: runner.prepare(feed), request.lanes)
        else:
            cache[key] = separate_runners(state, feed, request.lanes)
        for call in cache[key][0]:  # each lane once: its first call pays nothing the scenario times
            call()
        cache[key] = ([planted_calls(call) for call in cache[key][0]], cache[key][1])
    calls, config = cache[key]
    if request.scenario == "offline":
        count, seconds = run_offline(calls, request.seconds)
        return LoadAnswer(count, seconds, len(calls), "", config)
    state["slices"] = state.get("slices", 0) + 1
    path = state["out"] / f"load-{state['slices']:05d}.npy"
    if request.scenario == "multistream":
        if request.samples_per_query < 1:
            raise ValueError(f"asked for MultiStream with {request.samples_per_query} samples per query, expected >= 1")
        latencies, seconds = run_multistream(calls, request.samples_per_query, request.seconds, request.min_requests)
        np.save(path, latencies)
        return LoadAnswer(int(latencies.size), seconds, len(calls), str(path), config)
    if request.scenario != "server":
        raise ValueError(f"asked for scenario {request.scenario!r}, expected offline, server or multistream")
    run = run_server(calls, poisson_schedule(request.rate, request.seconds, request.seed, request.min_requests))
    np.save(path, run.latencies_ns)
    return LoadAnswer(int(run.latencies_ns.size), run.span_s, len(calls), str(path), config)


def planted_calls(call: Callable[[], None]) -> Callable[[], None]:
    """`call`, or with $MULTIEXPORT_PLANTED_SLOWDOWN=FACTOR set a request that runs it FACTOR times on average (an
    accumulator: at 1.5 every other request runs it twice), so the runtime really does FACTOR times the work per
    request, threads and GIL as in a real call."""
    import os

    given = os.environ.get(PLANTED_ENV, "").removesuffix(FIRST_ONLY)
    if not given:
        return call
    factor = float(given)
    if not factor >= 1:
        raise ValueError(f"${PLANTED_ENV} | got {given!r}, expected a factor >= 1")
    owed = [0.0]

    def slowed() -> None:
        owed[0] += factor
        while owed[0] >= 1:
            call()
            owed[0] -= 1

    return slowed
