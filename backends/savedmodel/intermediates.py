"""`multiexport locate` on a SavedModel: the artifact's own StableHLO module, every op result returned, run by TF.

A jax2tf SavedModel computes everything in one `XlaCallModule` op, so its graph's tensors by name are only
the inputs and the outputs. What it runs is the StableHLO module in that op's `module` attribute: this takes
that module from saved_model.pb as shipped (a changed op in it is seen), instruments it
(`instrument_module`: every op result also returned), writes it for the StableHLO version the installed
TensorFlow reads, and runs it through TensorFlow's own `XlaCallModule` with the shipped op's attributes
(version, platforms, disabled checks): a re-compile of the shipped module with outputs added, by TF's
XLA, which the result says (`recompiled`). Nothing of the SavedModel is loaded or run: the graph is read as
a protobuf and lifted weights are read from its checkpoint as data, so no trust is needed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from multiexport.sdk import (
    ArtifactError,
    Intermediates,
    IntermediatesRequest,
    RunError,
    instrument_module,
    ir_context,
    refine_module,
)

from .convert import VARIABLES_DIR, tf_stablehlo_version
from .tf import import_tf, read_proto

_WEIGHT_KEY = re.compile(r"^weights/(\d+)/\.ATTRIBUTES/VARIABLE_VALUE$")


def savedmodel_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Every op result of the SavedModel's own module for one feed (see the module docstring)."""
    directory, manifest = request.artifact_dir, request.manifest
    tf = import_tf(request.options.thread_count)
    node = call_module_node(directory)
    args = _arguments(request, node, directory)
    platforms = [p.decode() for p in node.attr["platforms"].list.s]
    module = bytes(node.attr["module"].s)
    refined = ""
    if manifest.symbolic_dims:
        if len(platforms) > 1:
            why = ("cannot map: the shipped module has symbolic dimensions and several platforms; locate refines "
                   "a one-platform module only")
            return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
        module = refine_to(module, [a.shape for a in args])
        refined = f"; its symbolic dimensions refined to this feed's sizes ({_sizes(request)}) by JAX's shape refinement"
    instrumented = instrument_module(module)
    attrs = _attributes(tf, node, instrumented)
    expected = len(instrumented.args) - (1 if len(platforms) > 1 else 0)  # XlaCallModule passes the platform index
    if len(args) != expected:
        raise ArtifactError(f"Artifact '{directory}' | its module's main takes {expected} arguments, the artifact "
                            f"binds {len(args)} (input leaves it reads and checkpoint weights)")
    try:
        with tf.device("/CPU:0"):
            call = tf.function(lambda *xs: _call(tf, list(xs), attrs), autograph=False)
            results = [np.asarray(r) for r in call(*[tf.constant(a) for a in args])]
    except Exception as exc:  # TF's XLA refusing the instrumented module: one line, the backend's failure
        raise RunError(f"Artifact '{directory}' | TensorFlow {tf.__version__} could not run its module with every op "
                       f"result returned: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}",
                       backend="savedmodel") from exc
    n = instrumented.n_results
    outputs = {leaf.name: value for leaf, value in zip(manifest.outputs, results[:n])}
    values = {site.key: value for site, value in zip(instrumented.sites, results[n:])}
    how = (f"TensorFlow {tf.__version__}'s XlaCallModule on the SavedModel's own StableHLO module (read from "
           f"saved_model.pb) with every op result returned, written for StableHLO {tf_stablehlo_version()}: a "
           f"re-compile of the shipped module with outputs added, by TF's XLA{refined}")
    return Intermediates(values=values, how=how, outputs=outputs, own_sites=instrumented.sites, recompiled=True)


def call_module_node(directory: Path) -> Any:
    """The one XlaCallModule node of saved_model.pb (graph or function library); ArtifactError otherwise."""
    graph = read_proto(directory)
    nodes = [n for n in graph.graph_def.node if n.op == "XlaCallModule"]
    nodes += [n for f in graph.graph_def.library.function for n in f.node_def if n.op == "XlaCallModule"]
    if len(nodes) != 1:
        raise ArtifactError(f"Artifact '{directory}' | saved_model.pb has {len(nodes)} XlaCallModule ops, expected "
                            "one (the function's whole module)")
    return nodes[0]


