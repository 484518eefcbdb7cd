"""`--run`: each selected model through `multiexport compare` in a process of its own, one after another.

Writes OUT/NAME/results.json (compare's), OUT/NAME.log (command, exit code, seconds, stdout, stderr), and after
every model OUT/summary.json (name -> exit code, seconds, per-backend status and reason) and OUT/matrix.md, so
a run stopped halfway still leaves a matrix of what finished.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

ORDER = ["xla", "savedmodel", "onnx", "iree", "litert", "openvino"]
EXIT_MEANING = {0: "ok", 1: "parity failed", 2: "user error", 3: "backend failed", 70: "multiexport bug"}


def run_models(models, out: str | Path, backends: str, trials: int, bench: bool, timeout: str,
               extra: Sequence[str] = ()) -> int:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[2]
    summary: dict[str, dict] = {}
    for m in models:
        cmd = [sys.executable, "-m", "multiexport", "compare", m.target, "--out", str(out / m.name), "--backends",
               backends, "--trials", str(trials), "--timeout", str(timeout), *m.compare_flags(bench=bench),
               *([] if bench else ["--no-bench"]), *extra]
        print(f"[real-models] {m.name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        seconds = round(time.perf_counter() - t0, 1)
        (out / f"{m.name}.log").write_text(f"$ {' '.join(cmd)}\n# exit {proc.returncode} "
                                           f"({EXIT_MEANING.get(proc.returncode, '?')}) in {seconds} s\n"
                                           f"{proc.stdout}\n--- stderr ---\n{proc.stderr}")
        print(f"[real-models] {m.name}: exit {proc.returncode} in {seconds:.0f} s", file=sys.stderr, flush=True)
        entry: dict = {"exit": proc.returncode, "seconds": seconds, "backends": {}}
        results = out / m.name / "results.json"
        if results.is_file():
            data = json.loads(results.read_text())
            entry["backends"] = {b: {"status": r["status"], "reason": r.get("reason", "")}
                                 for b, r in data["backends"].items()}
        else:
            last = (proc.stderr.strip().splitlines() or [""])[-1]
            entry["backends"] = {"*": {"status": f"exit {proc.returncode}", "reason": last}}
        summary[m.name] = entry
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        (out / "matrix.md").write_text(matrix(summary))
    print(matrix(summary))
    return 0 if all("*" not in e["backends"] for e in summary.values()) else 1


def ok_counts(summary: dict[str, dict]) -> dict[str, tuple[int, int]]:
    """Per backend: (ok rows, models XLA runs), over the models whose XLA row is ok (the zoo's denominator)."""
    runs = [e for e in summary.values() if e["backends"].get("xla", {}).get("status") == "ok"]
    seen = {b for e in summary.values() for b in e["backends"]} - {"*"}
    backends = [b for b in ORDER if b in seen] + sorted(seen - set(ORDER))
    return {b: (sum(e["backends"].get(b, {}).get("status") == "ok" for e in runs), len(runs)) for b in backends}


def merge_summaries(directories: Sequence[str | Path]) -> dict[str, dict]:
    """The summary.json of several --run output directories (e.g. run in parallel), as one summary."""
    merged: dict[str, dict] = {}
    for directory in directories:
        merged.update(json.loads((Path(directory) / "summary.json").read_text()))
    return merged


def matrix(summary: dict[str, dict]) -> str:
    """Model x backend status, the ok count per backend over the models XLA runs, then every cell that is not
    ok with its category and the first line of its reason."""
    seen = {b for e in summary.values() for b in e["backends"]}
    backends = [b for b in ORDER if b in seen] + sorted(seen - set(ORDER))
    lines = ["| model | exit | s | " + " | ".join(backends) + " |", "|---|---|---|" + "---|" * len(backends)]
    for name, e in summary.items():
        cells = [e["backends"].get(b, {}).get("status", "-") for b in backends]
        lines.append(f"| {name} | {e['exit']} | {e['seconds']:.0f} | " + " | ".join(cells) + " |")
    counts = ok_counts(summary)
    lines.append("| **ok / models XLA runs** | | | " + " | ".join(f"{counts[b][0]}/{counts[b][1]}" if b in counts
                                                             else "-" for b in backends) + " |")
    lines.append("")
    for name, e in summary.items():
        for b, r in e["backends"].items():
            if r["status"] != "ok":
                first = (r["reason"].strip().splitlines() or [""])[0]
                first = "".join(c if c.isprintable() else repr(c)[1:-1] for c in first)  # a converter's ANSI escapes
                lines.append(f"- {name}/{b}: {r['status']}: {' '.join(first.split())[:400]}")
    return "\n".join(lines) + "\n"
