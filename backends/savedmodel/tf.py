"""TensorFlow itself for the SavedModel backend: importing it, reading saved_model.pb, checking its graph.

A SavedModel is a program: its graph may hold any TF op, file-writing ones included, and
`tf.saved_model.load` runs its restore function. So before loading one, `check_graph` reads the
protobuf (without running anything) and refuses any op outside what jax2tf and `tf.saved_model.save`
emit for a multiexport artifact, unless the caller trusts the artifact (`--trust-artifact`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from multiexport.sdk import ArtifactError

SIGNATURE_KEY = "serving_default"
SAVED_MODEL = "saved_model.pb"

# Ops a multiexport SavedModel's compute functions hold (measured on jax2tf exports of the zoo, with and
# without lifted weights, and on the zero-fill of dropped leaves).
COMPUTE_OPS = frozenset({
    "Const", "NoOp", "Placeholder", "Identity", "IdentityN", "PreventGradient", "StopGradient", "XlaCallModule",
    "StatefulPartitionedCall", "PartitionedCall", "ReadVariableOp", "VarHandleOp", "Fill", "Shape",
    "StridedSlice", "Pack", "Cast", "ZerosLike",
})
# What tf.saved_model.save adds in its checkpoint save and restore functions, allowed only there.
SAVE_OPS = COMPUTE_OPS | {"SaveV2", "MergeV2Checkpoints", "ShardedFilename", "StaticRegexFullMatch", "StringJoin",
                          "Select", "DisableCopyOnRead"}
RESTORE_OPS = COMPUTE_OPS | {"RestoreV2", "AssignVariableOp"}
_SAVE_FN = re.compile(r"^__inference__traced_save_\d+$")
_RESTORE_FN = re.compile(r"^__inference__traced_restore_\d+$")


def import_tf(threads: int | None = None):
    """Import TensorFlow once with GPU memory growth on, and its thread pools sized to `threads`.

    Memory growth and thread counts can only be set before TF first runs an op, hence here, at the one
    place this backend imports TF. INFO logs are off unless the user set TF_CPP_MIN_LOG_LEVEL.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialized by the caller: their setting stands
            pass
    if threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # TF already ran an op in this process: its pools are fixed (reported as they are)
            pass
    return tf


def max_supported_call_module_version() -> int:
    """The highest XlaCallModule serialization version the installed TensorFlow can run."""
    from tensorflow.compiler.tf2xla.python import xla as tfxla

    return int(tfxla.call_module_maximum_supported_version())


def read_proto(directory: Path):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # this may be TF's first import (the trust gate): as import_tf
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString((directory / SAVED_MODEL).read_bytes())
        graph = proto.meta_graphs[0]
    except Exception as exc:  # a truncated or foreign saved_model.pb
        raise ArtifactError(f"Artifact '{directory}' | unreadable {SAVED_MODEL}: {type(exc).__name__}: {exc}") from exc
    return graph


def read_saved_model(directory: Path) -> dict[str, Any]:
    """What a consumer sees in saved_model.pb: signature keys, tensor names, each XlaCallModule's facts."""
    graph = read_proto(directory)
    nodes = list(graph.graph_def.node) + [n for f in graph.graph_def.library.function for n in f.node_def]
    modules = [n for n in nodes if n.op == "XlaCallModule"]
    if not modules:
        raise ArtifactError(f"Artifact '{directory}' | {SAVED_MODEL} has no XlaCallModule op (not a jax2tf SavedModel)")
    sig = graph.signature_def[SIGNATURE_KEY] if SIGNATURE_KEY in graph.signature_def else None
    return {
        "inputs": sorted(sig.inputs) if sig else [],
        "outputs": sorted(sig.outputs) if sig else [],
        "input_tensors": {k: v.name for k, v in sig.inputs.items()} if sig else {},
        "output_tensors": {k: v.name for k, v in sig.outputs.items()} if sig else {},
        "versions": [int(n.attr["version"].i) for n in modules],
        "platforms": sorted({p.decode().lower() for n in modules for p in n.attr["platforms"].list.s}),
    }


def check_graph(directory: Path) -> None:
    """Refuse a SavedModel whose graph holds ops a multiexport export never writes (see module docstring)."""
    graph = read_proto(directory)
    problems = []
    for node in graph.graph_def.node:
        if node.op not in COMPUTE_OPS:
            problems.append(f"{node.op} (node {node.name})")
    save_fn, restore_fn = _saver_functions(graph)
    for function in graph.graph_def.library.function:
        name = function.signature.name
        # Checkpoint ops only in the two functions the saver itself calls: a name alone proves nothing
        # (a load-time initializer can be renamed __inference__traced_save_N).
        allowed = SAVE_OPS if name == save_fn else RESTORE_OPS if name == restore_fn else COMPUTE_OPS
        for node in function.node_def:
            if node.op not in allowed:
                problems.append(f"{node.op} (in function {name})")
            callee = node.attr["f"].func.name if "f" in node.attr else ""
            if callee and not (_SAVE_FN.match(name) or _RESTORE_FN.match(name)) and (
                    _SAVE_FN.match(callee) or _RESTORE_FN.match(callee)):
                problems.append(f"a call of {callee} (in function {name})")
    if problems:
        shown = ", ".join(sorted(set(problems))[:6])
        raise ArtifactError(
            f"Artifact '{directory}' | its SavedModel graph holds ops multiexport never exports: {shown}. A SavedModel "
            "is a program (it can read and write files when loaded), so it was not loaded; if you trust it like "
            "your own code, pass --trust-artifact")


def _saver_functions(graph) -> tuple[str | None, str | None]:
    """The functions the SaverDef's save and restore nodes call, when they carry TF's saver names and the
    object graph does not also list them as callable (functions listed there can run at load time)."""
    calls = {n.name: n.attr["f"].func.name for n in graph.graph_def.node if "f" in n.attr}
    callable_at_load = set(graph.object_graph_def.concrete_functions)
    saver = graph.saver_def
    save = calls.get(saver.save_tensor_name.partition(":")[0])
    restore = calls.get(saver.restore_op_name.partition(":")[0])
    save = save if save and _SAVE_FN.match(save) and save not in callable_at_load else None
    restore = restore if restore and _RESTORE_FN.match(restore) and restore not in callable_at_load else None
    return save, restore


def version_problem(needed: int, supported: int, tf_version: str) -> str | None:
    """The reason for an artifact whose XlaCallModule version this TensorFlow cannot run, or None."""
    if needed <= supported:
        return None
    return (
        f"the artifact needs XlaCallModule serialization version {needed}, but TensorFlow {tf_version} here "
        f"supports at most {supported}: upgrade TensorFlow where the SavedModel runs, or re-export with a JAX "
        f"whose calling convention is <= {supported} (jax_export_calling_convention_version)"
    )
