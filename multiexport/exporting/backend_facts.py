"""What a backend is, declared as data: its facts in one frozen record, its presentation in another.

A backend class sets `spec = BackendFacts(...)` and `presentation = Presentation(...)`; `Backend.__init_subclass__`
(`declare`) reads them into the class attributes the core has always read (`backend.name`, `cls.order`), and
builds the records from those attributes for a backend that still sets them one by one (or a subclass that
overrides one, as the tests' twins do), so the two always agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .facts import FormatFacts
from .options import NoOptions, declared_options


@dataclass(frozen=True, kw_only=True)
class BackendFacts:
    """A backend's facts: what the core needs to know to export, load and list it.

    name: the CLI flag and report key.
    requires: importable modules the backend needs, checked without importing them.
    extra: the pip extra that installs them.
    distributions: the pip distributions whose versions say what wrote and ran this format's artifacts (recorded
        in every compare's environment when installed, and listed in pyproject.toml under `extra`).
    builds_on: the backend whose export this one starts from (handed to the export hook as `ExportJob.stage`).
    runtime_modules: what a runner imports before it can load anything (a paired worker imports them while
        other work runs, so its timed load is the artifact's load alone).
    carries_code: whether an artifact can run code beyond the model's math when loaded: then artifacts from
        others are refused unless trusted, and the backend implements `_check_untrusted_impl`.
    weight_storage: where the format can keep baked weights: "embedded" in its model file and/or "external".
    static_fallback: when the export of a symbolic signature fails, the driver exports one model per requested
        size instead; False for a format that keeps every symbolic dim itself.
    facts_type: the dataclass of the format's own facts (manifest.json's `format`).
    options_type: the frozen dataclass of the backend's own options (`options.option` fields); the export hook
        gets an instance as `ExportJob.backend_options`.
    precisions: the precisions the export hook makes ("fp32" always).
    precision_gaps: precision -> why this backend has no such variant (reports show it).
    export_memory: the export worker's peak resident memory as (factor, GiB): ~factor x the weights + GiB, what
        the compare's memory plan (comparison/memory_plan.py) counts before starting it; None: the plan's default.
        A backend that `builds_on` another counts cumulatively (the stage's worker exports both).
    runner_memory: the run worker's peak the same way; None: the plan's default.
    export_cost: a typical export's seconds relative to the others' (framework import, conversion, compile;
        the zoo's figures in benchmarks/README.md "Compare time"): the compare starts the costliest exports
        first and hands out the rest costliest first (comparison/exports.py `export_groups`).
    needs_target: whether the export needs the target's function itself, not only the StableHLO modules a
        compare hands its export workers (exporting/handoff.py); `Backend.needs_target_for` may say it per
        options. A worker that exports only what needs no target never builds it.
    export_modules: the frameworks the export imports (top-level modules): where the target already imports
        them (keras-hub imports TensorFlow), the compare plans the export into the worker that builds the target.
    """

    name: str
    requires: tuple[str, ...] = ()
    extra: str = ""
    distributions: tuple[str, ...] = ()
    builds_on: str | None = None
    runtime_modules: tuple[str, ...] = ()
    carries_code: bool = False
    weight_storage: tuple[str, ...] = ("embedded", "external")
    static_fallback: bool = True
    facts_type: type[FormatFacts] = FormatFacts
    options_type: type = NoOptions
    precisions: tuple[str, ...] = ("fp32",)
    precision_gaps: Mapping[str, str] = field(default_factory=dict)
    export_memory: tuple[float, float] | None = None
    runner_memory: tuple[float, float] | None = None
    export_cost: float = 1.0
    needs_target: bool = True
    export_modules: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Presentation:
    """How reports and help texts show a backend.

    summary: what the artifact is, in a few words.
    color: the backend's colour in every chart.
    order: position in listings (lower first).
    """

    summary: str = ""
    color: str = "#7f7f7f"
    order: int = 100


def declare(cls: Any) -> None:
    """Make `cls`'s records and class attributes agree: records it declares itself are read into the
    attributes; otherwise the records are built from the attributes (inherited or overridden)."""
    for record in (BackendFacts, Presentation):
        key = "spec" if record is BackendFacts else "presentation"
        names = [f.name for f in fields(record)]
        if key in vars(cls):
            for name in names:
                setattr(cls, name, getattr(vars(cls)[key], name))
        else:
            setattr(cls, key, record(**{name: getattr(cls, name) for name in names}))
    if cls.options_type is not NoOptions and "options" not in vars(cls):
        cls.options = declared_options(cls.options_type)
