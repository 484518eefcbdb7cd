"""`multiexport load`'s arguments: the Server and Offline scenarios over artifact directories already written."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..measure.load import DRIVERS, LADDER, MIN_REQUESTS, SCENARIOS, LoadConfig
from .flags import DEVICES, OUTPUT, TIMING, WRITE, groups

_DEFAULTS = LoadConfig()


def floats(text: str) -> tuple[float, ...]:
    return tuple(float(t) for t in text.split(",") if t.strip())


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def positive(text: str) -> float:
    """A number > 0 (argparse refuses anything else with one line, before any work)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number > 0") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number > 0")
    return value


def compare_load_options(g) -> None:
    """`compare --load`: the load scenarios on the compare's faithful artifacts, after its single-stream timing."""
    g.add_argument("--load", choices=SCENARIOS, metavar="SCENARIO",
                   help="after the compare, measure its faithful artifacts under load (as 'multiexport load' does): "
                        "server (max requests/s with p99 under --p99-ms, Poisson arrivals), offline (peak samples/s "
                        "at the example and --batch-sizes), multistream (p99 of queries of 8 samples, each issued "
                        "when the last completed), both (server and offline) or all; writes DIR/load.json and adds a "
                        "Load section to the reports")
    g.add_argument("--p99-ms", type=positive, default=_DEFAULTS.p99_ms, metavar="MS",
                   help=f"with --load: the Server scenario's p99 bound in ms (default {_DEFAULTS.p99_ms:g})")
    g.add_argument("--load-rates", type=floats, default=(), metavar="R1,R2,...",
                   help="with --load: target rates in requests/s (default: a ladder per format from its own offline "
                        "peak)")
    g.add_argument("--load-lanes", type=int, default=_DEFAULTS.lanes, metavar="N",
                   help="with --load: requests in flight (default 0: the runtime's own choice, else --threads)")
    g.add_argument("--load-seconds", type=positive, default=_DEFAULTS.seconds, metavar="S",
                   help=f"with --load: seconds per rate and per offline size, per round (default {_DEFAULTS.seconds:g})")
    g.add_argument("--load-rounds", type=int, default=_DEFAULTS.rounds, metavar="N",
                   help=f"with --load: rounds, the formats' order rotating (default {_DEFAULTS.rounds})")
    g.add_argument("--load-driver", choices=DRIVERS, default=_DEFAULTS.driver,
                   help="with --load: what issues the requests, as 'multiexport load --driver': auto (default: each "
                        "format in the faster of its C loop and its Python lanes, by a short probe, where its native "
                        "consumer has a C loop that runs here, else in Python lanes), "
                        "python or native; each row of load.json records its driver")


