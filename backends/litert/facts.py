"""LiteRT's facts in manifest.json's `format`: the signature, its tensors, the ops and how it was converted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multiexport.sdk import FormatFacts


@dataclass(frozen=True)
class LiteTensor:
    """One tensor of the model's signature, as the interpreter reads it.

    index: the tensor index. name: the tensor's name. dtype: its element type (manifest dtype name).
    shape_signature: its shape with -1 for a symbolic dim.
    """

    index: int
    name: str
    dtype: str
    shape_signature: list[int]


@dataclass(frozen=True, kw_only=True)
class LiteRTFacts(FormatFacts):
    """The facts of a LiteRT artifact (model.tflite, converted from this export's SavedModel stage).

    signature: the signature key a consumer calls. signature_keys: how its keys map to leaves, in words.
    supported_ops: the converter's target op sets. select_tf_ops: whether TF (flex) ops were allowed.
    converter: the converter call and TensorFlow release, in words.
    tensors: "inputs"/"outputs" -> leaf -> its tensor.
    ops: the builtin ops the model uses. flex_ops: the TF ops it uses (need the Flex delegate).
    stablehlo: the StableHLO versions the converter read, and how that was checked.
    model_bytes: size of model.tflite. metadata: the flatbuffer's schema version, description, minimum
        runtime and subgraph count.
    delegate: the delegate the runner uses. xnnpack_partitions: XNNPACK partitions at the model's own shapes
        (None when its tensors could not be allocated there).
    weights: where the weights live, in words.
    """

    signature: str
    supported_ops: list[str]
    select_tf_ops: bool
    converter: str
    signature_keys: str
    tensors: dict[str, dict[str, LiteTensor]]
    ops: list[str]
    flex_ops: list[str]
    stablehlo: dict[str, Any]
    model_bytes: int
    metadata: dict[str, Any]
    delegate: str
    xnnpack_partitions: int | None
    weights: str
