"""What a LiteRT export reports once model.tflite is written: its signature checked and read back, warnings,
versions, requirements and the format facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from multiexport.sdk import Manifest, Signature, dist_version, option

from .convert import SIGNATURE_KEY, ConversionFailed
from .facts import LiteRTFacts, LiteTensor
from .runner import signature_of


@dataclass(frozen=True)
class LiteRTOptions:
    """LiteRT's options (`--backend-option litert.NAME=VALUE`).

    select_tf_ops: also allow TensorFlow kernels (SELECT_TF_OPS, the Flex delegate).
    """

    select_tf_ops: bool = option(False, "also allow SELECT_TF_OPS (TensorFlow kernels via the Flex delegate): the "
                                 "ai_edge_litert interpreter cannot run them, so only a runtime with Flex linked in can "
                                 "use such a model")


def signature_tensors(path: str, signature: Signature, params: list[Any], output_params: list[str],
                      stablehlo: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Role -> leaf name -> the tensor the signature of the model at `path` binds it to; ConversionFailed when the
    signature's keys are not the leaves' aliases. Read from an interpreter without the default delegates, never
    allocated: the weights stay in the mapped file, unread and unpacked."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_path=path, num_threads=1,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    sig = signature_of(interpreter)
    want = {"inputs": sorted(p for p in params if p is not None), "outputs": sorted(output_params)}
    got = {role: sorted(sig[role]) if sig else None for role in ("inputs", "outputs")}
    if sig is None or got != want:
        raise ConversionFailed("convert", f"the converted model's {SIGNATURE_KEY} signature has {got}, expected "
                               f"the leaves' aliases {want}", [], None, stablehlo["converter_stablehlo"])
    by_alias = {leaf.alias: leaf.name for leaf in (*signature.inputs, *signature.outputs)}
    return {role: {by_alias[k]: tensor_of(interpreter, i) for k, i in sig[role].items()} for role in sig}


def tensor_of(interpreter: Any, index: int) -> dict[str, Any]:
    """One signature tensor: its index, name, dtype and shape signature (-1: dynamic)."""
    details = interpreter._get_tensor_details(index, 0)
    return {"index": int(index), "name": details["name"], "dtype": np.dtype(details["dtype"]).name,
            "shape_signature": [int(d) for d in details["shape_signature"]]}


def warnings_of(signature: Signature, flex: list[str], external_weights: str) -> list[str]:
    """Flex ops, symbolic dims (several XNNPACK partitions) and external weights a .tflite cannot keep apart."""
    warnings = []
    if flex:
        warnings.append(f"the model uses TensorFlow (flex) ops {', '.join(flex)}: a LiteRT runtime with the Flex "
                        "delegate linked in can run it; the ai_edge_litert interpreter cannot")
    if signature.symbolic_dims:
        warnings.append("symbolic dimensions: LiteRT runs them through shape arithmetic that splits the graph into "
                        "several XNNPACK partitions, slower than a model converted at static sizes (measured 12-14x "
                        "on the transformer block)")
    if external_weights == "always" and signature.weights.get("baked_bytes"):
        warnings.append("external weights 'always': a .tflite keeps its weights as buffers inside model.tflite, "
                        "so they are embedded there (the SavedModel stage's variables are frozen by the converter)")
    return warnings


def versions_of(tf: Any, stablehlo: dict[str, Any], front: Manifest, meta: dict[str, Any]) -> dict[str, str]:
    """LiteRT's and TensorFlow's versions, the StableHLO the converter and module speak, the minimum runtime."""
    min_runtime = meta.get("min_runtime_version")
    return {"ai_edge_litert": dist_version("ai-edge-litert"), "tensorflow": tf.__version__,
            "tensorflow_git": tf.version.GIT_VERSION,
            "converter_stablehlo": stablehlo["converter_stablehlo"],
            "module_stablehlo": ",".join(stablehlo["module_stablehlo"]),
            "stablehlo_written_by_jax": front.versions.get("stablehlo_written_by_jax", "unknown"),
            **({"tflite_min_runtime_version": min_runtime} if min_runtime else {})}


def requires_of(meta: dict[str, Any], ops: list[str], flex: list[str]) -> dict[str, Any]:
    """What a LiteRT runtime needs to run the model."""
    min_runtime = meta.get("min_runtime_version")
    return {"tflite_min_runtime_version": min_runtime, "tflite_schema_version": meta["schema_version"],
            "ops": ops,
            "note": (f"a LiteRT/TFLite runtime {min_runtime or '(version not recorded)'} or newer with the "
                     "builtin op resolver" + (" and the Flex delegate" if flex else " (no Flex delegate)"))}


def facts_of(tf: Any, chosen: LiteRTOptions, ops: list[str], used_ops: list[str], flex: list[str],
             tensors: dict[str, dict[str, dict[str, Any]]], stablehlo: dict[str, Any], front: Manifest,
             model: tuple[int, dict[str, Any], int | None]) -> LiteRTFacts:
    """The format facts (`model`: the file's bytes, its metadata, its XNNPACK partitions)."""
    model_bytes, meta, partitions = model
    return LiteRTFacts(
        signature=SIGNATURE_KEY,
        supported_ops=list(ops),
        select_tf_ops=chosen.select_tf_ops,
        converter=f"tf.lite.TFLiteConverter.from_saved_model(dir, signature_keys=['{SIGNATURE_KEY}']) "
                  f"from TensorFlow {tf.__version__}, from the SavedModel stage of this export"
                  + ("; the weights as inputs (a SavedModel made from the stage's serving module), written into the "
                     ".tflite after the flatbuffer by multiexport" if "multiexport_weights" in meta else ""),
        signature_keys="the leaves' aliases, in and out; map names through the signature, never by the "
                       "raw tensor order",
        tensors={role: {name: LiteTensor(**t) for name, t in by_name.items()} for role, by_name in tensors.items()},
        ops=list(used_ops),
        flex_ops=flex,
        stablehlo={**stablehlo, "written_by_jax": front.versions.get("stablehlo_written_by_jax"),
                   "check": "every XlaCallModule module read by the converter's own StableHLO reader"},
        model_bytes=model_bytes,
        metadata=meta,
        delegate="XNNPACK, the default delegate of the builtin op resolver (OpResolverType.AUTO), on the CPU",
        xnnpack_partitions=partitions,
        weights="constant buffers inside model.tflite (the converter freezes the SavedModel's variables)",
    )
