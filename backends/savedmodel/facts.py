"""SavedModel's facts in manifest.json's `format`: the signature a TF caller calls, and its graph tensors."""

from __future__ import annotations

from dataclasses import dataclass

from multiexport.sdk import FormatFacts


@dataclass(frozen=True)
class StableHLOReserialized:
    """The StableHLO inside the XlaCallModule: which version jax wrote, which the module holds, and why.

    written_by_jax: what jax.export wrote. serialized_for: what the module holds (what this TensorFlow reads).
    why: the reason for the difference, in words.
    """

    written_by_jax: str
    serialized_for: str
    why: str


@dataclass(frozen=True)
class TensorNames:
    """The graph tensors a TF C API caller feeds and fetches (read back from saved_model.pb).

    inputs, outputs: leaf -> tensor name (`serving_default_x:0`, `StatefulPartitionedCall:0`).
    """

    inputs: dict[str, str]
    outputs: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class SavedModelFacts(FormatFacts):
    """The facts of a TF SavedModel artifact (jax2tf's XlaCallModule in a serving signature).

    signature: the serving signature's key. tag: the MetaGraph tag to load.
    output_keys: output leaf -> its key in the signature's outputs.
    tensor_names: the graph tensors per leaf. output_order: how TF orders the outputs, in words.
    leaf_function: the function taking the leaves positionally, in words.
    platforms: the platforms the module was lowered for.
    polymorphic_shapes: per input leaf, the jax2tf polymorphic shape (None: static).
    stablehlo: the StableHLO versions in the module.
    weights: where the baked weights live, in words.
    """

    signature: str
    tag: str
    output_keys: dict[str, str]
    tensor_names: TensorNames
    output_order: str
    leaf_function: str
    platforms: list[str]
    polymorphic_shapes: list[str | None]
    stablehlo: StableHLOReserialized
    weights: str
