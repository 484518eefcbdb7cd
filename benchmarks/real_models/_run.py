"""`--run`: the selected models as a sweep (`multiexport sweep`'s local executor), one compare per model.

The registry is also a sweep spec, benchmarks/real_models/zoo.toml (`spec_text()` writes it; a test keeps
it in step with REAL_MODELS), so the same zoo runs as `multiexport sweep benchmarks/real_models/zoo.toml
--only quick`, or on a Ray cluster with `--executor ray`. Writes OUT/rows/NAME/results.json (compare's),
OUT/rows/NAME.log, and after every model OUT/summary.json and OUT/matrix.md/.html, so a run stopped halfway
still leaves a matrix of what finished and continues with `--resume`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from multiexport.sweeps import SweepConfig, SweepSpec, SweepTask, matrix as sweep_matrix, run_sweep
from multiexport.sweeps.spec import DEFAULT_TIMEOUT

REPO = Path(__file__).resolve().parents[2]
SPEC = Path(__file__).resolve().parent / "zoo.toml"
DEFAULT_ARGS = ("--trials", "2", "--no-bench", "--timeout", "600")


def tasks_of(models, backends: str, trials: int, bench: bool, timeout: str, extra: Sequence[str] = ()) -> list[SweepTask]:
    """One sweep task per model, with the compare flags `--run` gives it."""
    chosen = tuple(b for b in backends.split(",") if b and b != "all")
    return [SweepTask(name=m.name, target=m.target, backends=chosen,
                      args=("--trials", str(trials), "--timeout", str(timeout), *m.compare_flags(bench=bench),
                            *([] if bench else ["--no-bench"]), *extra),
                      tags=m.tags, timeout=DEFAULT_TIMEOUT) for m in models]


def run_models(models, out: str | Path, backends: str, trials: int, bench: bool, timeout: str,
               extra: Sequence[str] = (), resume: bool = False) -> int:
    tasks = tasks_of(models, backends, trials, bench, timeout, extra)
    spec = SweepSpec(SPEC, REPO, "real-models", tuple(tasks), "")
    result = run_sweep(spec, tasks, SweepConfig(out=Path(out), jobs=1, resume=resume),
                       say=lambda m: print(f"[real-models] {m}", file=sys.stderr, flush=True))
    print(result.markdown, end="")
    return result.exit_code and 1


def merged_matrix(directories: Sequence[str | Path]) -> str:
    """One matrix of several finished runs (e.g. shards run in parallel)."""
    return sweep_matrix.markdown(sweep_matrix.merged([Path(d) for d in directories]))


def spec_text(models) -> str:
    """The zoo as a sweep spec (benchmarks/real_models/zoo.toml): parity only, each model's own flags."""
    lines = ["# The real-model zoo as a sweep spec, written by `python -m benchmarks.real_models --write-spec`",
             "# from REAL_MODELS (tests/compare/test_real_models.py checks it is current):",
             "#   multiexport sweep benchmarks/real_models/zoo.toml --only quick --out DIR [--executor ray]",
             "", "[sweep]", 'name = "real-models"', 'root = "../.."  # the repository: targets are benchmarks.real_models:NAME',
             'backends = "all"',
             f"args = {json.dumps(list(DEFAULT_ARGS))}", "timeout = 3600", ""]
    for m in models:
        lines += ["[[target]]", f"target = {json.dumps(m.target)}", f"tags = {json.dumps(list(m.tags))}"]
        flags = m.compare_flags(bench=False)
        if flags:
            lines.append(f"args = {json.dumps(flags)}")
        lines.append("")
    return "\n".join(lines)
