"""A format's own facts in manifest.json (its `format` object), typed: each backend declares a dataclass of them.

Why: `format` is where a backend records what only it knows (XLA's module arguments, ONNX's opset and
route, IREE's compile flags and driver). Declared as a frozen dataclass, each fact is named, typed and
documented once, in the backend; the export builds it (so a misspelt or missing fact is an error where it
is written), the manifest holds its JSON, and `Backend.facts(manifest)` reads it back through the codec
results.json and the worker messages use, so a consumer gets typed facts or one line naming the field.
Keys a newer multiexport added are ignored when read; a fact that is missing or of the wrong type is not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import ArtifactError
from ..results.schema import from_data, to_data

F = TypeVar("F", bound="FormatFacts")

# The key of a static-sizes artifact's own facts (one model per size; see exporting.static_fallback).
STATIC_FALLBACK_KEY = "static_fallback"


@dataclass(frozen=True)
class StageMade:
    """How the stage an artifact builds on was made (LiteRT on the SavedModel, OpenVINO on the ONNX file).

    backend: the stage's backend. made: reused beside this export, or exported for this artifact.
    reused_from: the reused stage artifact's directory, relative to this artifact's parent; None when the
        stage was exported for this artifact.
    """

    backend: str
    made: str
    reused_from: str | None = None


@dataclass(frozen=True)
class ExportSetup:
    """One-time setup an export paid in its process (e.g. jax2onnx's plugin import).

    seconds: its wall time. what: what it was, in words.
    """

    seconds: float
    what: str


@dataclass(frozen=True, kw_only=True)
class FormatFacts:
    """The facts every format's `format` may hold, set by the core, not by the backend; a backend's own
    facts subclass it (keyword-only, so the core's defaults come first without ordering the backend's).

    stage: how the stage this artifact builds on was made, or None when it builds on none.
    setup: one-time setup the export paid in its process, or None.
    """

    stage: StageMade | None = None
    setup: ExportSetup | None = None

    def to_json(self) -> dict[str, Any]:
        """The facts as manifest.json's `format` object (None-valued core facts left out)."""
        data = to_data(self)
        for key in ("stage", "setup"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @classmethod
    def from_json(cls: type[F], data: Any, where: str) -> F:
        """These facts from a manifest's `format`; ArtifactError naming the field when one is missing or of
        the wrong type (`where`: e.g. "Artifact 'out/onnx/manifest.json'")."""
        return from_data(cls, data, f"{where} | format", ArtifactError)

    def with_core(self: F, stage: StageMade | None, setup: ExportSetup | None) -> F:
        """These facts with the core's own (stage, setup) set."""
        return dataclasses.replace(self, stage=stage, setup=setup)


@dataclass(frozen=True)
class FallbackFacts:
    """What a static-sizes artifact is (format.static_fallback): one complete model per size.

    why: why the symbolic artifact was not kept. category: the row category it failed with.
    models: size key ("b=1") -> the sub-artifact directory, relative to the artifact.
    not_built: size key -> why that size has no model. note: how a consumer picks a model, in words.
    """

    why: str
    category: str
    models: dict[str, str]
    not_built: dict[str, str] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class StaticSizesFacts(FormatFacts):
    """The `format` of a static-sizes artifact, whatever its backend.

    static_fallback: the models per size and why. model_format: the first model's own `format`, as its
        backend wrote it (each model's manifest.json holds its facts; read them there, typed).
    """

    static_fallback: FallbackFacts
    model_format: dict[str, Any] = field(default_factory=dict)
