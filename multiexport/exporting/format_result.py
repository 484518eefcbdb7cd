"""What a backend's `_export_impl` returns: `FormatResult`, the facts about the files it wrote, from which the
core builds the manifest (exporting.pipeline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import ExportError, InternalError
from .facts import ExportSetup, FormatFacts
from .precision import PrecisionFacts


@dataclass
class FormatResult:
    """What a backend's `_export_impl` reports about the files it wrote; the core builds the manifest.

    files: role -> path relative to the artifact (`{"model": "model.onnx"}`).
    used: per input leaf, whether the artifact's module reads it.
    params: per input leaf, the format's parameter (an index for XLA/IREE, a name for SavedModel/ONNX),
        None when the artifact does not take the leaf.
    output_params: per output leaf, the format's result (an index or a name).
    versions: producer versions specific to the format (`{"tensorflow": "2.21.0"}`).
    requires: what a consumer needs to read the artifact (`{"stablehlo_version": "1.13.7"}`), with a
        `note` saying which consumer releases qualify.
    format: the format's own facts, an instance of the backend's documented `facts_type` (module_args, ...).
    warnings: facts a user should know about this artifact.
    weights: where this artifact keeps baked weights (see signature.weights).
    declared: leaf name -> dtype the artifact itself declares for each input it takes and each output,
        read back from the written files; the core refuses an artifact whose declared dtypes differ from
        the leaves' (a manifest never states a dtype the artifact does not take).
    platforms: the platforms the artifact runs on (`["cpu"]`, `["cpu", "cuda"]`).
    native: what the format's native consumer needs (see multiexport.native), or None.
    setup: one-time setup this export paid, e.g. ExportSetup(9.8, "jax2onnx plugin import").
    precision: what a reduced-precision export did (exporting.precision), or None for the fp32 artifact.
    """

    files: dict[str, str]
    used: list[bool]
    params: Sequence[int | str | None]
    output_params: list[int | str]
    versions: dict[str, str] = field(default_factory=dict)
    requires: dict[str, Any] = field(default_factory=dict)
    format: FormatFacts = field(default_factory=FormatFacts)
    warnings: list[str] = field(default_factory=list)
    weights: dict[str, Any] = field(default_factory=dict)
    declared: dict[str, str] | None = None
    platforms: list[str] = field(default_factory=lambda: ["cpu"])
    native: dict[str, Any] | None = None
    setup: ExportSetup | None = None
    precision: PrecisionFacts | None = None


def check_result(backend: Any, precision: str, result: FormatResult) -> None:
    """What a backend's `_export_impl` returned, checked before any manifest is written: facts of its declared
    `facts_type` (else InternalError: the backend's bug), and for a reduced `precision` facts that state it and
    name what was reduced; a toolchain that reduced nothing (IREE's f16 demotion of a module without a
    contraction, an fp16 IR with no weights to compress) is `unsupported-precision`, never a float artifact
    under a reduced name. So is one that reduces only stored weights (`PrecisionFacts.weights_only`) of a
    target that stores none: what it reduced are the function's own constants (a 0.5, GELU's coefficients),
    and its outputs were bit-identical to the float artifact's (LiteRT and OpenVINO fp16, measured)."""

    if not isinstance(result.format, backend.facts_type):
        raise InternalError(f"Backend '{backend.name}' | returned format facts of type {type(result.format).__name__}, "
                            f"expected its facts_type {backend.facts_type.__name__}")
    if precision == "fp32":
        return
    if result.precision is None or result.precision.precision != precision:
        stated = result.precision.precision if result.precision else "none"
        raise InternalError(f"Backend '{backend.name}' | made a {precision} artifact whose facts state precision "
                            f"{stated}, expected {precision}")
    if not result.precision.quantized_ops:
        raise ExportError(f"Backend '{backend.name}' | its {precision} toolchain ({result.precision.method}) reduced "
                          f"none of the model's ops, so the artifact would be the float one: no {precision} artifact "
                          "for this target", backend=backend.name, category="unsupported-precision")
    stored = int(result.weights.get("embedded_bytes", 0) or 0) + int(result.weights.get("external_bytes", 0) or 0)
    if result.precision.weights_only and not stored:
        touched = ", ".join(f"{k} x{v}" for k, v in result.precision.quantized_ops.items())
        raise ExportError(f"Backend '{backend.name}' | its {precision} toolchain reduces only the weights stored in "
                          "the model, and this target stores none (all of its weights are input leaves): it reduced "
                          f"only the function's own constants ({touched}) and would compute as the float artifact: no "
                          f"{precision} artifact for this target; close over the weights (bake them into the function) "
                          "to reduce them", backend=backend.name, category="unsupported-precision")

