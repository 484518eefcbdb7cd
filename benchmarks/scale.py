"""Large models: export time, artifact size and peak RSS per backend, weights baked in and as inputs.

    python benchmarks/scale.py [--size large|small] [--modes inputs,baked,embedded] [--backends all] [--out DIR]

Runs `compare` (exports in worker processes, one runner worker per backend) on the zoo's transformer
LM with random weights (`multiexport.examples.lm`, about 350 M parameters / 1.4 GB float32 for
`large`) and prints, per mode and backend: status, where the artifact keeps the weights, export
seconds, artifact size, peak RSS of the export worker and of the runner worker, each as a multiple
of the weights' size, and the export time as a multiple of the fastest backend's. Goals: every
worker's peak RSS <= 3x the weights; no export more than 5x slower than the fastest. A backend that
cannot hold the model shows as a categorised row.

Modes: inputs (weights are input leaves), baked (closed over, default --external-weights auto: out of
the module where the format allows), embedded (closed over, --external-weights never: constants in
the module), external (closed over, --external-weights always: ONNX external data too).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from multiexport.comparison import compare
from multiexport.exporting.registry import default_names as backend_names
from multiexport.leaves import load_target
from multiexport.measure.bench import BenchConfig
from multiexport.report.tables import storage_text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="large", choices=["small", "large"])
    parser.add_argument("--modes", default="inputs,baked,embedded")
    parser.add_argument("--backends", default="all")
    parser.add_argument("--out", type=Path, default=Path("multiexport-out/scale"))
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    backends = backend_names() if args.backends == "all" else args.backends.split(",")
    one_call = BenchConfig(warmup_iters=1, warmup_time=0.0, min_iters=3, bench_time=0.0)
    rows = []
    for mode in args.modes.split(","):
        weights_mode, policy = MODES[mode]
        spec = f"multiexport.examples:lm_{args.size}_{weights_mode}"
        t0 = time.perf_counter()
        print(f"[scale] {spec}: loading", file=sys.stderr, flush=True)
        target = load_target(spec)
        res = compare(target, backends=tuple(backends), out_dir=args.out / mode, trials=1, bench=one_call, target_spec=spec,
                      timeout=args.timeout, external_weights=policy, progress=lambda m: print(f"[scale]   {m}", file=sys.stderr, flush=True))
        weights = res.signature.weights
        size = max(weights.baked_bytes, weights.input_bytes)
        exports = [r.export_seconds for r in res.backends.values() if r.export_seconds]
        fastest = min(exports) if exports else None
        for name, r in res.backends.items():
            bench = r.bench
            run_peak = bench.memory.get("peak_rss_bytes") if bench else None
            rows.append({
                "mode": mode, "backend": name, "status": r.status.value, "reason": r.reason[:160],
                "stored": storage_text(r.weights or {}),
                "weights_bytes": size, "export_s": r.export_seconds,
                "export_vs_fastest": r.export_seconds / fastest if r.export_seconds and fastest else None,
                "artifact_bytes": bench.artifact_bytes if bench else None,
                "export_peak_rss_bytes": r.export_peak_rss_bytes, "run_peak_rss_bytes": run_peak,
                "export_peak_rss_x": r.export_peak_rss_bytes / size if r.export_peak_rss_bytes else None,
                "run_peak_rss_x": run_peak / size if run_peak else None,
                "load_s": bench.load_s if bench else None,
            })
        ref = res.reference.bench
        ref_peak = ref.memory.get("peak_rss_bytes") if ref else None
        rows.append({
            "mode": mode, "backend": "jax.jit reference" + (" (weights lifted)" if res.reference.lifted_weights else ""),
            "status": "ok" if ref else "not benchmarked", "reason": "", "stored": "-", "weights_bytes": size,
            "export_s": None, "export_vs_fastest": None, "artifact_bytes": None, "export_peak_rss_bytes": None,
            "run_peak_rss_bytes": ref_peak, "export_peak_rss_x": None, "run_peak_rss_x": ref_peak / size if ref_peak else None,
            "load_s": ref.load_s if ref else None,
        })
        print(f"[scale] {spec}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


MODES = {"inputs": ("inputs", "auto"), "baked": ("baked", "auto"), "embedded": ("baked", "never"),
         "external": ("baked", "always")}


def table(rows) -> str:
    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    lines = ["| mode | backend | status | weights stored | export s | vs fastest | artifact | export peak RSS (x weights) | "
             "runner peak RSS (x weights) | load s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        status = r["status"] if r["status"] == "ok" else f"**{r['status']}**: {r['reason']}"
        lines.append(f"| {r['mode']} | {r['backend']} | {status} | {r.get('stored') or '-'} | {f(r['export_s'], '{:.1f}')} | "
                     f"{f(r['export_vs_fastest'], '{:.1f}x')} | {f(r['artifact_bytes'] and r['artifact_bytes'] / 2**30, '{:.2f} GiB')} | "
                     f"{_gib(r['export_peak_rss_bytes'])} ({f(r['export_peak_rss_x'], '{:.1f}x')}) | "
                     f"{_gib(r['run_peak_rss_bytes'])} ({f(r['run_peak_rss_x'], '{:.1f}x')}) | {f(r['load_s'], '{:.1f}')} |")
    return "\n".join(lines)


def _gib(n) -> str:
    return "-" if not n else f"{n / 2**30:.2f} GiB"


if __name__ == "__main__":
    sys.exit(main())
