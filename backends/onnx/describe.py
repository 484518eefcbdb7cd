"""What an ONNX export reports once its graph is written: the route that made it, versions, requirements, warnings
and the format facts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from multiexport.sdk import Signature, dist_version

from .facts import OnnxFacts


@dataclass(frozen=True)
class Routed:
    """The graph one route wrote, and how it came to be.

    made: what `OnnxBackend._write` returned (model, unread inputs, tensor bytes, external, file bytes, repair).
    route: the route that made it (jax2onnx or stablehlo); requested: the route option's value.
    notes: why the route taken is not the first one, for the warnings.
    first_use, first_use_in_process: seconds the jax2onnx plugins' first import took (0 when not used).
    """

    made: tuple[Any, ...]
    route: str
    requested: str
    notes: tuple[str, ...] = ()
    first_use: float = 0.0
    first_use_in_process: float = 0.0


def versions_of(model: Any, route: str) -> dict[str, str]:
    """The converter's and runtime's distributions (jax2onnx only when it wrote the graph), opset and IR version."""
    return {**{d: dist_version(d) for d in ("jax2onnx", "onnx", "onnx-ir", "onnxruntime")
               if d != "jax2onnx" or route == "jax2onnx"},
            "onnx_opset": str(model.opset_imports[""]), "onnx_ir_version": str(model.ir_version)}


def requires_of(model: Any) -> dict[str, Any]:
    """What an ONNX runtime needs to read the graph."""
    opset, ir_version = model.opset_imports[""], model.ir_version
    return {"onnx_opset": opset, "onnx_ir_version": ir_version,
            "note": f"an ONNX runtime that implements opset {opset} (default domain) and reads IR version "
                    f"{ir_version} (ONNX Runtime 1.16 or newer)"}


def warnings_of(signature: Signature, routed: Routed, repaired: str | None, unread: list[str],
                keep_unused: bool) -> list[str]:
    """The route's notes, a repair, inputs kept but unread, and bfloat16 leaves ONNX Runtime's CPU may not run."""
    warnings = [*routed.notes, *([repaired] if repaired else [])]
    if unread and keep_unused:
        warnings.append(f"keep_unused: the graph takes but never reads {', '.join(unread)}")
    if any(leaf.dtype == "bfloat16" for leaf in (*signature.inputs, *signature.outputs)):
        warnings.append("bfloat16 leaves: ONNX Runtime's CPU provider has no bfloat16 kernel for most ops "
                        "(Gemm, Einsum, ...), so this artifact may load only on a provider that has them")
    return warnings


def facts_of(model: Any, signature: Signature, routed: Routed, sizes: tuple[int, int, bool], unread: list[str],
             repaired: str | None, started: float) -> OnnxFacts:
    """The format facts (`sizes`: file bytes, tensor bytes, external data; `started`: perf_counter at the start)."""
    model_bytes, total, external = sizes
    return OnnxFacts(
        weights=("initializers of 1 KiB or more in model.onnx.data (ONNX external data, read by path "
                 "relative to model.onnx)" if external else "initializers inside model.onnx"),
        opset=model.opset_imports[""], ir_version=model.ir_version,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        route=routed.route, route_requested=routed.requested,
        graph_inputs=[v.name for v in model.graph.inputs],
        graph_outputs=[v.name for v in model.graph.outputs],
        unread_inputs=list(unread),
        model_bytes=model_bytes, tensor_bytes=total, external_data=external,
        double_precision=signature.x64,
        validation="onnx.checker.check_model(full_check=True) + strict shape inference with data propagation",
        repaired=repaired,
        export_seconds=round(time.perf_counter() - started, 3),
        jax2onnx_first_use_seconds_in_process=round(routed.first_use_in_process, 3),
    )
