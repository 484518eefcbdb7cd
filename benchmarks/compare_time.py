"""Where a compare's seconds go, on the seed and on real models, measured side by side.

    python -m benchmarks.compare_time [--models quick,haiku_resnet,...] [--no-bench] --out DIR

Runs `multiexport compare` on the seed and on each real model of the zoo in turn (seed, model, seed, model,
... so machine noise falls on both alike), each a whole process with the same flags (the model's own value
ranges and sizes added), and reads each run's timeline from its results.json. `--models` takes model names,
tags (`quick`, `nnx`, ...) and `all`, mixed in one comma list (a tag's models in the zoo's order, each model
once); an unknown word or a list naming no model stops before any run. Prints and writes
(DIR/compare_time.md, .json) per run: its wall time, its ratio to the median seed run, the CPU seconds of
its whole process tree (on a shared machine a steadier figure of the work than the wall time), and its seconds by
kind of step (build, prepare, reference, rounding, export, load, parity, timing, native, floor, and other
for a step none of these names), then the median real-model run against the seed: the figure #30 targets
at no more than 2x.

Every run makes the same request by default: parity, and one timed size (the seed has no batch to sweep, so
each model is timed at its example's size, --bench-time per runner as for the seed). `--batch-sweep` adds
each model's own batch sweep (the zoo's `--batch-sizes`), which asks for that many times the timed seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from multiexport.system.process import run_command

from .real_models import REAL_MODELS, TAGS, RealModel

# The real models timed by default: one per library, convnets and transformers, the quick ones included.
DEFAULT_MODELS = ("linen_cnn", "nnx_batchnorm", "eqx_cnn", "hf_bert", "keras_mobilenetv2", "haiku_resnet",
                  "keras_hub_gpt2")
# Kinds of step, by what the compare's progress line says (first match wins).
KINDS = (
    ("build", ("build the target",)),
    ("floor", ("floor",)),
    ("native", ("native",)),
    ("rounding", ("rounding sensitivity",)),
    ("reference", ("reference outputs",)),
    ("export", ("export",)),
    ("load", ("load",)),
    ("timing", ("cold start", "benchmark", "round", "latency")),
    ("parity", ("trials", "worker")),
    ("prepare", ("signature of", "which backends", "gpu")),
)


def kind_of(step: str) -> str:
    """The kind of a timeline step, by its words."""
    said = step.lower()
    for kind, words in KINDS:
        if any(w in said for w in words):
            return kind
    return "other"


def select_models(spec: str) -> list[RealModel]:
    """The real models `--models` names: names, tags and 'all', comma-separated and mixed, each model once in
    the order given. SystemExit (one line: what was given, what exists) for an unknown word or no model."""
    known = {m.name: m for m in REAL_MODELS}
    words = [w.strip() for w in spec.split(",") if w.strip()]
    unknown = [w for w in words if w != "all" and w not in known and w not in TAGS]
    if unknown or not words:
        said = f"unknown name(s) or tag(s) {', '.join(unknown)}" if unknown else "names no model"
        raise SystemExit(f"--models {spec!r}: {said}; models: {', '.join(known)}; tags: {', '.join(sorted(TAGS))}; "
                         "or 'all'")
    chosen: dict[str, RealModel] = {}
    for w in words:
        if w in known:
            chosen.setdefault(w, known[w])
        for m in REAL_MODELS:
            if w == "all" or w in m.tags:
                chosen.setdefault(m.name, m)
    return list(chosen.values())


def children_cpu_s() -> float:
    """CPU seconds (user + system) of every descendant this process has waited for, so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_one(target: str, flags: list[str], out: Path, timeout: float) -> dict:
    """One compare as its own process; its wall time, the CPU seconds of its whole process tree (its
    workers and the tools they ran, each waited for: the work a 2-core machine must fit in the wall time,
    less sensitive to other load than the wall time) and its timeline's seconds by kind."""
    t0, c0 = time.perf_counter(), children_cpu_s()
    done = run_command([sys.executable, "-m", "multiexport", "compare", target, "--out-dir", str(out), *flags],
                       timeout=timeout)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - c0
    results = out / "results.json"
    steps = json.loads(results.read_text()).get("timeline", []) if results.is_file() else []
    kinds: dict[str, float] = {}
    for step in steps:
        kinds[kind_of(step["what"])] = kinds.get(kind_of(step["what"]), 0.0) + float(step["seconds"])
    return {"target": target, "exit": done.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "kinds": {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
            "steps": steps}


def table(rows: list[dict], seed_s: float) -> str:
    kinds = sorted({k for r in rows for k in r["kinds"]}, key=lambda k: -sum(r["kinds"].get(k, 0) for r in rows))
    lines = ["| run | exit | wall s | / seed | CPU s | " + " | ".join(kinds) + " |",
             "|---|---|---|---|---|" + "---|" * len(kinds)]
    for r in rows:
        lines.append(f"| {r['name']} | {r['exit']} | {r['wall_s']:.1f} | {r['wall_s'] / seed_s:.2f} | "
                     f"{r.get('cpu_s', 0.0):.1f} | "
                     + " | ".join(f"{r['kinds'].get(k, 0):.1f}" for k in kinds) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="real models: names, tags ('quick', ...) or 'all', comma-separated and mixed "
                        "(default: one per library)")
    parser.add_argument("--no-bench", action="store_true", help="parity only (compare --no-bench)")
    parser.add_argument("--batch-sweep", action="store_true",
                        help="also time each model at its batch sweep (the zoo's --batch-sizes: that many times the "
                        "timed seconds); default: one timed size, as the seed")
    parser.add_argument("--args", default="", help="more compare flags for every run, e.g. '--trials 2'")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per compare")
    parser.add_argument("--out", type=Path, required=True, help="a new directory for the runs and the tables")
    args = parser.parse_args(argv)
    models = select_models(args.models)  # an unknown word or an empty selection stops here, before any run
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out}: not empty")
    common = [*args.args.split(), *(["--no-bench"] if args.no_bench else [])]
    rows: list[dict] = []
    for i, model in enumerate(models):
        for name, target, flags in (("seed", "multiexport.examples:seed", common),
                                    (model.name, model.target,
                                     [*common, *model.compare_flags(bench=args.batch_sweep and not args.no_bench)])):
            row = run_one(target, flags, args.out / f"{i:02d}-{name}", args.timeout)
            row["name"] = name
            rows.append(row)
            print(f"{name}: {row['wall_s']:.1f} s, {row.get('cpu_s', 0.0):.1f} CPU s (exit {row['exit']}); " +
                  ", ".join(f"{k} {v:.1f}" for k, v in list(row["kinds"].items())[:4]), flush=True)
    seeds = [r["wall_s"] for r in rows if r["name"] == "seed"]
    real = [r["wall_s"] for r in rows if r["name"] != "seed"]
    seed_s, median_real = statistics.median(seeds), statistics.median(real)
    seed_cpu = statistics.median(r.get("cpu_s", 0.0) for r in rows if r["name"] == "seed")
    real_cpu = statistics.median(r.get("cpu_s", 0.0) for r in rows if r["name"] != "seed")
    summary = (f"seed median {seed_s:.1f} s over {len(seeds)} runs [{min(seeds):.1f}, {max(seeds):.1f}]; median "
               f"real model {median_real:.1f} s over {len(real)} models = {median_real / seed_s:.2f}x the seed "
               f"(target: <= 2x); CPU s: seed median {seed_cpu:.1f}, real models' median {real_cpu:.1f} = "
               f"{real_cpu / seed_cpu if seed_cpu else float('nan'):.2f}x; flags: {' '.join(common) or '(defaults)'}"
               + ("; each model timed at its batch sweep" if args.batch_sweep and not args.no_bench else ""))
    text = table(rows, seed_s) + "\n\n" + summary + "\n"
    print(text)
    (args.out / "compare_time.md").write_text(text)
    (args.out / "compare_time.json").write_text(json.dumps({"rows": rows, "seed_median_s": seed_s,
                                                            "real_median_s": median_real,
                                                            "seed_median_cpu_s": seed_cpu,
                                                            "real_median_cpu_s": real_cpu}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
