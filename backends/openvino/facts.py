"""OpenVINO's facts in manifest.json's `format`: the model it reads, and how the CPU plugin compiles it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multiexport.sdk import FormatFacts


@dataclass(frozen=True, kw_only=True)
class OpenVINOFacts(FormatFacts):
    """The facts of an OpenVINO artifact (the ONNX stage's model.onnx, read by OpenVINO's ONNX frontend).

    model_source: which file OpenVINO reads and how it was made, in words.
    onnx_route: the ONNX route that wrote the file (`jax2onnx` or `stablehlo`); onnx_route_requested: what
        the `onnx_route` option asked for. onnx_opset: the file's opset.
    why_not_ir: why the artifact keeps the ONNX file rather than OpenVINO's IR (measured).
    ir_command: the command that makes the IR, for a consumer who wants it.
    device: the OpenVINO device the runner compiles for (`CPU`).
    compile_config: the properties passed to compile_model.
    precision: the inference precision and how it is checked.
    performance_hint: the performance hint used, and why.
    input_shapes: input leaf -> the partial shape OpenVINO read.
    compile_cache: the compile times measured without, filling and with the model cache, or None when not
        measured (`measure_cache` off, or the model too large).
    cpu: the CPU plugin's name, capabilities and build.
    export_check: how the export checked the file in OpenVINO (compiled and run once, or read only past a size,
        and why: probe.py).
    """

    model_source: str
    onnx_route: str | None
    onnx_route_requested: str
    why_not_ir: str
    ir_command: str
    device: str
    compile_config: dict[str, Any]
    precision: str
    performance_hint: str
    input_shapes: dict[str, str]
    compile_cache: dict[str, Any] | None
    cpu: dict[str, Any]
    onnx_opset: int | None
    export_check: str = ""
