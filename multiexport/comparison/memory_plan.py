"""The compare's memory plan, decided before any export starts: how many exports may overlap, whether the
paired workers started early must close first (they start again to time), and which backend cannot fit even
alone, so its row says so (`insufficient-memory`) instead of the kernel killing the compare half way.

A pure function of figures (`plan_memory`): the weights' bytes, the memory available now, this process's
resident size, the early workers' resident sizes, and each backend's footprints (what one export worker and
one runner hold at their peak: a multiple of the weights plus a fixed part for the frameworks). The figures
from the machine are read by `available_now` and `rss_of`; `MULTIEXPORT_MEMORY_AVAILABLE` (bytes) replaces
MemAvailable, to plan for a smaller machine than this one (and to test the plan), and
`MULTIEXPORT_MEMORY_FOOTPRINT` (`NAME=FACTORx+GIB`, comma-separated) replaces a backend's footprint where
its converter was measured to need more than the default.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import MultiexportError, UsageError
from ..exporting.precision import split_variant
from ..exporting.registry import backend_class
from ..measure.pairing import PER_WORKER_BYTES, available_memory
from ..system.descendants import status_bytes

if TYPE_CHECKING:
    from ..leaves import Signature

__all__ = ["AVAILABLE_ENV", "EXPORT", "FOOTPRINT_ENV", "REFERENCE", "RUNNER", "Footprint", "Footprints",
           "MemoryPlan", "available_now", "footprints", "plan_memory", "rss_of", "weight_bytes"]

AVAILABLE_ENV = "MULTIEXPORT_MEMORY_AVAILABLE"
MEASURED = "MemAvailable"  # `available_now`'s source when it measured (not the figure AVAILABLE_ENV gives)
FOOTPRINT_ENV = "MULTIEXPORT_MEMORY_FOOTPRINT"
GIB = 1 << 30


@dataclass(frozen=True)
class Footprint:
    """What one process is expected to hold at its peak: `factor` times the weights plus `fixed` bytes.

    factor: copies of the weights it holds at once (a converter: the traced constants, its own IR, the file
        it writes; a runner: the file read and the runtime's tensors).
    fixed: the frameworks it imports, whatever the model's size.
    """

    factor: float
    fixed: int

    def bytes(self, weights: int) -> int:
        return int(self.factor * weights) + self.fixed

    def says(self, weights: int) -> str:
        """'3x the 4.0 GiB weights + 1.0 GiB'."""
        return f"{self.factor:g}x the {_size(weights)} weights + {_size(self.fixed)}"


# Defaults: an export worker ~3x the weights + 1 GiB (benchmarks/scale.py measured up to 2.7x at 350 M
# parameters), a runner ~2x + a runtime's own footprint, the jax.jit reference worker (the target built,
# then compiled with its weights lifted) ~2.5x + a runtime (measured: 9.99 GB peak for the 1 B decoder's
# 4.06 GB of weights, benchmarks/llm.py --per-format).
EXPORT = Footprint(3.0, GIB)
RUNNER = Footprint(2.0, PER_WORKER_BYTES)
REFERENCE = Footprint(2.5, PER_WORKER_BYTES)


@dataclass(frozen=True)
class Footprints:
    """One backend's footprints.

    export: its export worker's (with the stage it builds on, in the same worker).
    runner: its run worker's (the artifact loaded from disk).
    """

    export: Footprint = EXPORT
    runner: Footprint = RUNNER


@dataclass(frozen=True)
class MemoryPlan:
    """What the compare does about memory, decided before any export.

    weights: the target's weight bytes (baked and input leaves).
    available: memory available to new processes when planned, in bytes (None: unknown; nothing is limited).
    source: where `available` came from ("MemAvailable" or the environment variable that replaced it).
    parent_rss: this process's resident size then (already outside `available`).
    early_rss: the resident size of each paired worker started early (name -> bytes; "jax": the reference).
    export_need: each backend's export worker's expected peak, in bytes.
    runner_need: each backend's runner's expected peak, in bytes.
    exports_at_once: how many export workers memory allows at once (at least 1 while any may run).
    close_early: whether the early workers close before the exports (only then does the largest export fit);
        the timing starts them again.
    paired_need: every runner and the reference loaded at once, in bytes (the timing plan decides again with
        the artifacts' real sizes).
    sequential: whether `paired_need` exceeds what is available with the early workers closed.
    refused: backend -> the one line saying what it needs and what is available, for each backend that
        cannot fit even alone: it is not started.
    """

    weights: int
    available: int | None
    source: str
    parent_rss: int
    early_rss: Mapping[str, int]
    export_need: Mapping[str, int]
    runner_need: Mapping[str, int]
    exports_at_once: int
    close_early: bool
    paired_need: int
    sequential: bool
    refused: Mapping[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """The plan as one progress line."""
        if self.available is None:
            return "memory plan: available memory unknown, nothing limited"
        kept = [n for n in self.export_need if n not in self.refused]
        export = max((self.export_need[n] for n in kept), default=0)
        runner = max((self.runner_need[n] for n in kept), default=0)
        line = (f"memory plan: {_size(self.weights)} of weights, {_size(self.available)} available "
                f"({self.source}; this process holds {_size(self.parent_rss)})")
        if kept:
            line += (f"; an export needs ~{_size(export)}, a runner ~{_size(runner)}: "
                     f"{self.exports_at_once} export(s) at a time")
        if self.close_early:
            line += "; the early workers close first (each starts again to time)"
        if self.refused:
            line += f"; not started: {', '.join(self.refused)}"
        return line

    def to_json(self) -> dict[str, Any]:
        return {"weights_bytes": self.weights, "available_bytes": self.available, "source": self.source,
                "parent_rss_bytes": self.parent_rss, "early_rss_bytes": dict(self.early_rss),
                "export_need_bytes": dict(self.export_need), "runner_need_bytes": dict(self.runner_need),
                "exports_at_once": self.exports_at_once, "close_early": self.close_early,
                "paired_need_bytes": self.paired_need, "sequential": self.sequential, "refused": dict(self.refused)}


def plan_memory(weights: int, available: int | None, parent_rss: int, groups: Sequence[Sequence[str]],
                early: Mapping[str, int], footprint: Mapping[str, Footprints], source: str = MEASURED
                ) -> MemoryPlan:
    """The plan for exporting `groups` (one export worker each: a stage then what builds on it) of a target
    with `weights` bytes, `available` bytes free now, beside the live early workers `early` (name -> RSS).

    A backend whose export or runner alone needs more than is available with every early worker closed is
    refused. The others export as many at once as fit beside the early workers (the reference's still to
    grow to its footprint), else with them closed."""
    names = [n for g in groups for n in g]
    specs = {n: footprint.get(n, Footprints()) for n in names}
    export_need = {n: specs[n].export.bytes(weights) for n in names}
    runner_need = {n: specs[n].runner.bytes(weights) for n in names}
    reference = REFERENCE.bytes(weights)
    if available is None:
        return MemoryPlan(weights, None, source, parent_rss, dict(early), export_need, runner_need,
                          max(1, len(groups)), False, sum(runner_need.values()) + reference, False)
    free_closed = available + sum(early.values())
    free_kept = available - (max(0, reference - early["jax"]) if "jax" in early else 0)
    refused = {}
    for name in names:
        need = max(export_need[name], runner_need[name])
        if need > free_closed:
            refused[name] = _refusal(name, weights, specs[name], export_need[name] >= runner_need[name],
                                     free_closed, parent_rss)
    kept = [[n for n in g if n not in refused] for g in groups]
    kept = [g for g in kept if g]
    worst = max((max(export_need[n] for n in g) for g in kept), default=0)
    close = bool(early) and bool(kept) and worst > free_kept
    free = free_closed if close else free_kept
    at_once = max(1, min(len(kept), free // max(worst, 1))) if kept else 0
    paired = sum(runner_need[n] for g in kept for n in g) + reference
    return MemoryPlan(weights, available, source, parent_rss, dict(early), export_need, runner_need, at_once,
                      close, paired, paired > free_closed, refused)


def _refusal(name: str, weights: int, spec: Footprints, export: bool, free: int, parent_rss: int) -> str:
    """The refused row's line: what it needs, what is available, what to do."""
    chosen = spec.export if export else spec.runner
    need = chosen.bytes(weights)
    return (f"{name} | {'export' if export else 'its runner'} needs ~{_size(need)} ({chosen.says(weights)}), "
            f"{_size(free)} available to it (this compare's own process holds {_size(parent_rss)}): not started; "
            f"free {_size(need - free)} more memory, or compare on a machine with more")


def weight_bytes(sig: Signature) -> int:
    """The target's weights in bytes, closed over and as input leaves (a `Signature`'s `weights` facts): what
    every process that holds the target holds of it."""
    return int(sig.weights.get("baked_bytes", 0)) + int(sig.weights.get("input_bytes", 0))


def available_now() -> tuple[int | None, str]:
    """(memory available to new processes now, where the figure comes from): `MULTIEXPORT_MEMORY_AVAILABLE`
    when set, else the kernel's MemAvailable."""
    given = os.environ.get(AVAILABLE_ENV)
    if given is None or not given.strip():
        return available_memory(), MEASURED
    try:
        value = int(given)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"${AVAILABLE_ENV} | got {given!r}, expected a number of bytes (e.g. 8589934592 for 8 GiB)")
    return value, f"${AVAILABLE_ENV}"


def footprints(names: Sequence[str]) -> dict[str, Footprints]:
    """Each backend's footprints: what `MULTIEXPORT_MEMORY_FOOTPRINT` says for its export (`openvino=4x+1.5`:
    4x the weights + 1.5 GiB), else what its backend declares (`export_memory`, `runner_memory`: (factor,
    GiB), measured by the backend's owner), else the defaults."""
    given = os.environ.get(FOOTPRINT_ENV, "").strip()
    result = {n: _declared(n) for n in names}
    for item in filter(None, (part.strip() for part in given.split(","))):
        match = re.fullmatch(r"([\w.@-]+)=([0-9.]+)x\+([0-9.]+)", item)
        factor, fixed = (_number(match.group(2)), _number(match.group(3))) if match else (math.nan, math.nan)
        if match is None or not (math.isfinite(factor) and math.isfinite(fixed)):
            raise UsageError(f"${FOOTPRINT_ENV} | got {item!r}, expected NAME=FACTORx+GIB (e.g. openvino=4x+1.5)")
        try:
            backend_class(split_variant(match.group(1))[0])
        except MultiexportError:  # a misspelt name would leave the footprint it meant to set at the default
            raise UsageError(f"${FOOTPRINT_ENV} | got {item!r}: '{match.group(1)}' names no backend, expected "
                             "NAME=FACTORx+GIB with NAME a backend (e.g. openvino=4x+1.5)") from None
        if match.group(1) in result:
            result[match.group(1)] = replace(result[match.group(1)], export=Footprint(factor, int(fixed * GIB)))
    return result


def _number(text: str) -> float:
    """A decimal the footprint's pattern let through ("1.2.3" matches [0-9.]+), else NaN (refused above)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _declared(name: str) -> Footprints:
    """The footprints `name`'s backend class declares, each where it does (a (factor, GiB) pair), else the
    defaults'."""
    try:
        cls = backend_class(split_variant(name)[0])
    except MultiexportError:
        return Footprints()
    export, runner = getattr(cls, "export_memory", None), getattr(cls, "runner_memory", None)
    return Footprints(export=_pair(export) or EXPORT, runner=_pair(runner) or RUNNER)


def _pair(value: object) -> Footprint | None:
    """A declared (factor, GiB) pair as a footprint, else None."""
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return Footprint(float(value[0]), int(value[1] * GIB))
    return None


def rss_of(pid: int) -> int:
    """A live process's resident size in bytes (0 when it is gone or the system cannot say)."""
    return status_bytes(pid, "VmRSS") or 0


def _size(value: int) -> str:
    """A size in GiB, one decimal; under 1 GiB in MiB ('0.0 GiB' would hide a model's 40 MiB of weights)."""
    if abs(value) >= GIB:
        return f"{value / GIB:.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB" if abs(value) >= 1 << 20 else f"{value / 1024:.0f} KiB"
