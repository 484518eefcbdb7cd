"""The regression gate over a whole sweep: `multiexport diff --sweep A B`, `sweep --baseline-sweep`.

Status and parity are gated per model and backend, as `multiexport diff` gates one results.json; latency
per backend over the whole sweep (the geometric mean of its p50 ratios), so one noisy 10 us row on a shared
machine cannot fail a build while a real slowdown of a backend does. A model whose run timed its baseline's
artifacts in the same rounds (paired A/B) is gated on those ratios, at the calibrated paired threshold, and
also cross-run on the baseline's recorded figures at `max_slowdown` (a large slowdown since the baseline that
both sides of the pair share, e.g. a slower runtime, shows only there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError
from ..report.regression import PAIRED_AB, Check, Diff, aggregate_latency, diff_results
from ..results import Results, load_results
from .state import DONE, SweepDir


def diff_many(base: Mapping[str, Results], current: Mapping[str, Results], max_slowdown: float = 1.10,
              max_parity_drift: float = 10.0, paired_slowdown: float | None = None) -> Diff:
    """Gate every model of `current` against the same model of `base` (a model only in one is listed).
    paired_slowdown: the threshold of the paired A/B latency gate (None: the calibrated default)."""
    merged = Diff(max_slowdown=max_slowdown, max_parity_drift=max_parity_drift)
    for name, res in current.items():
        if name not in base:
            merged.checks.append(Check(name, "model", "new", "not in the baseline sweep"))
            continue
        d = diff_results(base[name], res, max_slowdown=max_slowdown, max_parity_drift=max_parity_drift)
        paired = {(c.backend, c.check) for c in d.checks if c.kind == PAIRED_AB}
        if paired:  # the same entries against the recorded figures too, cross-run
            d.checks += [c for c in diff_results(base[name], _unpaired(res), max_slowdown=max_slowdown).checks
                         if (c.backend, c.check) in paired]
        for c in d.checks:
            c.backend = f"{name}/{c.backend}"
        merged.checks += d.checks
    for name in base:
        if name not in current:
            merged.checks.append(Check(name, "model", "missing", "in the baseline sweep, not in this one"))
    return aggregate_latency(merged, max_slowdown, group=lambda backend: backend.split("/", 1)[-1],
                             paired_slowdown=paired_slowdown)


def _unpaired(res: Results) -> Results:
    """`res` without its ratios against the baseline: what its latency says against the recorded figures."""
    import dataclasses

    pairing = res.pairing
    if pairing is None:
        return res
    why = {b: "judged paired A/B on its own line" for b in res.backends}
    return dataclasses.replace(res, pairing=dataclasses.replace(pairing, baseline_ratios=[], baseline_failures=why))


def sweep_results(directory: Path) -> dict[str, Results]:
    """The results.json of every row of a sweep directory that wrote one (legacy schemas read too)."""

    sweep = SweepDir.read(directory)
    out: dict[str, Any] = {}
    for name, outcome in sweep.ended().items():
        if outcome.state == DONE:
            path = sweep.row_file(name, "results.json")
            if not path.is_file():
                raise InputError(f"Sweep '{directory}' | row {name!r} ended done but {path} is missing, expected "
                                 "the sweep's results")
            out[name] = load_results(path, legacy=True)
    return out


def diff_sweeps(base: Path, current: Path, max_slowdown: float = 1.10, max_parity_drift: float = 10.0) -> Diff:
    """The gate between two sweep directories."""
    return diff_many(sweep_results(base), sweep_results(current), max_slowdown, max_parity_drift)
