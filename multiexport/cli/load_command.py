"""`multiexport load`: run the load scenarios over artifact directories and write load.json and its reports."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import UsageError
from ..exporting.manifest import Manifest
from ..measure.load import LoadConfig
from ..report.load import gate_load, render_markdown, write_load_reports
from ..report.render import write_reports
from ..results import Results
from ..results.bench import BASELINE_PREFIX
from ..run.load import measure_load
from ..status import Status
from .flags import batch_sizes
from .output import print_load_summary


def artifact_dirs(paths: list[Path]) -> list[tuple[str, Path]]:
    """(name, directory) per artifact: a directory with a manifest.json is one; a compare's output directory stands
    for its artifacts (its subdirectories that have one). The name is the format, suffixed when it repeats."""
    found: list[Path] = []
    for path in paths:
        if (path / "manifest.json").is_file():
            found.append(path)
        elif path.is_dir() and any((sub / "manifest.json").is_file() for sub in path.iterdir()):
            found += sorted(sub for sub in path.iterdir() if (sub / "manifest.json").is_file())
        else:
            raise UsageError(f"Artifact '{path}' | has no manifest.json, expected an artifact directory or a compare's "
                             "output directory holding some")
    names: dict[str, int] = {}
    out = []
    for directory in found:
        backend = Manifest.read(directory).backend
        names[backend] = names.get(backend, 0) + 1
        out.append((backend if names[backend] == 1 else f"{backend}-{names[backend]}", directory))
    return out


def baselines(artifacts: list[tuple[str, Path]], directory: Path, option: str) -> list[tuple[str, Path]]:
    """The baseline artifact of each format that `directory` (a compare's output directory) holds, named
    `baseline:FORMAT`: measured in the same rounds as the format, it gives the paired throughput check
    (report.load.paired_throughput_checks)."""
    if not directory.is_dir():
        raise UsageError(f"Option '{option}' | got '{directory}', expected a compare's output directory")
    found = [(BASELINE_PREFIX + name, directory / name) for name, _ in artifacts
             if (directory / name / "manifest.json").is_file()]
    if not found:
        raise UsageError(f"Option '{option}' | '{directory}' holds none of {', '.join(n for n, _ in artifacts)}, "
                         "expected a compare's output directory with the same formats")
    return found


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cmd_load(args) -> int:
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"Option '--threads' | got {args.threads}, expected an integer >= 1")
    config = LoadConfig(scenario=args.scenario, p99_ms=args.p99_ms, rates=args.rates, batch_sizes=batch_sizes(args.batch_sizes) or (),
                        lanes=args.lanes, seconds=args.seconds, rounds=args.rounds, seed=args.seed,
                        threads=args.threads or usable_cores(), min_requests=args.min_requests,
                        samples_per_query=args.samples_per_query, driver=args.driver)
    artifacts = artifact_dirs(args.artifacts)
    if args.baseline is not None:  # each format's baseline measured in the same rounds: the paired throughput gate
        artifacts += baselines(artifacts, args.baseline, "--baseline")
    out: Path = args.out_dir
    if out.exists() and not out.is_dir():
        raise UsageError(f"Option '--out-dir' | got '{out}', a file, expected a directory")
    out.mkdir(parents=True, exist_ok=True)
    results = measure_load(artifacts, config, device=args.device, timeout=args.timeout,
                           progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    results.write(out / "load.json")
    md, page = write_load_reports(results, out)
    print(render_markdown(results))
    print(f"results: {out / 'load.json'}; reports: {md}, {page}")
    return 0 if all(row.ok for row in results.rows) else 3


def compare_load(results: Results, batch_sizes: tuple[int, ...] | None, threads: int | None, args,
                 progress=lambda m: None) -> None:
    """`compare --load`: the load scenarios on the compare's faithful artifacts (its rows with status ok, each in
    OUT/<name>), load.json beside results.json, the reports rendered again with their Load section."""
    out = Path(results.out_dir)
    artifacts = [(name, out / name) for name, row in results.backends.items()
                 if row.status is Status.OK and (out / name / "manifest.json").is_file()]
    if not artifacts:
        print("load: no faithful artifact to measure under load", file=sys.stderr)
        return
    base = getattr(args, "baseline_artifacts", None) or (
        Path(args.baseline).parent if getattr(args, "baseline", None) else None)
    if base is not None and Path(base).is_dir():  # the baselines in the same rounds: the paired throughput gate
        artifacts += [(BASELINE_PREFIX + name, Path(base) / name) for name, _ in artifacts
                      if (Path(base) / name / "manifest.json").is_file()]
    config = LoadConfig(scenario=args.load, p99_ms=args.p99_ms, rates=args.load_rates, batch_sizes=batch_sizes or (),
                        lanes=args.load_lanes, seconds=args.load_seconds, rounds=args.load_rounds,
                        threads=threads or usable_cores(), driver=getattr(args, "load_driver", "auto"))
    loaded = measure_load(artifacts, config, device="cpu", timeout=args.timeout, progress=lambda m: progress(f"load: {m}"))
    loaded.write(out / "load.json")
    write_load_reports(loaded, out)
    write_reports(results, out)  # report.md/html again: they add the Load section from load.json
    print_load_summary(loaded)  # the load table (compare's own summary was printed before the load ran) and verdicts


def load_dirs(args, current: Results) -> tuple[Path | None, Path]:
    """Where the gate looks for each run's load.json: beside the baseline results.json (`--baseline`, or diff's
    BASELINE; None without one), and beside diff's CURRENT or in the compare's output directory."""
    given = getattr(args, "baseline", None)
    base = None if given is None else (Path(given) if Path(given).is_dir() else Path(given).parent)
    now = getattr(args, "current", None)
    return base, (Path(now).parent if now is not None else Path(current.out_dir))


__all__ = ["artifact_dirs", "cmd_load", "compare_load", "gate_load", "load_dirs"]
