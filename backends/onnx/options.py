"""ONNX's own options, as a frozen dataclass (`--backend-option onnx.NAME=VALUE`)."""

from __future__ import annotations

from dataclasses import dataclass

from multiexport.sdk import option

from .routes import ROUTES

# Opset 21 (ONNX 1.16, March 2024) is the newest opset ONNX released with IR version 10, the IR
# version jax2onnx writes whatever the opset (its "ORT-safe" choice): the pair stays consistent and
# older deployed runtimes accept it, and it still has Gelu (20) and LayerNormalization (17).
OPSET = 21
# Protobuf cannot serialize a message of 2 GiB or more: past this many bytes of tensors they go to
# model.onnx.data (64 MiB of headroom for the graph itself).
EXTERNAL_DATA_THRESHOLD_BYTES = 2**31 - 2**26


@dataclass(frozen=True)
class OnnxOptions:
    """ONNX's options.

    route: which converter writes the graph (jax2onnx, stablehlo, or auto: jax2onnx, then stablehlo).
    opset: the ONNX opset to target.
    external_data_threshold: bytes of tensors past which they go to model.onnx.data.
    """

    route: str = option("auto", "which converter writes the graph: jax2onnx (from the jaxpr), stablehlo "
                        "(multiexport's own, from the exported StableHLO module), or auto (jax2onnx, and stablehlo when "
                        "jax2onnx fails to convert or its graph fails to validate or run once)", choices=ROUTES)
    opset: int = option(OPSET, "ONNX opset to target (jax2onnx writes IR version 10 whatever the opset)", minimum=17)
    external_data_threshold: int = option(
        EXTERNAL_DATA_THRESHOLD_BYTES,
        "bytes of tensors past which they always go to model.onnx.data (protobuf cannot hold 2 GiB)", minimum=0)
