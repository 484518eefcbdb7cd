"""Does exporting in the reference's worker change the reference's timing? Two reference workers side by side.

The compare makes the exports that need the built target in the reference's paired worker (run.servers.
ReferenceExports) before that worker loads and times jax.jit. This starts two reference workers of one model
through the compare's own protocol: one makes those exports first, the other does not (`--exports none`: neither,
an A/A run that shows the noise floor). Both load and cold-start the reference, then are timed in alternating
slices, round after round (the order flips each round, so machine noise falls on both alike), and the per-round
median ratio exported/plain is printed with its quartiles (a ratio within the A/A run's spread: no effect), after
each worker's resident size and cold start (one of each per run: repeat the run for a spread).

Run from the repository root: `.venv/bin/python -m benchmarks.reference_exports [--model keras_hub_gpt2]
[--exports savedmodel,litert,onnx,openvino,xla | none] [--rounds 200]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from multiexport.exporting.options import ExportOptions
from multiexport.leaves import build_signature
from multiexport.measure.bench import BenchConfig
from multiexport.run.export_pool import ExportJob, export_in_workers
from multiexport.run.messages import ColdStart, Prepare, Samples, TimeSlice, encode
from multiexport.run.runs import write_bench_feeds
from multiexport.run.servers import ReferenceExports, Servers

from .real_models import REAL_MODELS

PLAIN = "plain"  # the second reference worker's name: it never exports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reference_exports", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="keras_hub_gpt2", help="a zoo model's name (benchmarks/real_models)")
    parser.add_argument("--exports", default="savedmodel,litert,onnx,openvino,xla",
                        help="the exports the first worker makes before it loads, comma-separated, or 'none'")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--slice", type=float, default=0.25, help="seconds of timed calls per worker per round")
    args = parser.parse_args(argv)
    model = next((m for m in REAL_MODELS if m.name == args.model), None)
    if model is None:
        raise SystemExit(f"--model {args.model!r}: not in the zoo ({', '.join(m.name for m in REAL_MODELS)})")
    exports = [] if args.exports == "none" else args.exports.split(",")
    feed = build_signature(model.factory()).example_feed()
    with tempfile.TemporaryDirectory(prefix="reference-exports-") as tmp:
        ratios = _measure(model.target, feed, exports, Path(tmp), args.rounds, args.slice)
    q1, q3 = np.percentile(ratios, [25, 75])
    print(f"{model.name}: exported ({args.exports}) / plain, per-round median ratio over {len(ratios)} rounds: "
          f"{statistics.median(ratios):.4f} (quartiles {q1:.4f}-{q3:.4f})")
    return 0


def _measure(spec: str, feed, exports: list[str], tmp: Path, rounds: int, seconds: float) -> list[float]:
    write_bench_feeds(tmp / "bench", [(None, feed)], {})
    servers = Servers("cpu", 2, 900)
    try:
        servers.spawn(ReferenceExports.NAME, ["reference", spec], None)
        servers.spawn(PLAIN, ["reference", spec], None)
        if exports:
            (tmp / "out").mkdir()
            jobs = [[ExportJob(name, tmp / "out" / name, encode(ExportOptions())) for name in exports]]
            left = export_in_workers(spec, tmp / "out", jobs, [], slots=1, timeout=900,
                                     ahead=ReferenceExports(servers, spec))
            failed = {name: outcome.failure for name, outcome in left.items() if outcome.reply is None}
            if failed:
                raise SystemExit(f"exports failed in the reference's worker: {failed}")
        names = (ReferenceExports.NAME, PLAIN)
        for name in names:
            servers.load(name)
            cold = servers.ask(name, Prepare(str(tmp / "bench"), BenchConfig(warmup_iters=5)), ColdStart, 900)
            if cold is None:
                raise SystemExit(f"the {name} worker failed: {servers.failures.get(name)}")
            first = cold.bench.sizes[0]
            print(f"{name}: resident {cold.bench.memory.get('rss_bytes', 0) / 2**20:.0f} MiB after its cold start; "
                  f"compile {first.compile_s or 0:.3f} s, first call {first.first_call_s or 0:.4f} s; "
                  f"exported before its load: {cold.bench.extra.get('exported_before_load', [])}")
        ratios = []
        for r in range(rounds):
            medians = {}
            for name in (names if r % 2 == 0 else names[::-1]):
                got = servers.ask(name, TimeSlice(0, seconds, 20, 1_000_000), Samples, 900)
                if got is None:
                    raise SystemExit(f"the {name} worker failed: {servers.failures.get(name)}")
                medians[name] = float(np.median(np.load(got.file)))
            ratios.append(medians[ReferenceExports.NAME] / medians[PLAIN])
        return ratios
    finally:
        servers.close()


if __name__ == "__main__":
    raise SystemExit(main())
