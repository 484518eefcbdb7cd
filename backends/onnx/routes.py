"""The two ways an ONNX graph is made, and the check that picks between them.

`jax2onnx` traces the jaxpr with high-level plugins (Gelu, LayerNormalization, Einsum: compact graphs);
`stablehlo` converts the module `jax.export` produced op by op (stablehlo/). `auto` takes jax2onnx's
graph when it converts, validates and runs once in ONNX Runtime, and the StableHLO route's otherwise:
a graph ONNX Runtime cannot run is the converter's fault, and the other converter may not make it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from multiexport.sdk import ExportError, export_module, ir_context, parse_dtype, parse_module

from .runner import NODE_FAILURE, node_failure
from .stablehlo import Unsupported, convert_module

ROUTES = ("auto", "jax2onnx", "stablehlo")


def stablehlo_model(fn, signature, opset: int, static_sizes=None):
    """The StableHLO route's onnx_ir model of the flat function: inputs named by leaf, outputs by output leaf.

    A symbolic signature is converted symbolically, unless fixed sizes were asked for (`static_sizes`, as
    `multiexport export --static-sizes` and `locate` ask): then this refuses it, and the export's static-size
    fallback converts one model per size. Only a model converted at fixed sizes carries the op-by-op site table
    `locate` maps (numbered like the module it instruments: the one refined to the trial's sizes)."""
    import onnx_ir as ir
    import onnx_ir.passes.common as passes

    asked = {d: v for d, v in dict(static_sizes or {}).items() if d in signature.symbolic_dims}
    if asked:
        raise ExportError(f"Backend 'onnx' | route 'stablehlo' converts at the fixed sizes asked for "
                          f"({', '.join(f'{d}={list(v)}' for d, v in asked.items())}), one model each",
                          backend="onnx", category="unsupported-signature")
    try:
        exported = export_module(fn, signature, keep_unused=True)
    except Exception as exc:
        raise ExportError(f"Backend 'onnx' | route 'stablehlo': jax.export failed: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:800]}", backend="onnx", category="export-failed") from exc
    names = [leaf.name for leaf in signature.inputs]
    outputs = [leaf.name for leaf in signature.outputs]
    try:
        with ir_context() as ctx:
            module = parse_module(exported, ctx)
            shapes = ([list(leaf.shape) for leaf in signature.inputs], [list(leaf.shape) for leaf in signature.outputs]
                      ) if signature.symbolic_dims else (None, None)
            proto = convert_module(module, names, outputs, opset, signature.name or "model", *shapes)
    except Unsupported as exc:
        raise ExportError(f"Backend 'onnx' | route 'stablehlo' has no ONNX form for {exc.op}"
                          f"{': ' + exc.why if exc.why else ''}", backend="onnx", category="unsupported-op") from exc
    model = ir.serde.deserialize_model(proto)
    passes.RemoveUnusedNodesPass()(model)  # constants a pattern read but no node uses
    return model


def run_once(path, signature, model) -> None:
    """Run the written graph once in ONNX Runtime on the example inputs (zeros where none); ExportError
    `invalid-model` naming the node when it fails: a graph that validates can still fail on every call."""
    import onnxruntime as ort


    if any(leaf.dtype == "bfloat16" or leaf.dtype.startswith("float8") for leaf in signature.inputs):
        return  # ONNX Runtime's Python binding cannot carry these: the load check says so, typed
    feed = feed_for(signature, model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    weights = in_memory_initializers(model)
    for name, value in weights.items():
        options.add_initializer(name, value)
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        from onnxruntime.capi import onnxruntime_pybind11_state as state

        if isinstance(exc, state.NotImplemented):  # a kernel this runtime lacks: the op or its dtype, named
            special = any(leaf.dtype in ("bfloat16", "float16", "float64") or leaf.dtype.startswith("float8")
                          for leaf in (*signature.inputs, *signature.outputs))
            raise ExportError(f"Backend 'onnx' | ONNX Runtime has no kernel: {node_failure(exc)}", backend="onnx",
                              category="unsupported-dtype" if special else "unsupported-op") from exc
        raise ExportError(f"Backend 'onnx' | {node_failure(exc)}", backend="onnx", category="invalid-model") from exc
    try:
        session.run(None, feed)
    except Exception as exc:  # a named node that fails is the graph's fault; anything else is the run's
        named = NODE_FAILURE.search(str(exc)) is not None
        raise ExportError(f"Backend 'onnx' | {node_failure(exc)}", backend="onnx",
                          category="invalid-model" if named else "load-failed") from exc


# Initializers of this many bytes or more are given to the check's session from the model in memory (jax2onnx's
# zero-copy views of the target's arrays): ONNX Runtime would otherwise read or map them from the data file, a
# second copy of the weights in the export worker beside the target's (2.09x the weights at 1 B). The file's
# bytes are those arrays as written; the graph, every small tensor and the data file's layout come from the file.
SHARED_INITIALIZER_BYTES = 1024


def in_memory_initializers(model) -> dict[str, Any]:
    """Initializer name -> an OrtValue sharing the model's in-memory array (no copy), for every initializer of
    SHARED_INITIALIZER_BYTES or more whose data is in memory (not a tensor read lazily from a file)."""
    import onnx_ir as ir
    import onnxruntime as ort

    shared = {}
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        if tensor is None or isinstance(tensor, ir.ExternalTensor) or tensor.nbytes < SHARED_INITIALIZER_BYTES:
            continue
        array = tensor.numpy()
        if not array.flags.c_contiguous or array.dtype.kind not in "biuf":
            continue  # the session reads it from the file
        shared[name] = ort.OrtValue.ortvalue_from_numpy(array)
    return shared


def feed_for(signature, model) -> dict[str, Any]:
    """Graph input name -> the example value (zeros at the input's shape when the example does not fit)."""

    examples = signature.example_feed()
    by_name = {leaf.name: leaf for leaf in signature.inputs}
    feed = {}
    for value in model.graph.inputs:
        leaf = by_name[value.name]
        shape = tuple(d if isinstance(d, int) else 2 for d in leaf.shape)
        example = examples.get(leaf.name)
        fits = example is not None and tuple(np.shape(example)) == shape
        feed[value.name] = np.asarray(example) if fits else np.zeros(shape, parse_dtype(leaf.dtype))
    return feed


def route_failure(first: ExportError, second: ExportError) -> ExportError:
    """Both routes failed: the jax2onnx error stands (its category), with the StableHLO route's words."""
    if "| tpu-only: " in str(first):  # a Pallas kernel: the StableHLO route fails on the same call
        return first
    text = re.sub(r"^Backend 'onnx' \| ", "", str(second))
    return ExportError(f"{first} (route 'stablehlo' failed too: {text})", backend="onnx", category=first.category)
