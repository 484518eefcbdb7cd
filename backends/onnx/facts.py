"""ONNX's facts in manifest.json's `format`: the graph's names, opset and route, and how it was checked."""

from __future__ import annotations

from dataclasses import dataclass

from multiexport.sdk import FormatFacts


@dataclass(frozen=True, kw_only=True)
class OnnxFacts(FormatFacts):
    """The facts of an ONNX artifact (model.onnx, and model.onnx.data when its initializers are external).

    weights: where the initializers live, in words.
    opset, ir_version: the default domain's opset and the model's IR version.
    producer: the producer name and version the model records.
    route: which converter made the graph: `jax2onnx` (from the jaxpr) or `stablehlo` (multiexport's own,
        from the exported module). route_requested: what the `route` option asked for (`auto`, ...).
    graph_inputs, graph_outputs: the graph's input and output names, in order.
    unread_inputs: leaves the graph never reads (dropped from it, or kept as inputs under keep_unused).
    model_bytes: size of model.onnx. tensor_bytes: bytes of all initializers. external_data: whether they
        are in model.onnx.data.
    double_precision: whether the model needs 64-bit types.
    validation: the checks the written model passed.
    repaired: what was repaired in the converter's output and why, or None.
    export_seconds: the conversion's wall time.
    jax2onnx_first_use_seconds_in_process: what jax2onnx's one-time plugin import cost the process when
        this export paid it (0 otherwise).
    """

    weights: str
    opset: int
    ir_version: int
    producer: str
    route: str
    route_requested: str
    graph_inputs: list[str]
    graph_outputs: list[str]
    unread_inputs: list[str]
    model_bytes: int
    tensor_bytes: int
    external_data: bool
    double_precision: bool
    validation: str
    repaired: str | None
    export_seconds: float
    jax2onnx_first_use_seconds_in_process: float
