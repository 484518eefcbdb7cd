"""`multiexport locate`: where parity breaks (multiexport/locate/), from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import MultiexportError, UsageError
from ..exporting.precision import split_variant
from ..exporting.registry import backend_class
from ..files.paths import safe_component
from ..leaves import load_target as load_named_target
from ..locate import LocateConfig, LocateResult, locate
from ..measure.inputs import parse_dim_sizes, parse_val_ranges
from ..measure.tolerance import parse_tolerances
from ..preflight import check_jax_environment
from ..report.render import write_reports
from ..results import Results


def split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def artifacts_of(specs: list[str], backends: list[str]) -> dict[str, Path]:
    """`["onnx=dir", "dir"]` -> {backend: Path}: a bare DIR belongs to the only backend named."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if sep and name in backends:
            backend, where = name, Path(rest)
        elif len(backends) == 1:
            backend, where = backends[0], Path(spec)
        else:
            raise UsageError(f"Option '--artifact {spec}' | names no backend, expected BACKEND=DIR with one of "
                             f"{', '.join(backends)}")
        if not (where / "manifest.json").is_file():
            raise UsageError(f"Option '--artifact {spec}' | '{where}' has no manifest.json, expected an artifact "
                             "directory written by 'multiexport export'")
        out[backend] = where
    return out


def options_of(specs: list[str], backends: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        backend, dot, name = key.partition(".")
        if not sep or not dot or backend not in backends:
            raise UsageError(f"Option '--backend-option {spec}' | expected BACKEND.NAME=VALUE with BACKEND one of "
                             f"{', '.join(backends)}")
        out.setdefault(backend, {})[name] = value
    return out


def cmd_locate(args) -> int:
    if args.out_dir is None:
        raise UsageError("Option '--out-dir' | missing, expected the directory for locate.json: --out-dir DIR")
    if args.cone < 0 or args.trials < 0:
        raise UsageError("Option '--cone'/'--trials' | got a negative number, expected >= 0")
    backends = split(args.backend)
    for name in backends:
        backend_class(name)  # an unknown name is a usage error before any work
    config = LocateConfig(backends=tuple(backends), out_dir=args.out_dir,
                          artifacts=artifacts_of(args.artifact, backends), leaf=args.leaf, trial=args.trial,
                          trials=args.trials, seed=args.seed, tolerances=parse_tolerances(args.tolerance),
                          cone=args.cone, reduce=args.reduce, backend_options=options_of(args.backend_option, backends),
                          val_ranges=parse_val_ranges(args.val_range), dim_sizes=parse_dim_sizes(args.dim_sizes))
    check_jax_environment()
    target = load_named_target(args.target)
    result = locate(target, config, say=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print("\n".join(summary_lines(result)))
        print(f"locate.json: {args.out_dir / 'locate.json'}")
    return 1 if any(b.culprit is not None and b.failing for b in result.backends) else 0


def summary_lines(result: LocateResult) -> list[str]:
    """The terminal summary: per backend its verdict, the located op, the cone."""
    lines = [f"locate {result.target}, trial '{result.trial}': reference: {result.reference}"]
    for b in result.backends:
        lines.append(f"{b.backend}:")
        if b.error:
            lines.append(f"  could not be examined: {b.error}")
            continue
        lines.append(f"  {b.outputs}")
        lines.append(f"  {b.mapped} of {b.total} op results mapped: {b.how}" + (" [re-compiled]" if b.recompiled else ""))
        for reason, count in sorted(b.unmapped.items(), key=lambda kv: -kv[1])[:3]:
            lines.append(f"    {count} unmapped: {reason}")
        if b.first is not None:
            lines.append(f"  first divergence: {b.first.line()}")
            if b.first.replay:
                lines.append(f"    {b.first.replay.text}")
        if b.culprit is not None and b.culprit is not b.first:
            lines.append(f"  computed differently: {b.culprit.line()}")
            if b.culprit.replay:
                lines.append(f"    {b.culprit.replay.text}")
        for f in b.cone:
            lines.append(f"    then {f.line()}")
        lines.append(f"  verdict: {b.verdict}")
        if b.reduced:
            lines.append(f"  repro: {b.reduced}")
    if result.cross:
        lines.append(result.cross)
    return lines


def compare_locate(results: Results, target, config, progress) -> list[LocateResult]:
    """`compare --locate`: locate on each fp32 row that failed parity, at its first failing trial and leaf, on the
    artifact the compare wrote; then the reports again, with the 'Where parity breaks' section."""
    out = Path(results.out_dir)
    found = []
    for row in results.backends.values():
        if row.parity is None or row.parity.passed or not row.artifact or row.precision != "fp32":
            continue
        failure = row.parity.failures[0]
        base = split_variant(row.backend)[0]
        progress(f"locate: {row.backend} fails on trial '{failure.trial}' ({failure.name}): locating")
        try:
            found.append(locate(target, LocateConfig(
                backends=(base,), out_dir=out / "locate" / safe_component(row.backend),
                artifacts={base: Path(row.artifact)}, trial=failure.trial, leaf=failure.name, trials=config.trials,
                seed=config.seed, tolerances=config.tolerances, val_ranges=config.val_ranges,
                dim_sizes=config.dim_sizes), say=progress))
        except MultiexportError as exc:
            progress(f"locate: {row.backend}: {exc}")
    for result in found:
        print("\n".join(summary_lines(result)))
    if found:
        write_reports(results, out)
    return found
