"""What a SavedModel export reports once its files are written: its versions, what a consumer needs, and the
format facts read back from saved_model.pb."""

from __future__ import annotations

from typing import Any

from multiexport.sdk import Signature

from .convert import jax_version, poly_shape
from .facts import SavedModelFacts, StableHLOReserialized, TensorNames
from .tf import SIGNATURE_KEY

LEAF_FUNCTION = "serve_leaves"  # the same function restorable by attribute, positional in leaf order


def versions_of(tf: Any, needed: int, supported: int, written: str, reads: str) -> dict[str, str]:
    """TensorFlow's version, the XlaCallModule versions needed and supported, the StableHLO written and read."""
    return {"tensorflow": tf.__version__, "xla_call_module_version": str(needed),
            "xla_call_module_max_supported": str(supported), "stablehlo_written_by_jax": written,
            "stablehlo_version": reads}


def requires_of(tf: Any, needed: int, written: str, reads: str) -> dict[str, Any]:
    """What a TensorFlow consumer needs to read the artifact."""
    return {"xla_call_module_version": needed, "stablehlo_version": reads,
            "note": (f"a TensorFlow whose XlaCallModule supports serialization version {needed} and reads "
                     f"StableHLO {reads} (TensorFlow {tf.__version__} or newer); jax {jax_version()} wrote "
                     f"StableHLO {written}, re-serialized for {reads} so that this TensorFlow reads it")}


def facts_of(signature: Signature, saved: dict[str, Any], written: str, reads: str, storage: str) -> SavedModelFacts:
    """The format facts: the signature's keys and graph tensors (read back from saved_model.pb), the StableHLO
    re-serialization, and where the weights are (`storage`: external, embedded or none)."""
    by_alias = {leaf.alias: leaf.name for leaf in (*signature.inputs, *signature.outputs)}
    return SavedModelFacts(
        signature=SIGNATURE_KEY,
        tag="serve",
        output_keys={leaf.name: leaf.alias for leaf in signature.outputs},
        # The graph tensors a TF C API caller feeds and fetches, read back from saved_model.pb.
        tensor_names=TensorNames(
            inputs={by_alias[k]: v for k, v in saved["input_tensors"].items()},
            outputs={by_alias[k]: v for k, v in saved["output_tensors"].items()},
        ),
        output_order="TF's StatefulPartitionedCall:<i> follows the output keys sorted, not manifest order",
        leaf_function=f"{LEAF_FUNCTION}(*declared tensors in manifest input order) -> dict by output key",
        platforms=list(saved["platforms"]),
        polymorphic_shapes=[poly_shape(leaf) for leaf in signature.inputs],
        stablehlo=StableHLOReserialized(
            written_by_jax=written, serialized_for=reads,
            why="re-serialized for the StableHLO the installed TensorFlow reads (jax.export writes for its "
                "own 4-week window), then read back by TensorFlow's own reader"),
        weights={
            "external": "tf.Variable per lifted weight (module.weights), saved in variables/ and restored "
                        "with the SavedModel; the XlaCallModule takes them after the leaves",
            "embedded": "constants inside the XlaCallModule's serialized module (saved_model.pb)",
            "none": "no baked weights",
        }[storage],
    )