def load_options(g: dict) -> None:
    """The load flags, shared by `load` and (their meaning) by `compare --load`."""
    g[TIMING].add_argument("--p99-ms", type=positive, default=_DEFAULTS.p99_ms, metavar="MS",
                           help="the Server scenario's latency bound: the max rate reported is the highest target rate "
                                f"whose p99 (from each request's scheduled arrival) is at most MS (default {_DEFAULTS.p99_ms:g})")
    g[TIMING].add_argument("--rates", type=floats, default=(), metavar="R1,R2,...",
                           help="the Server scenario's target rates in requests/s, the same for every format (default: "
                                "a ladder per format at " + ", ".join(f"{f:g}" for f in LADDER) + " x its own offline "
                                "peak on the example input; the ladder stops climbing at the first rate over the bound)")
    g[TIMING].add_argument("--batch-sizes", metavar="N,N",
                           help="the Offline scenario's batch sizes (an artifact with one symbolic batch dimension takes "
                                "them; a static one gets a 'size-unsupported' row saying why; default: the example only)")
    g[TIMING].add_argument("--lanes", type=int, default=_DEFAULTS.lanes, metavar="N",
                           help="requests in flight at once, one thread each (default 0: the runtime's own choice where "
                                "its throughput configuration has one, e.g. OpenVINO's optimal number of infer "
                                "requests, else --threads)")
    g[TIMING].add_argument("--seconds", type=float, default=_DEFAULTS.seconds, metavar="S",
                           help=f"per target rate (at least {MIN_REQUESTS} requests) and per offline batch size, per "
                                f"round (default {_DEFAULTS.seconds:g})")
    g[TIMING].add_argument("--rounds", type=int, default=_DEFAULTS.rounds, metavar="N",
                           help="repeats, the formats' order rotating each round; every figure is given with the range "
                                f"over its rounds (default {_DEFAULTS.rounds})")
    g[TIMING].add_argument("--samples-per-query", type=int, default=_DEFAULTS.samples_per_query, metavar="K",
                           help="the MultiStream scenario's samples per query: a query of K example inputs, spread "
                                "over the lanes, issued when the previous query completed; its figure is the p99 "
                                f"of the queries' latencies (default {_DEFAULTS.samples_per_query}, as LoadGen's)")
    g[TIMING].add_argument("--driver", choices=DRIVERS, default=_DEFAULTS.driver,
                           help="what issues the requests, per format: auto (the default: the format's native "
                                "consumer runs every scenario in its own C loop, no Python between requests, where it "
                                "has one (ort_run, tf_run, lite_run, ov_run, pjrt_run; not IREE) that runs the "
                                "artifact's sizes on the CPU and builds here, else the Python lanes, the reason "
                                "recorded; a format with a C loop first gets a short Offline probe in both drivers, "
                                "0.5 s each, and its rounds run in the faster, both rates recorded as driver_probe), "
                                "python (the format's serve worker, one Python thread per lane, for every "
                                "format: for calls of microseconds the lanes, not the runtime, limit the rate) or "
                                "native (as auto, but a consumer that fails to build or run fails its row instead of "
                                "falling back). Each row of load.json records its driver (throughput_config.driver) "
                                "and, where the C loop was not used, why (native_refused); verdicts rank the two "
                                "drivers' rows apart, except that a row whose Python lanes beat its C loop in the "
                                "probe is ranked with the C loops")
    g[TIMING].add_argument("--seed", type=int, default=_DEFAULTS.seed,
                           help="seed of the Poisson arrival schedule (the same schedule for every format)")


def load_parser(sub) -> None:
    p = sub.add_parser(
        "load", help="serving load: max requests/s under a p99 bound (Server) and peak samples/s (Offline) per artifact",
        description=("Measure each artifact directory under load, one format at a time in its own worker process, the "
                     "same threads for each: the Server scenario (MLPerf LoadGen's: Poisson arrivals at increasing "
                     "target rates, latency from each request's scheduled arrival so queueing counts, p50/p90/p99 per "
                     "rate, the highest rate whose p99 meets --p99-ms) and the Offline scenario (every lane calling "
                     "back to back: samples/s per batch size). Each runtime runs in its throughput configuration "
                     "(docs/load.md), recorded in load.json. Writes load.json, load.md and load.html."))
    g = groups(p, WRITE, TIMING, DEVICES, OUTPUT)
    p.add_argument("artifacts", type=Path, nargs="+", metavar="DIR",
                   help="artifact directories written by 'multiexport export' or 'compare --out-dir' (a compare's "
                        "output directory stands for every artifact in it)")
    g[TIMING].add_argument("--baseline", type=Path, metavar="DIR",
                           help="a previous compare's output directory: each format's artifact there is measured in "
                                "the same rounds as the new one (row 'baseline:FORMAT'), and 'multiexport diff' / "
                                "'compare --baseline' judge the throughput on those paired rounds (docs/load.md)")
    g[WRITE].add_argument("--out-dir", type=Path, default=Path("multiexport-load"), metavar="DIR",
                          help="where load.json, load.md and load.html go (default multiexport-load)")
    g[TIMING].add_argument("--scenario", choices=SCENARIOS, default=_DEFAULTS.scenario,
                           help="server, offline, multistream, both (server and offline; the default) or all (the "
                                "three)")
    load_options(g)
    g[TIMING].add_argument("--min-requests", type=int, default=MIN_REQUESTS, metavar="N",
                           help=f"the fewest requests per rate and round (default {MIN_REQUESTS}; fewer make the p99 "
                                "the maximum of a handful, but let a model of seconds per call finish)")
    g[TIMING].add_argument("--threads", type=int, default=None, metavar="N",
                           help="cores given to each format, all its lanes together (default: the usable cores)")
    g[DEVICES].add_argument("--device", default="cpu", choices=["cpu", "gpu", "tpu"],
                            help="device the runners run on (default cpu)")
    g[OUTPUT].add_argument("--timeout", type=float, default=900.0, metavar="S",
                           help="seconds any one step of a worker may take before it is stopped (default 900)")
    p.set_defaults(handler="cmd_load")
