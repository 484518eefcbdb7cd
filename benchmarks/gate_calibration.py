"""Calibrate the regression gate: false alarms on A/A runs, detection of a planted slowdown.

    python -m benchmarks.gate_calibration [--runs N] [--models mlp,cnn] [--backends xla,onnx,openvino]
                                          [--slowdown 1.2] [--bench-time S] [--out DIR] [--slow-process]
    python -m benchmarks.gate_calibration --history
    python -m benchmarks.gate_calibration --slices ARTIFACT_DIR [--rounds 45] [--slowdown 1.2]

For each model: one baseline compare (DIR/MODEL/base), then N A/A compares (same code, same artifacts:
`compare --baseline-artifacts base`, nothing changed) alternating with N compares whose new runners carry a
planted slowdown ($MULTIEXPORT_PLANTED_SLOWDOWN: each timed call of the new artifacts spins for
(FACTOR - 1) times its duration; the baseline's workers never get it). Every run is judged by the gate
itself (`report.regression.diff_results`) twice: paired A/B (the ratio new / baseline measured in the
same rounds) and cross-run (the same run with its paired ratios dropped: this run's p50 against the
baseline run's recorded one), at the default thresholds and at a range of given ones, and a third time on the first process pair alone
(the paired verdict without the fresh pair that confirms a flagged ratio: the gate before it). Reported per
backend and call size (the baseline's p50: < 30 us, 30 us - 1 ms, >= 1 ms): the false-alarm rate (A/A
runs flagged) and the detection rate (planted runs flagged); and per run whether the whole gate failed (exit
1 on any regression, a status one too). --slow-process adds a third condition: the slowdown planted in the
first new worker only (FACTOR:first), a process offset the gate must not flag. Writes DIR/calibration.json and
DIR/calibration.md after every run (a killed calibration keeps what it measured; the Markdown says it is
partial), printed at the end; each run's directory is removed once read. --backends may be any subset.
--slices times one artifact against itself in two paired workers (A/A, then with the slowdown planted in the
first), a fixed number of rounds, and prints the per-round ratio's interval when each round's ratio is taken of
the slices' minimum, 5th, 10th, 25th percentile or median: what chose the gate's per-round statistic.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODELS = {"mlp": "multiexport.examples:mlp", "cnn": "multiexport.examples:cnn",
          "transformer": "multiexport.examples:transformer"}
PAIRED_GIVEN = (1.02, 1.05, 1.08, 1.10, 1.15)
CROSS_GIVEN = (1.10, 1.25, 1.50, 2.00, 2.50, 3.00)
ONE_PAIR = "paired A/B, first process pair only"
SLOW_PROCESS = "one slow process"
WHOLE = "the whole gate"
BUCKETS = ((0.030, "< 30 us"), (1.0, "30 us - 1 ms"), (float("inf"), ">= 1 ms"))


def compare(spec: str, out: Path, backends: str, bench_time: float, baseline: Path | None,
            planted: str | None, rounds: int | None = None) -> dict | None:
    """One `multiexport compare` as a CI job runs it (`--baseline BASE/results.json`, the baseline's artifacts
    beside it); its results.json with the command's exit code under "exit" (None when it wrote none)."""
    from multiexport.measure.pairing import PLANTED_ENV

    env = {k: v for k, v in os.environ.items() if k != PLANTED_ENV}
    if planted is not None:
        env[PLANTED_ENV] = planted
    cmd = [sys.executable, "-m", "multiexport", "compare", spec, "--backends", backends, "--out-dir", str(out),
           "--bench-time", str(bench_time), *(["--baseline", str(baseline / "results.json")] if baseline else []),
           *(["--rounds", str(rounds)] if rounds else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    path = out / "results.json"
    if not path.is_file():
        print(f"[calibration] {' '.join(cmd)} wrote no results (exit {proc.returncode}): {proc.stderr[-800:]}",
              file=sys.stderr)
        return None
    return {**json.loads(path.read_text()), "exit": proc.returncode}


def judge(base: dict, run: dict, condition: str, model: str) -> list[dict]:
    """Every latency check of `run` against `base`, paired and cross-run, at the defaults and given thresholds."""
    from multiexport.report.regression import diff_results
    from multiexport.results import Results

    base_results = Results.from_json({k: v for k, v in base.items() if k != "exit"}, "baseline")
    now = Results.from_json({k: v for k, v in run.items() if k != "exit"}, "run")

    def without(**fields):
        return dataclasses.replace(now, pairing=dataclasses.replace(now.pairing, **fields)
                                   if now.pairing is not None else None)

    size = {(name, s.batch): s.latency.p50_ms for name, r in base_results.backends.items()
            for s in (r.bench.measured() if r.bench else []) if s.latency is not None}
    rows = []
    # "one process pair": the same run judged without its fresh pairs (what the gate said before they existed)
    for label, kind, results, given in (("paired A/B", "paired A/B", now, PAIRED_GIVEN),
                                        (ONE_PAIR, "paired A/B", without(confirmations=[]), PAIRED_GIVEN),
                                        ("cross-run", "cross-run", without(baseline_ratios=[], confirmations=[]),
                                         CROSS_GIVEN)):
        for threshold in (None, *given):
            for check in diff_results(base_results, results, max_slowdown=threshold).checks:
                if not check.check.startswith("latency@") or check.kind != kind:
                    continue
                batch = check.check.split("@", 1)[1]
                key = (check.backend, None if batch == "as exported" else int(batch))
                rows.append({"model": model, "backend": check.backend, "batch": key[1], "kind": label,
                             "condition": condition, "threshold": threshold, "base_ms": size.get(key),
                             "ratio": check.ratio, "flagged": check.verdict == "regression",
                             "low": check.low, "high": check.high, "rounds": check.rounds, "pairs": check.pairs,
                             "detail": check.detail if threshold is None else ""})
    # the whole gate as CI sees it: the compare's own exit code (1: any regression, a status or parity one too,
    # e.g. a worker that failed under load; else 0 or another code), at the defaults: one row per run, with how
    # it was timed (paired, or sequential with each pair alone) and the load then
    whole = diff_results(base_results, now)
    pairing = run.get("pairing") or {}
    rows.append({"model": model, "backend": "*", "batch": None, "kind": WHOLE, "condition": condition,
                 "threshold": None, "base_ms": None, "ratio": None, "flagged": run.get("exit") == 1,
                 "exit": run.get("exit"), "low": None, "high": None, "rounds": None, "pairs": None,
                 "mode": pairing.get("mode"), "load": os.getloadavg()[0],
                 "detail": "; ".join(f"{c.backend} {c.check}: {c.detail}" for c in whole.regressions)})
    return rows


def bucket(ms: float | None) -> str:
    return next(label for limit, label in BUCKETS if ms is not None and ms < limit) if ms is not None else "?"


def table(rows: list[dict], kind: str, thresholds: tuple) -> str:
    """Per backend x call size: A/A false alarms and planted detections at each threshold (default first)."""
    heads = ["default"] + [f"{t:g}x" for t in thresholds]
    lines = ["| backend | call size | runs (A/A, planted) | " + " | ".join(f"{h}: false alarms / detected"
                                                                          for h in heads) + " |",
             "|---|---|---|" + "---|" * len(heads)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["kind"] == kind:
            groups.setdefault((r["backend"], bucket(r["base_ms"])), []).append(r)
    for (backend, size), group in sorted(groups.items()):
        cells = []
        for t in (None, *thresholds):
            aa = [r["flagged"] for r in group if r["threshold"] == t and r["condition"] == "A/A"]
            slow = [r["flagged"] for r in group if r["threshold"] == t and r["condition"] == "planted"]
            cells.append(f"{sum(aa)}/{len(aa)} / {sum(slow)}/{len(slow)}")
        n_aa = sum(1 for r in group if r["threshold"] is None and r["condition"] == "A/A")
        n_slow = sum(1 for r in group if r["threshold"] is None and r["condition"] == "planted")
        lines.append(f"| {backend} | {size} | {n_aa}, {n_slow} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def slow_process(rows: list[dict]) -> str:
    """Runs with the planted slowdown in the first new worker only, per backend: flagged at the default by the
    gate (both pairs), and by the first pair alone (what one slow process did before fresh pairs)."""
    lines = []
    # The whole gate's rows (backend "*") are whole_gate's line, not a backend's row here.
    for backend in sorted({r["backend"] for r in rows if r["condition"] == SLOW_PROCESS and r["kind"] != WHOLE}):
        def flagged(kind):
            got = [r["flagged"] for r in rows if r["condition"] == SLOW_PROCESS and r["backend"] == backend
                   and r["kind"] == kind and r["threshold"] is None]
            return f"{sum(got)}/{len(got)}"
        lines.append(f"| {backend} | {flagged('paired A/B')} | {flagged(ONE_PAIR)} |")
    if not lines:
        return ""
    return ("One slow process (the planted slowdown in the first new worker only; a fresh pair does not have it), "
            "runs flagged at the default:\n\n| backend | the gate (both pairs) | first pair only |\n|---|---|---|\n"
            + "\n".join(lines) + "\n\n")


def whole_gate(rows: list[dict]) -> str:
    """Runs the whole gate failed (the compare's exit 1: any regression, status and parity too), per condition
    and model, with the runs timed sequentially (each pair alone) and the exit codes other than 0 and 1."""
    cells = []
    for model in sorted({r["model"] for r in rows if r["kind"] == WHOLE}):
        for condition in ("A/A", "planted", SLOW_PROCESS):
            got = [r for r in rows if r["kind"] == WHOLE and r["condition"] == condition and r["model"] == model]
            if got:
                alone = sum(r.get("mode") == "sequential" for r in got)
                other = sorted({r.get("exit") for r in got} - {0, 1})
                cells.append(f"{model} {condition} {sum(r['flagged'] for r in got)}/{len(got)}"
                             + (f" ({alone} timed as pairs alone)" if alone else "")
                             + (f" (other exit codes: {other})" if other else ""))
    return (f"The whole gate (the compare's exit code 1 on any regression), runs failed: {'; '.join(cells)}.\n\n"
            if cells else "")


def history_rates(series: int = 200, sweeps: int = 20, noise: float = 0.05, step: float = 1.2) -> str:
    """The history gate's change points on seeded series: how often `sweeps` sweeps of pure noise (lognormal,
    `noise`) get a change point, and how often a `step` slowdown half way is found within one sweep of it."""
    import numpy as np

    from multiexport.sweeps.changepoints import PENALTY, shifts
    from multiexport.sweeps.history import HistoryRow

    def rows(p50s):
        return [HistoryRow(f"s{i:03d}", "", None, "m", "b", "ok", "", 1e-7, 8, float(v), 0.0, 0.0, {}, {}, {})
                for i, v in enumerate(p50s)]

    false = found = 0
    half = sweeps // 2
    for k in range(series):
        rng = np.random.default_rng(100 + k)
        false += bool(shifts(rows(np.exp(rng.normal(0, noise, sweeps)))))
        rng = np.random.default_rng(10_000 + k)
        stepped = np.exp(rng.normal(0, noise, sweeps)) * np.where(np.arange(sweeps) >= half, step, 1.0)
        found += any(s.measure == "latency" and abs(int(s.sweep[1:]) - half) <= 1 for s in shifts(rows(stepped)))
    return (f"History change points (PENALTY {PENALTY:g}): {false}/{series} series of {sweeps} sweeps of noise "
            f"({noise:.0%} lognormal) got a change point; a {step:g}x step half way was found within one sweep in "
            f"{found}/{series}.")


def slice_quantiles(artifact: Path, rounds: int, slowdown: float, quantiles=(0, 5, 10, 25, 50)) -> str:
    """One artifact against itself in two paired workers, `rounds` rounds of the gate's slices (the default
    --bench-time over 15 rounds), A/A and then with `slowdown` planted in the first worker: per quantile, the
    ratio and interval after the planned 15 rounds (95%) and after all of them (99%), and the spread of the
    per-round log ratios. The artifact's recorded example inputs are its feed."""
    import numpy as np

    from multiexport.files.npz import load_npz
    from multiexport.measure.bench import BenchConfig
    from multiexport.measure.pairing import PLANTED_ENV, round_orders, signed_rank_interval, slice_plan
    from multiexport.results.bench import BASELINE_PREFIX
    from multiexport.run.messages import Samples, TimeSlice
    from multiexport.run.paired import serve_artifact
    from multiexport.run.servers import Servers

    bench, lines = BenchConfig(), [f"{artifact}: {rounds} paired rounds, load average {os.getloadavg()[0]:.1f}"]
    feed = load_npz(artifact / "example_inputs.npz", "example inputs")
    backend = json.loads((artifact / "manifest.json").read_text())["backend"]
    seconds, low_calls, high_calls = slice_plan(bench.bench_time, bench.min_iters, bench.max_iters, 15)
    for condition, planted in (("A/A", None), (f"planted {slowdown:g}x", f"{slowdown:g}")):
        os.environ.pop(PLANTED_ENV, None)
        if planted:
            os.environ[PLANTED_ENV] = planted  # the first worker only: the baseline's never gets it
        servers, names = Servers("cpu", os.cpu_count() or 1, 600), [backend, BASELINE_PREFIX + backend]
        slices: dict[str, list] = {n: [] for n in names}
        try:
            for name in names:
                servers.spawn(name, ["run", str(artifact)], backend)
                servers.load(name)
                if serve_artifact(servers, name, [], [(None, feed)], {}, bench).failure is not None:
                    return f"{name}: {servers.failures.get(name)}"
            for order in round_orders(names, rounds):
                for name in order:
                    answer = servers.ask(name, TimeSlice(0, seconds, low_calls, high_calls), Samples, 600)
                    if answer is None:
                        return f"{name}: {servers.failures.get(name)}"
                    slices[name].append(np.load(answer.file) / 1e3)
        finally:
            servers.close()
            os.environ.pop(PLANTED_ENV, None)
        calls = int(np.median([len(x) for x in slices[names[0]]]))
        lines.append(f"{condition} ({calls} calls per slice):")
        for q in quantiles:
            logs = np.log([np.percentile(a, q) / np.percentile(b, q) for a, b in zip(*slices.values())])
            planned = np.exp(signed_rank_interval(logs[:15], 0.95))
            every = np.exp(signed_rank_interval(logs, 0.99))
            lines.append(f"  p{q:<2}: 15 rounds {planned[0]:.3f} ({planned[1]:.3f}-{planned[2]:.3f}, 95%); {rounds} "
                         f"rounds {every[0]:.3f} ({every[1]:.3f}-{every[2]:.3f}, 99%); sd of log ratio {logs.std():.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate_calibration", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="A/A runs and planted runs per model (default: 5)")
    parser.add_argument("--models", default="mlp,cnn",
                        help=f"of {', '.join(MODELS)}, or NAME=MODULE:FUNCTION for any target (e.g. the plain-JAX "
                             "conv=benchmarks.tpu_models:conv on a machine without flax) (default: mlp,cnn)")
    parser.add_argument("--backends", default="xla,onnx,openvino")
    parser.add_argument("--slowdown", type=float, default=1.2, help="the planted slowdown factor (default: 1.2)")
    parser.add_argument("--bench-time", type=float, default=1.0, help="compare --bench-time (default: 1.0, its own)")
    parser.add_argument("--out", type=Path, default=Path("multiexport-out/gate-calibration"))
    parser.add_argument("--rounds", type=int, help="compare --rounds of the A/A and planted runs (default: its own)")
    parser.add_argument("--slow-process", action="store_true",
                        help="a third condition per run: the planted slowdown in the first new worker process only "
                             "(not in the fresh pair started to confirm a flagged ratio): one process slow for the "
                             "whole run, as load makes it; the gate should flag none of these runs")
    parser.add_argument("--history", action="store_true",
                        help="only the history gate's rates on seeded series (seconds, no compare)")
    parser.add_argument("--slices", type=Path, metavar="ARTIFACT_DIR",
                        help="only time this artifact against itself in paired rounds (--rounds, default 45; A/A and "
                             "--slowdown planted) and print the per-round ratio's interval at each slice quantile")
    args = parser.parse_args(argv)
    if args.slices is not None:
        print(slice_quantiles(args.slices, args.rounds or 45, args.slowdown))
        return 0
    from multiexport.measure.pairing import FIRST_ONLY

    if args.history:
        print(history_rates())
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    t0 = time.perf_counter()
    specs: dict[str, str] = {}  # the models asked, in order: name -> TARGET
    for item in args.models.split(","):
        name, eq, spec = item.partition("=")
        if not eq and name not in MODELS:
            parser.error(f"--models: {name!r} is none of {', '.join(MODELS)} and not NAME=MODULE:FUNCTION")
        specs[name] = spec if eq else MODELS[name]
    for model in specs:
        base_dir = args.out / model / "base"
        shutil.rmtree(base_dir, ignore_errors=True)
        base = compare(specs[model], base_dir, args.backends, args.bench_time, None, None)
        if base is None:
            return 3
        conditions = [("A/A", None), ("planted", f"{args.slowdown:g}")]
        if args.slow_process:  # the slowdown in the first new worker only: a process offset, no regression
            conditions.append((SLOW_PROCESS, f"{args.slowdown:g}{FIRST_ONLY}"))
        for k in range(args.runs):  # the conditions alternate, so a drift of the machine meets each
            for condition, planted in conditions:
                run_dir = args.out / model / f"run-{k}"
                run = compare(specs[model], run_dir, args.backends, args.bench_time, base_dir, planted, args.rounds)
                shutil.rmtree(run_dir, ignore_errors=True)
                if run is not None:
                    rows += judge(base, run, condition, model)
                print(f"[calibration] {model} {condition} {k + 1}/{args.runs} ({time.perf_counter() - t0:.0f} s)",
                      file=sys.stderr, flush=True)
                write(args, rows, t0, f"{model} {condition} {k + 1}/{args.runs}")  # a killed run keeps what it measured
    print(write(args, rows, t0, None))
    return 0


def write(args, rows: list[dict], t0: float, partial: str | None) -> str:
    """DIR/calibration.json and DIR/calibration.md from the rows so far; `partial`: the last run done when the
    calibration is still going (said at the top of the Markdown). Returns the Markdown."""
    from multiexport.report.regression import CROSS_RUN, CROSS_RUN_TINY, PAIRED, PAIRED_TINY

    load = os.getloadavg()
    runs = {(r["model"], r["condition"]) for r in rows}
    done = {m: sum(1 for r in rows if r["model"] == m and r["kind"] == "paired A/B" and r["threshold"] is None
                   and r["condition"] == "A/A") for m, _ in runs}
    rounds = sorted(r["rounds"] for r in rows if r.get("rounds") and r["threshold"] is None
                    and r["kind"] == "paired A/B")
    fresh = [r for r in rows if r["kind"] == "paired A/B" and r["threshold"] is None and r.get("pairs") == 2]
    spent_fresh = (f"; fresh process pairs: {sum(r['condition'] == 'A/A' for r in fresh)} A/A, "
                   f"{sum(r['condition'] == 'planted' for r in fresh)} planted backend runs")
    spent = (f"; rounds per paired ratio: median {rounds[len(rounds) // 2]}, max {rounds[-1]}" if rounds else "")
    spent += spent_fresh
    loads = sorted(r["load"] for r in rows if r["kind"] == WHOLE and r.get("load") is not None)
    spent += f"; load average over the runs {loads[0]:.1f}-{loads[-1]:.1f}" if loads else ""
    text = ((f"PARTIAL (still running, last done: {partial}; backend A/A runs so far per model: {done})\n\n"
             if partial else "")
            + f"Gate calibration: {args.runs} A/A and {args.runs} planted {args.slowdown:g}x runs per model "
            f"({args.models}; {args.backends}; --bench-time {args.bench_time:g}"
            f"{f'; --rounds {args.rounds}' if args.rounds else ''}), {time.perf_counter() - t0:.0f} s, "
            f"load average {load[0]:.1f} on {os.cpu_count()} cores{spent}. Each cell: A/A runs flagged / A/A "
            f"runs, planted runs flagged / planted runs.\n\nPaired A/B (default: interval of new/baseline above "
            f"{PAIRED:g}x, {PAIRED_TINY:g}x under 30 us, in the first process pair and in a fresh pair started to "
            f"confirm it):\n\n{table(rows, 'paired A/B', PAIRED_GIVEN)}\n\n"
            f"The same runs judged on the first process pair only (the gate before fresh pairs; the 99% level "
            f"of the added rounds still applies):\n\n{table(rows, ONE_PAIR, PAIRED_GIVEN)}\n\n"
            f"{slow_process(rows)}{whole_gate(rows)}"
            f"Cross-run (default: p50 ratio above {CROSS_RUN:g}x with separated intervals, {CROSS_RUN_TINY:g}x "
            f"under 30 us):\n\n{table(rows, 'cross-run', CROSS_GIVEN)}\n")
    for name, body in (("calibration.json", json.dumps(rows, indent=1) + "\n"), ("calibration.md", text)):
        tmp = args.out / (name + ".tmp")
        tmp.write_text(body)
        os.replace(tmp, args.out / name)
    return text


if __name__ == "__main__":
    sys.exit(main())
