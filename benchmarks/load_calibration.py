"""Calibrate the throughput gate: false alarms on A/A load runs, detection of a planted slowdown.

    python -m benchmarks.load_calibration DIR [DIR ...] [--pairs N] [--slowdown 1.5] [--rounds 3] [--seconds 0.5]
                                          [--scenario both] [--rates R1,R2] [--p99-ms 25] [--threads 2] [--out OUT]
                                          [--paired]
    python -m benchmarks.load_calibration --table OUT/calibration.json

DIR: artifact directories or a compare's output directory (as `multiexport load` takes them). Each pair is three
load runs of every format, in this order: a baseline, an A/A run (nothing changed: the same artifacts, code and
settings), and a planted run whose lanes carry a slowdown ($MULTIEXPORT_PLANTED_SLOWDOWN: each call spins for
(FACTOR - 1) times its own duration, so the format really serves 1/FACTOR as fast). Each run against its pair's
baseline is judged by the gate's own throughput rule (`report.load.throughput_checks`, what `multiexport diff` and
`compare --baseline` apply to load.json) at the default threshold and at each of THRESHOLDS: per format and figure
(the offline peak at each size, the max rate under the bound), was it flagged a regression? Writes OUT/calibration.json
and OUT/calibration.md after every pair (a killed calibration keeps what it measured), and prints the table.
Give fixed `--rates` for the Server figure: a ladder is drawn from each run's own offline peak, so two runs' max
rates would sit on different rungs.

--paired: the paired rule instead (`report.load.paired_throughput_checks`): each load run measures every format
twice in the same rounds, as `baseline:FORMAT` and FORMAT (the same artifact: an A/A), and in the planted run the
slowdown reaches FORMAT's lanes only (the workers of baseline rows never get it); two runs per pair.
`--table FILE` prints the table of a calibration.json again.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from multiexport.cli.load_command import artifact_dirs
from multiexport.measure.load import LoadConfig
from multiexport.measure.pairing import PLANTED_ENV
from multiexport.report.load import paired_throughput_checks, throughput_checks
from multiexport.results.bench import BASELINE_PREFIX
from multiexport.results.load import LoadResults
from multiexport.run.load import measure_load

THRESHOLDS = (None, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0)  # None: the rule's default


def run(artifacts: list[tuple[str, Path]], config: LoadConfig, planted: str | None) -> LoadResults:
    """One load run; the planted slowdown set in this process's environment, which the workers inherit."""
    os.environ.pop(PLANTED_ENV, None)
    if planted:
        os.environ[PLANTED_ENV] = planted
    try:
        return measure_load(artifacts, config)
    finally:
        os.environ.pop(PLANTED_ENV, None)


def judge(base: LoadResults | None, new: LoadResults, condition: str, pair: int) -> list[dict]:
    """Each figure's verdict at every threshold (base None: the paired rule on `new`'s own baseline rows)."""
    out = []
    for threshold in THRESHOLDS:
        checks = paired_throughput_checks(new, threshold) if base is None else throughput_checks(base, new, threshold)
        for check in checks:
            out.append({"pair": pair, "condition": condition, "threshold": threshold, "format": check.backend,
                        "figure": check.check.split("@")[0], "verdict": check.verdict,
                        "flagged": check.verdict in ("regression", "missing"), "ratio": check.ratio,
                        "detail": check.detail})
    return out


def derived(records: list[dict]) -> list[dict]:
    """Verdicts at a threshold the run did not judge, from its default-threshold records: flagged when the ratio is
    past it and the rule's other condition held (cross-run: the rounds apart; paired: slower in every round)."""
    judged = {r["threshold"] for r in records}
    out = []
    for t in (t for t in THRESHOLDS if t is not None and t not in judged):
        for r in records:
            if r["threshold"] is None and r["verdict"] != "missing":
                held = "rounds apart" in r["detail"] or "slower in every round" in r["detail"]
                out.append({**r, "threshold": t, "flagged": bool(r["ratio"] is not None and r["ratio"] > t and held)})
    return out


def table(records: list[dict], pairs: int, slowdown: float) -> str:
    """Per format and figure: A/A runs flagged and planted runs flagged, at each threshold."""
    heads = ["default" if t is None else f"{t:g}x" for t in THRESHOLDS]
    lines = [f"{pairs} pair(s); planted slowdown {slowdown:g}x", "",
             "| format | figure | " + " | ".join(f"{h}: A/A flagged, planted flagged" for h in heads) + " |",
             "|" + " --- |" * (2 + len(heads))]
    keys = sorted({(r["format"], r["figure"]) for r in records})
    records = [*records, *derived(records)]
    for fmt, figure in keys:
        cells = []
        for t in THRESHOLDS:
            group = [r for r in records if (r["format"], r["figure"], r["threshold"]) == (fmt, figure, t)]
            aa = [r["flagged"] for r in group if r["condition"] == "A/A"]
            slow = [r["flagged"] for r in group if r["condition"] == "planted"]
            cells.append(f"{sum(aa)}/{len(aa)}, {sum(slow)}/{len(slow)}")
        lines.append(f"| {fmt} | {figure} | " + " | ".join(cells) + " |")
    totals = []
    for t in THRESHOLDS:
        aa = [r["flagged"] for r in records if r["threshold"] == t and r["condition"] == "A/A"]
        slow = [r["flagged"] for r in records if r["threshold"] == t and r["condition"] == "planted"]
        totals.append(f"{sum(aa)}/{len(aa)}, {sum(slow)}/{len(slow)}")
    lines.append("| all | all | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, nargs="*")
    parser.add_argument("--paired", action="store_true")
    parser.add_argument("--table", type=Path)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--slowdown", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--scenario", default="offline")
    parser.add_argument("--rates", default="")
    parser.add_argument("--p99-ms", type=float, default=25.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/load-calibration"))
    args = parser.parse_args()
    if args.table:
        data = json.loads(args.table.read_text())
        print(table(data["records"], 1 + max(r["pair"] for r in data["records"]), data["config"]["slowdown"]))
        return
    rates = tuple(float(r) for r in args.rates.split(",") if r.strip())
    config = LoadConfig(scenario=args.scenario, p99_ms=args.p99_ms, rates=rates, seconds=args.seconds,
                        rounds=args.rounds, threads=args.threads,
                        driver="python")  # the planted slowdown acts in the Python lanes only, not in a C loop
    artifacts = artifact_dirs(args.artifacts)
    if args.paired:
        artifacts += [(BASELINE_PREFIX + name, directory) for name, directory in artifacts]
    args.out.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    for pair in range(args.pairs):
        base = None if args.paired else run(artifacts, config, None)
        records += judge(base, run(artifacts, config, None), "A/A", pair)
        records += judge(base, run(artifacts, config, f"{args.slowdown:g}"), "planted", pair)
        text = table(records, pair + 1, args.slowdown)
        (args.out / "calibration.json").write_text(json.dumps({"config": vars(args) | {"artifacts": [
            str(a) for a in args.artifacts], "out": str(args.out)}, "records": records}, indent=1))
        (args.out / "calibration.md").write_text(text + ("\n" if pair + 1 == args.pairs else "\n\n(partial)\n"))
        print(f"pair {pair + 1}/{args.pairs} done", flush=True)
    print(table(records, args.pairs, args.slowdown))
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
