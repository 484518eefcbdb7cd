"""onnx-web's facts in manifest.json's `format`: the ONNX file the page loads, and the runtime that loads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multiexport.sdk import FormatFacts


@dataclass(frozen=True, kw_only=True)
class OnnxWebFacts(FormatFacts):
    """The facts of an onnx-web artifact (the ONNX stage's model.onnx, run by onnxruntime-web in a browser).

    model_source: which file the page loads and how it was made, in words.
    onnx_route: the ONNX route that wrote the file (`jax2onnx` or `stablehlo`). onnx_opset: its opset.
    runtime: the npm package and version the artifact was checked with (`onnxruntime-web 1.31.1`).
    execution_providers: the providers the runner can ask for (`wasm`, `webgpu`) and what each needs.
    graph_inputs, graph_outputs: the ONNX graph's input and output names, the page's feed and fetch keys.
    model_bytes: model.onnx plus its external data: what the page fetches and copies into wasm memory.
    wasm_memory_limit_bytes: the 32-bit wasm address space the model, its copy and the activations share.
    dtypes: how each leaf dtype crosses into the page (int64 as BigInt64Array, float16 as 16-bit words).
    webgpu: whether headless Chromium offered a WebGPU adapter when this was exported ({"ok", "reason"}: the
        adapter, e.g. SwiftShader's software one, or why none), so a report can say why it has no WebGPU row.
    """

    model_source: str
    onnx_route: str | None
    onnx_opset: int | None
    runtime: str
    execution_providers: dict[str, str]
    graph_inputs: list[str]
    graph_outputs: list[str]
    model_bytes: int
    wasm_memory_limit_bytes: int
    dtypes: dict[str, str]
    webgpu: dict[str, Any] | None = None
