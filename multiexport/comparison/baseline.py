"""Baseline artifacts timed beside the new ones: the paired A/B a regression gate rests on.

Two runs of the same code on one machine differ by more than either run's interval says (another
process's cache, the clock frequency, the scheduler), so a latency verdict from two separate runs is no
evidence of a change. `compare --baseline-artifacts DIR` (or `--baseline RESULTS_JSON` whose artifacts
are still beside it) loads each backend's baseline artifact in a worker of its own and times it in the
same interleaved rounds as the new artifact: the gate then judges the paired ratio new / baseline with
its interval. The baseline's directory is someone else's: its manifests are validated like any
artifact's (every listed path inside it, the format the row expects), its workers load it as untrusted
(a SavedModel's graph checked first), and nothing is written into it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import ArtifactError, UsageError
from ..exporting.manifest import MANIFEST_NAME, Manifest
from ..exporting.precision import split_variant
from ..files.paths import safe_component
from ..results import Status, load_results
from ..results.bench import BASELINE_PREFIX
from ..run.paired import serve_artifact

# Interleaved rounds of a compare against baseline artifacts, at least: with the same --bench-time split into
# more, shorter slices, a round that another process disturbed weighs less in the ratio's interval. Measured
# (benchmarks/gate_calibration.py, 2 loaded cores): a planted 1.2x on the example MLP caught in 17 of 18
# runs at 15 rounds, 12 of 20 (onnx, xla) at 5; no A/A run flagged at either.
BASELINE_ROUNDS = 15


@dataclass(frozen=True)
class BaselineArtifacts:
    """Which rows have a baseline artifact to time beside them.

    directory: the baseline's directory (a previous compare's --out: one artifact directory per row).
    found: row name -> its baseline artifact directory, manifest validated.
    missing: row name -> why it has none (its gate is then cross-run).
    """

    directory: Path
    found: Mapping[str, Path] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)


def find_baseline(directory: str | os.PathLike, rows: Sequence[str], out_dir: str | os.PathLike | None,
                  option: str = "--baseline-artifacts") -> BaselineArtifacts:
    """The baseline artifact of each row in `directory` (DIR/ROW, as a compare writes them), each manifest
    validated. A directory that is not one, or that overlaps the output directory (this run replaces what
    --out holds), or that holds no artifact of any row, is a user mistake (UsageError naming `option`);
    a manifest that is refused is an ArtifactError naming it."""
    base = Path(directory)
    if not base.is_dir():
        what = "a file" if base.exists() else "missing"
        raise UsageError(f"Option '{option}' | '{base}' is {what}, expected a compare's output directory holding "
                         "the baseline's artifacts")
    if out_dir is not None and _overlap(base, Path(out_dir)):
        raise UsageError(f"Option '{option}' | '{base}' overlaps --out '{out_dir}', expected a directory apart from "
                         "it (this run replaces what --out holds)")
    found = _find_impl(base, rows)
    if not found.found:
        raise UsageError(f"Option '{option}' | '{base}' holds no artifact of {', '.join(rows)}, expected DIR/BACKEND/"
                         f"{MANIFEST_NAME} as a compare writes them")
    return found


def beside_results(results_json: str | os.PathLike, rows: Sequence[str],
                   out_dir: str | os.PathLike | None) -> tuple[Path | None, str]:
    """For `--baseline RESULTS_JSON`: its directory when the artifacts of any of `rows` are still there
    (to be timed beside the new ones), else None; with one line saying which it is and why."""
    base = Path(results_json).parent
    if not any(os.path.lexists(base / row / MANIFEST_NAME) for row in rows):
        return None, (f"baseline: no artifact of {', '.join(rows)} beside {results_json}: latency is judged "
                      "cross-run (two separate runs, the wider threshold)")
    if out_dir is not None and _overlap(base, Path(out_dir)):
        return None, (f"baseline: its artifacts are in --out '{out_dir}', which this run replaces: latency is "
                      "judged cross-run (two separate runs, the wider threshold)")
    return base, (f"baseline: the artifacts beside {results_json} are timed in the same rounds as the new ones "
                  "(paired A/B)")


def _find_impl(base: Path, rows: Sequence[str]) -> BaselineArtifacts:
    found: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for row in rows:
        if safe_component(row) != row:  # a row name is a directory name as the compare writes it
            missing[row] = f"'{row}' is not a directory name"
            continue
        path = base / row
        if not os.path.lexists(path / MANIFEST_NAME):
            missing[row] = f"no baseline artifact {path}"
            continue
        manifest = Manifest.read(path)  # every listed file inside the artifact at its recorded size, else refused
        backend, precision = split_variant(row)
        if manifest.backend != backend or manifest.precision_name != precision:
            raise ArtifactError(f"Artifact '{path}' | is a {manifest.backend} artifact at {manifest.precision_name}, "
                                f"expected {backend} at {precision} (the baseline of row '{row}')")
        found[row] = path
    return BaselineArtifacts(base, found, missing)


def _overlap(a: Path, b: Path) -> bool:
    """Whether either directory is the other or inside it (links resolved)."""
    ra, rb = a.resolve(), b.resolve()
    return ra == rb or ra in rb.parents or rb in ra.parents


def artifact_bytes(baseline: BaselineArtifacts) -> dict[str, int]:
    """Each baseline runner's artifact size on disk (what the memory plan sizes it by)."""

    return {BASELINE_PREFIX + row: sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            for row, path in baseline.found.items()}


