"""XLA's facts in manifest.json's `format`: how the module's `main` is called, and where its weights are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multiexport.sdk import FormatFacts, ModuleArg


@dataclass(frozen=True, kw_only=True)
class XlaFacts(FormatFacts):
    """The facts of an XLA artifact (model.jax_exported and model.mlirbc).

    weight_copies: how many copies of the baked weights are on disk (1 lifted, 2 embedded in both files, 0).
    weights: where the baked weights live, in words.
    platforms: the platforms the module was lowered for (`cpu`, `cuda`).
    module_args: every positional argument of `main`, in order (platform index, tokens, leaves, weights):
        what a PJRT caller passes.
    module_results: the output leaves `main` returns, in order.
    nr_devices: the devices the module was exported for.
    uses_shape_polymorphism: whether the module has symbolic dims to refine.
    module_attributes: the module's MLIR attributes, as jax.export wrote them.
    aliases: input leaf -> the output leaf the module aliases it to (a target jitted with donate_argnums /
        donate_argnames, e.g. a KV cache): PJRT may update that input's buffer in place when the caller donates
        it (pjrt_run --carry); a caller that reuses the input marks it non-donatable and XLA copies instead.
    """

    weight_copies: int
    weights: str
    platforms: list[str]
    module_args: list[ModuleArg]
    module_results: list[str]
    nr_devices: int
    uses_shape_polymorphism: bool
    module_attributes: dict[str, Any]
    aliases: dict[str, str] = field(default_factory=dict)