def _arguments(request: IntermediatesRequest, node: Any, directory: Path) -> list[np.ndarray]:
    """The module's arguments as the serving function binds them: the leaves it reads, in leaf order, then the
    lifted weights in the order they were saved (`weights/<i>` in the checkpoint)."""
    leaves = [np.asarray(request.feed[leaf.name]) for leaf in request.manifest.inputs
              if leaf.used and leaf.param is not None]
    return leaves + _weights(directory)


def _weights(directory: Path) -> list[np.ndarray]:
    """The SavedModel's variables (lifted weights) from its checkpoint, read as data, in saved order."""
    if not (directory / VARIABLES_DIR / "variables.index").is_file():
        return []
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(directory / VARIABLES_DIR / "variables"))
    found = {}
    for key in reader.get_variable_to_shape_map():
        match = _WEIGHT_KEY.match(key)
        if match:
            found[int(match.group(1))] = key
    if sorted(found) != list(range(len(found))):
        raise ArtifactError(f"Artifact '{directory}' | its checkpoint's weights are numbered {sorted(found)}, "
                            "expected 0..n-1")
    return [np.asarray(reader.get_tensor(found[i])) for i in range(len(found))]


def refine_to(module: bytes, shapes: list[tuple[int, ...]]) -> bytes:
    """The polymorphic `module` refined to the argument `shapes` of this feed (`refine_module`): sites need static
    shapes, and TF's own refinement would leave them symbolic in the module."""
    try:
        return refine_module(module, shapes)
    except ValueError as exc:
        raise ArtifactError(f"the SavedModel's module {exc}") from exc


def _sizes(request: IntermediatesRequest) -> str:
    """The feed's size of each symbolic dimension (`b=11`), read from the leaves that carry one."""
    found: dict[str, int] = {}
    for leaf in request.manifest.inputs:
        for dim, size in zip(leaf.shape, np.shape(request.feed[leaf.name])):
            if isinstance(dim, str):
                found.setdefault(dim, int(size))
    return ", ".join(f"{k}={v}" for k, v in sorted(found.items()))


def _attributes(tf: Any, node: Any, instrumented: Any) -> dict[str, Any]:
    """XlaCallModule's attributes: the shipped op's, with the instrumented module and its results."""
    from tensorflow.core.framework import tensor_shape_pb2

    n = instrumented.n_results
    shipped_tout = list(node.attr["Tout"].list.type)
    shipped_sout = [tf.TensorShape(tensor_shape_pb2.TensorShapeProto.FromString(s.SerializeToString()))
                    for s in node.attr["Sout"].list.shape]
    attrs: dict[str, Any] = dict(
        version=int(node.attr["version"].i), module=_for_tf(instrumented.portable),
        Tout=[tf.as_dtype(t) for t in shipped_tout[:n]] + [tf.as_dtype(s.dtype) for s in instrumented.sites],
        Sout=shipped_sout[:n] + [tf.TensorShape(list(s.shape)) for s in instrumented.sites],
        platforms=[p.decode() for p in node.attr["platforms"].list.s],
        disabled_checks=[c.decode() for c in node.attr["disabled_checks"].list.s],
        function_list=[], has_token_input_output=bool(node.attr["has_token_input_output"].b))
    if "use_shardy_partitioner" in node.attr:
        attrs["use_shardy_partitioner"] = bool(node.attr["use_shardy_partitioner"].b)
    return attrs


def _for_tf(portable: bytes) -> bytes:
    """The instrumented module as a portable artifact of the StableHLO version the installed TensorFlow reads."""
    from jax.extend import mlir as jmlir
    from jax.extend.mlir.dialects import stablehlo as jhlo

    with ir_context() as ctx:
        module = jmlir.deserialize_portable_artifact(portable, ctx)
        text = module.operation.get_asm(enable_debug_info=True)
    return bytes(jhlo.serialize_portable_artifact_str(text, tf_stablehlo_version()))


def _call(tf: Any, args: list[Any], attrs: dict[str, Any]) -> Any:
    from tensorflow.compiler.tf2xla.python import xla as tfxla

    return tfxla.call_module(args, **attrs)