def spawn_baselines(servers, baseline: BaselineArtifacts, rows: Sequence[str]) -> None:
    """One paired worker per baseline artifact of the rows being timed (`rows`), importing its runtime; it
    loads the artifact as untrusted (no --trust-artifact: a SavedModel's graph is checked first)."""

    for row in rows:
        if row in baseline.found and BASELINE_PREFIX + row not in servers.dirs:
            servers.spawn(BASELINE_PREFIX + row, ["run", str(baseline.found[row])], row)


def prepare_baselines(servers, benches: dict, bench_feeds, bench, progress) -> dict[str, str]:
    """Prepare each loaded baseline worker at the sizes its new artifact was timed at; its
    cold start goes into `benches` (under its runner name), so the rounds time it. Returns row -> why its
    baseline is not in the rounds."""

    failures: dict[str, str] = {}
    for name in [n for n in servers.dirs if n.startswith(BASELINE_PREFIX)]:
        row = name[len(BASELINE_PREFIX):]
        new = benches.get(row)
        if new is None:  # the new artifact is not timed: nothing to pair its baseline with
            servers.discard(name)
            continue
        progress(f"{row}: cold start of its baseline in its paired worker")
        timed = {s.batch for s in new.sizes if s.status is Status.OK}
        unsupported = {b: "not timed for the new artifact" for b, _ in bench_feeds if b not in timed}
        outcome = serve_artifact(servers, name, [], bench_feeds, unsupported, bench)
        if outcome.failure is not None or outcome.bench is None:
            category, reason = outcome.failure or ("bench-failed", "no cold start")
            failures[row] = f"its baseline's worker failed: {category}: {reason}"
            continue
        benches[name] = outcome.bench
    return failures


def attach(pairing, baseline: BaselineArtifacts | None, failures: Mapping[str, str], rows: Sequence[str]) -> None:
    """Record on the pairing which baseline was timed, and why a row's baseline was not (its gate is then
    cross-run): no artifact, a failed worker, or no ratio measured."""
    if baseline is None or pairing is None:
        return
    pairing.baseline = str(baseline.directory)
    why = {**baseline.missing, **failures, **pairing.baseline_failures}
    paired = {r.faster for r in pairing.baseline_ratios} | {r.slower for r in pairing.baseline_ratios}
    for row in rows:
        if row not in paired and row not in why:
            why[row] = ("not timed in rounds: " + pairing.reason) if pairing.mode != "paired" else "no latency to pair"
    pairing.baseline_failures = {row: why[row] for row in rows if row in why and row not in paired}


def gate_inputs(results_json: str | os.PathLike | None, artifacts: str | os.PathLike | None, rows: Sequence[str],
                out_dir: str | os.PathLike | None):
    """What a compare's gate judges against, from `--baseline RESULTS_JSON` and `--baseline-artifacts DIR`:
    (the baseline's results or None, the artifact directory to time beside the new ones or None, one line
    saying which comparison latency rests on, or "" when there is no baseline)."""

    if artifacts is not None:
        find_baseline(artifacts, rows, out_dir)  # a user mistake is refused before the target is built
        beside = Path(artifacts) / "results.json"
        path = Path(results_json) if results_json is not None else beside if beside.is_file() else None
        base = load_results(path) if path is not None else None
        return base, Path(artifacts), (f"baseline: the artifacts in {artifacts} are timed in the same rounds as the "
                                       "new ones (paired A/B)" + ("" if base is not None else
                                                                  "; no results.json there: latency is all it judges"))
    if results_json is None:
        return None, None, ""
    base = load_results(Path(results_json))
    directory, line = beside_results(results_json, rows, out_dir)
    return base, directory, line
