"""onnx-node's facts in manifest.json's `format`: the ONNX file Node.js loads, and the runtime that loads it."""

from __future__ import annotations

from dataclasses import dataclass

from multiexport.sdk import FormatFacts


@dataclass(frozen=True, kw_only=True)
class OnnxNodeFacts(FormatFacts):
    """The facts of an onnx-node artifact (the ONNX stage's model.onnx, run by onnxruntime-node in Node.js).

    model_source: which file is loaded and how it was made, in words.
    onnx_route: the ONNX route that wrote the file. onnx_opset: its opset.
    runtime: the npm package and version the artifact was checked with (`onnxruntime-node 1.31.1`).
    node: the Node.js version it was checked with.
    graph_inputs, graph_outputs: the ONNX graph's input and output names, the session's feed and fetch keys.
    """

    model_source: str
    onnx_route: str | None
    onnx_opset: int | None
    runtime: str
    node: str
    graph_inputs: list[str]
    graph_outputs: list[str]
