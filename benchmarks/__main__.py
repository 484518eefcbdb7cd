"""Run `multiexport compare` over the model zoo: one combined results file and a Markdown matrix.

    python -m benchmarks [--quick] [--models a,b] [--backends all] [--out DIR] [--baseline FILE --max-slowdown X]

Writes DIR/zoo-results.json (schema multiexport.zoo/1: one results.json per model) and DIR/zoo-matrix.md
(model x backend: status, parity, p50). With --baseline, diffs every model against the baseline zoo file and
exits 1 on a regression (same rules as `multiexport diff`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from multiexport.comparison import compare
from multiexport.exporting.registry import default_names as backend_names
from multiexport.files import write_text_atomic
from multiexport.measure.bench import BenchConfig
from multiexport.report.regression import Diff, publish
from multiexport.results import Results
from multiexport.sweeps.gate import diff_many

from .zoo import select

ZOO_SCHEMA = "multiexport.zoo/1"


def run_zoo(models, backends, out: Path, bench: BenchConfig | None, trials: int) -> dict:
    from multiexport.leaves.factory_cache import FactoryCache

    combined = {"schema": ZOO_SCHEMA, "models": {}}
    with FactoryCache() as cache:  # each model's export workers build it from the programs its load compiled
        for model in models:
            t0 = time.perf_counter()
            print(f"[zoo] {model.name}: {model.what}", file=sys.stderr, flush=True)
            combined["models"][model.name] = _one(model, cache.load(model.spec), backends, out, bench, trials, t0)
    return combined


def _one(model, target, backends, out: Path, bench: BenchConfig | None, trials: int, t0: float) -> dict:
    results = compare(
        target, backends=tuple(backends), out_dir=out / model.name, trials=trials,
        val_ranges=model.val_ranges, batch_sizes=tuple(model.batch_sizes) or None, bench=bench,
        target_spec=model.spec, timeout=900,
        progress=lambda msg: print(f"[zoo]   {msg}", file=sys.stderr, flush=True),
    )
    print(f"[zoo] {model.name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return results.to_json()


def matrix(combined: dict) -> str:
    """Model x backend: status, worst error relative to the leaf's scale, p50 at the first measured size."""
    typed = {name: Results.from_json(res, f"zoo model {name}") for name, res in combined["models"].items()}
    backends: list[str] = []
    for res in typed.values():
        backends += [b for b in res.backends if b not in backends]
    lines = ["| model | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    for name, res in typed.items():
        cells = []
        for b in backends:
            r = res.backends.get(b)
            if r is None:
                cells.append("-")
                continue
            parts = [r.status.value if r.ok else f"**{r.status.value}**"]
            err, first = r.worst_err_scale(), r.first_measured()
            if err is not None:
                parts.append(f"err {err:.1e}")
            if first is not None and first.latency is not None:
                parts.append(f"p50 {first.latency.p50_ms:.3g} ms")
            cells.append(", ".join(parts))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    failures = [f"- {m}/{b}: {r.status.value}: {' '.join(r.reason.split())[:300]}" for m, res in typed.items()
                for b, r in res.backends.items() if not r.ok]
    return "\n".join(lines) + ("\n\nFailures, by category:\n" + "\n".join(sorted(failures, key=lambda f: f.split(": ")[1]))
                                if failures else "") + "\n"


def diff_zoo(base: dict, current: dict, max_slowdown: float, max_parity_drift: float) -> Diff:
    """Status and parity gated per model and backend; latency gated per backend over the whole zoo."""
    return diff_many({name: Results.from_json(res, f"baseline {name}", legacy=True) for name, res in base["models"].items()},
                     {name: Results.from_json(res, f"current {name}") for name, res in current["models"].items()},
                     max_slowdown, max_parity_drift)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the CI-sized run: fewer models, short timings")
    parser.add_argument("--models", help="comma-separated zoo models (default: all, or the quick set)")
    parser.add_argument("--backends", default="all")
    parser.add_argument("--out", type=Path, default=Path("multiexport-out/zoo"))
    parser.add_argument("--baseline", type=Path, help="an earlier zoo-results.json to gate against")
    parser.add_argument("--max-slowdown", type=float, default=1.10)
    parser.add_argument("--max-parity-drift", type=float, default=10.0)
    parser.add_argument("--junit", type=Path)
    args = parser.parse_args(argv)

    base = None
    if args.baseline:  # checked before the zoo runs: a baseline of another schema is one line, not a traceback
        from multiexport.errors import InputError
        from multiexport.results import Results

        try:
            base = json.loads(args.baseline.read_text())
            for name, data in base["models"].items():
                Results.from_json(data, f"baseline {name}", legacy=True)
        except (OSError, ValueError, KeyError, TypeError, InputError) as exc:
            print(f"benchmarks: error: Baseline '{args.baseline}' | {type(exc).__name__}: {exc}; refresh it with "
                  "`make zoo-baseline`", file=sys.stderr)
            return 2
    models = select(args.quick, args.models.split(",") if args.models else None)
    backends = backend_names() if args.backends == "all" else args.backends.split(",")
    bench = (BenchConfig(warmup_iters=10, warmup_time=0.05, min_iters=200, bench_time=0.3) if args.quick
             else BenchConfig(warmup_iters=20, warmup_time=0.2, min_iters=200, bench_time=2.0))
    combined = run_zoo(models, backends, args.out, bench, trials=1 if args.quick else 2)
    write_text_atomic(args.out / "zoo-results.json", json.dumps(combined, indent=1) + "\n")
    table = matrix(combined)
    write_text_atomic(args.out / "zoo-matrix.md", table)
    print(table)
    if base is not None:
        d = diff_zoo(base, combined, args.max_slowdown, args.max_parity_drift)
        print(publish(d, args.junit))
        return d.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
