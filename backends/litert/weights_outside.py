"""LiteRT past the converter's memory: the weights never enter the TFLite converter.

The converter holds several copies of every constant at once (the SavedModel restored twice in Python, once in
its C++ session, the MLIR constants and their folded forms, the flatbuffer it builds and the bytes it returns:
measured in benchmarks/litert_memory.md). So for a SavedModel whose weights are variables, the serving module is
converted with the weights as ordinary inputs (the same XlaCallModule, read from saved_model.pb, with every
variable read replaced by an input), and each weight input then becomes a constant tensor of the .tflite whose
data is written after the flatbuffer and addressed by offset: the layout of the converter's own large-model path
(`buffer_location`: "outside flatbuffers"), which LiteRT's interpreter reads as any other .tflite. The weights go
from the SavedModel's checkpoint to the file one at a time; the converter sees none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

ALIGN = 64  # each buffer's offset in the file: XNNPACK and the kernels read weights in place
BUFFER_LOCATION = (b"buffer_location", b"outside flatbuffers")  # what the converter's large-model path writes
# Says in the file itself who wrote the weights (read into the manifest's format.metadata by `model_metadata`).
WRITTEN_BY = (b"multiexport_weights", b"written after the flatbuffer by multiexport from the SavedModel's variables, "
                                      b"one constant tensor per weight; the TFLite converter took them as inputs")
_PLACEHOLDER = 1 << 40  # an offset/size large enough that the flatbuffer's size does not change when it is set


@dataclass(frozen=True)
class ServingCall:
    """The stage's serving module as one XlaCallModule call, its variable reads made inputs.

    leaves: the signature's inputs (alias, TensorSpec proto) in the serving function's argument order.
    weights: (checkpoint key, shape, dtype enum) of each variable the module reads, in first-read order.
    operands: the call's operands in order, each ("leaf", i) or ("weight", j).
    attrs: the XlaCallModule op's attributes, decoded for TF's `xla_call_module` op wrapper (Tin left out).
    outputs: output alias -> index of the call's result it is.
    """

    leaves: tuple[tuple[str, Any], ...]
    weights: tuple[tuple[str, tuple[int, ...], int], ...]
    operands: tuple[tuple[str, int], ...]
    attrs: dict[str, Any]
    outputs: dict[str, int]

    @property
    def nbytes(self) -> int:
        """The weights' bytes."""
        return sum(_nbytes(shape, dtype) for _, shape, dtype in self.weights)


def serving_call(saved_model_dir: Path, signature_key: str) -> ServingCall | None:
    """The stage's signature `signature_key` as one XlaCallModule whose variable reads are inputs, or None when the graph
    is not that shape (no variables, more than one module, an op between the reads and the call)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    graph = proto.meta_graphs[0]
    if signature_key not in graph.signature_def:
        return None
    found = [f for f in graph.graph_def.library.function if any(n.op == "XlaCallModule" for n in f.node_def)]
    if len(found) != 1:
        return None
    function = found[0]
    calls = [n for n in function.node_def if n.op == "XlaCallModule"]
    bound = graph.object_graph_def.concrete_functions[function.signature.name].bound_inputs
    args = [a.name for a in function.signature.input_arg]
    n_leaves = len(args) - len(bound)
    if len(calls) != 1 or not bound or n_leaves < 0:
        return None
    call, nodes = calls[0], {n.name: n for n in function.node_def}
    keys = _checkpoint_keys(graph.object_graph_def)
    specs = graph.signature_def[signature_key].inputs
    leaves = tuple((name, specs[name]) for name in args[:n_leaves] if name in specs)
    if len(leaves) != n_leaves:
        return None
    weights: list[tuple[str, tuple[int, ...], int]] = []
    operands: list[tuple[str, int]] = []
    for source in call.input:
        kind, name = _source(source, nodes)
        if kind == "arg" and args.index(name) < n_leaves:
            operands.append(("leaf", args.index(name)))
        elif kind == "variable" and name in args[n_leaves:]:
            node = bound[args.index(name) - n_leaves]
            variable = graph.object_graph_def.nodes[node].variable
            weight = (keys[node], tuple(d.size for d in variable.shape.dim), int(variable.dtype))
            if weight not in weights:  # a variable read twice is one input
                weights.append(weight)
            operands.append(("weight", weights.index(weight)))
        else:
            return None
    if any(key not in call.attr for key in ("module", "Sout", "Tout", "version")) or call.attr["function_list"].list.func:
        return None
    outputs = _outputs(graph.signature_def[signature_key], function, nodes, call.name)
    if outputs is None:
        return None
    return ServingCall(leaves, tuple(weights), tuple(operands), _decoded(call.attr), outputs)


def _checkpoint_keys(objects) -> dict[int, str]:
    """object-graph node -> its checkpoint key (the path of child names from the root), for variables."""
    keys, todo = {}, [(0, "")]
    seen = {0}
    while todo:
        node, path = todo.pop()
        if objects.nodes[node].WhichOneof("kind") == "variable":
            keys[node] = f"{path}/.ATTRIBUTES/VARIABLE_VALUE"
        for child in objects.nodes[node].children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                todo.append((child.node_id, f"{path}/{child.local_name}" if path else child.local_name))
    return keys


def _source(tensor: str, nodes) -> tuple[str, str]:
    """("arg", argument) or ("variable", the resource argument read) that a function tensor is, through Identity
    ops; ("other", name) for anything else."""
    while True:
        name = tensor.split(":")[0].lstrip("^")
        node = nodes.get(name)
        if node is None:
            return "arg", name
        if node.op == "Identity":
            tensor = node.input[0]
        elif node.op == "ReadVariableOp" and node.input[0].split(":")[0] not in nodes:
            return "variable", node.input[0].split(":")[0]
        else:
            return "other", name


def _outputs(signature, function, nodes, call: str) -> dict[str, int] | None:
    """output alias -> the index of the call's result it is (signature output -> function output -> Identity chain)."""
    found = {}
    for alias, info in signature.outputs.items():
        index = int(info.name.rsplit(":", 1)[1])
        tensor = function.ret[function.signature.output_arg[index].name]
        while tensor.split(":")[0] in nodes and nodes[tensor.split(":")[0]].op == "Identity":
            tensor = nodes[tensor.split(":")[0]].input[0]
        parts = tensor.split(":")
        if parts[0] != call or len(parts) != 3:
            return None
        found[alias] = int(parts[2])
    return found


def _decoded(attrs) -> dict[str, Any]:
    """XlaCallModule's attributes as keyword arguments of TF's `xla_call_module` op wrapper."""
    import tensorflow as tf

    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key == "Tin" or key.startswith("_"):  # inferred, or graph annotations
            continue
        kind = value.WhichOneof("value")
        if kind is None:  # an empty list attribute
            out[key] = []
        elif kind == "list":
            items = value.list
            if items.type:
                out[key] = [tf.as_dtype(t) for t in items.type]
            elif items.shape:
                out[key] = [tf.TensorShape(None if s.unknown_rank else [d.size if d.size >= 0 else None
                                                                     for d in s.dim]) for s in items.shape]
            else:
                out[key] = list(items.s) or list(items.i) or []
        else:
            out[key] = getattr(value, kind)
    return out


def weight_name(j: int) -> str:
    """The converted model's input name for weight j (made a constant before the file is written)."""
    return f"multiexport_weight_{j:05d}"


def save_weights_as_inputs(call: ServingCall, directory: Path, signature_key: str) -> None:
    """Save the serving module as a SavedModel in `directory`, signature `signature_key`, with its weights as
    inputs named `weight_name(j)` after the leaves (no weight data in it: nothing for the converter to copy)."""
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops

    specs = [tf.TensorSpec(_shape(proto.tensor_shape), tf.as_dtype(proto.dtype), name=alias)
             for alias, proto in call.leaves]
    specs += [tf.TensorSpec(shape, tf.as_dtype(dtype), name=weight_name(j))
              for j, (_, shape, dtype) in enumerate(call.weights)]
    n = len(call.leaves)

    def serve(*tensors):
        operands = [tensors[i] if kind == "leaf" else tensors[n + i] for kind, i in call.operands]
        results = gen_xla_ops.xla_call_module(operands, **call.attrs)
        return {alias: tf.identity(results[index]) for alias, index in call.outputs.items()}

    function = tf.function(serve, input_signature=specs, autograph=False)
    module = tf.Module()
    module.serve = function
    tf.saved_model.save(module, str(directory), signatures={signature_key: function.get_concrete_function()})


def _shape(proto) -> list[int | None] | None:
    if proto.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in proto.dim]


def write_with_weights(blob: bytes, call: ServingCall, saved_model_dir: Path, out: BinaryIO) -> None:
    """Write into `out` (an empty file): the converted model with every weight input made a constant tensor whose
    buffer lies after the flatbuffer (64-byte aligned, addressed by offset and size), read from the checkpoint one
    at a time. A TRANSPOSE of a weight (a convolution kernel's layout, which the converter folds into a constant
    when it holds the weights) is folded here too: its output becomes the constant, the weight transposed."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(blob)
    reader = tf.train.load_checkpoint(str(saved_model_dir / "variables" / "variables"))
    names = {weight_name(j): j for j in range(len(call.weights))}
    constants: list[tuple[Any, int, int, tuple[int, ...] | None]] = []  # (subgraph, tensor, weight j, permutation)
    for signature in model.signatureDefs:
        subgraph = model.subgraphs[signature.subgraphIndex]
        taken = {item.tensorIndex: names[_text(item.name)] for item in signature.inputs if _text(item.name) in names}
        signature.inputs = [item for item in signature.inputs if item.tensorIndex not in taken]
        subgraph.inputs = [i for i in subgraph.inputs if i not in taken]
        constants += [(subgraph, t, j, None) for t, j in taken.items()]
        constants += _folded_transposes(model, subgraph, taken)
    # a weight the converter found unused, or only transposed, is read by no op and is not written
    read = {(id(g), i) for g in model.subgraphs for op in g.operators for i in op.inputs}
    placed: list[tuple[Any, int, tuple[int, ...] | None]] = []  # (BufferT, weight j, permutation)
    for subgraph, tensor, j, perm in constants:
        if (id(subgraph), tensor) not in read and tensor not in subgraph.outputs:
            subgraph.tensors[tensor].buffer = 0  # the empty buffer: no data
            continue
        buffer = schema.BufferT()
        buffer.offset, buffer.size = _PLACEHOLDER, _PLACEHOLDER
        model.buffers.append(buffer)
        subgraph.tensors[tensor].buffer = len(model.buffers) - 1
        placed.append((buffer, j, perm))
    for name, data in (BUFFER_LOCATION, WRITTEN_BY):
        metadata, inline = schema.MetadataT(), schema.BufferT()
        metadata.name, inline.data = name, list(data)
        model.buffers.append(inline)
        metadata.buffer = len(model.buffers) - 1
        model.metadata = [*(model.metadata or []), metadata]
    head = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    offset = _aligned(len(head))
    for buffer, j, _ in placed:
        _, shape, dtype = call.weights[j]
        buffer.offset, buffer.size = offset, _nbytes(shape, dtype)
        offset = _aligned(offset + buffer.size)
    final = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    if len(final) != len(head):
        raise ValueError("the flatbuffer changed size when its buffer offsets were set")
    _write_at(out, final, 0)
    for buffer, j, perm in placed:
        key, shape, dtype = call.weights[j]
        value = reader.get_tensor(key)
        if value.shape != tuple(shape):
            raise ValueError(f"checkpoint tensor {key} has shape {value.shape}, the model expects {shape}")
        value = np.ascontiguousarray(value if perm is None else np.transpose(value, perm),
                                     dtype=tf.as_dtype(dtype).as_numpy_dtype)
        _write_at(out, value.data.cast("B"), buffer.offset)
        del value


def _text(name) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _folded_transposes(model, subgraph, taken: dict[int, int]) -> list[tuple[Any, int, int, tuple[int, ...]]]:
    """The TRANSPOSE ops of a weight by a constant permutation, removed from `subgraph`: (subgraph, the op's
    output tensor, weight j, permutation) for each, that output to become the transposed weight."""
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema

    folded, kept = [], []
    for op in subgraph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        if builtin != schema.BuiltinOperator.TRANSPOSE or op.inputs[0] not in taken:
            kept.append(op)
            continue
        perm = subgraph.tensors[op.inputs[1]]
        data = model.buffers[perm.buffer].data
        widths = {schema.TensorType.INT32: np.int32, schema.TensorType.INT64: np.int64}
        if data is None or perm.type not in widths:  # a permutation computed at run time stays an op
            kept.append(op)
            continue
        order = np.frombuffer(bytes(bytearray(data)), widths[perm.type])
        folded.append((subgraph, op.outputs[0], taken[op.inputs[0]], tuple(int(i) for i in order)))
    subgraph.operators = kept
    return folded


def _nbytes(shape: tuple[int, ...], dtype: int) -> int:
    import numpy as np
    import tensorflow as tf

    return int(np.prod(shape, dtype=np.int64)) * tf.as_dtype(dtype).size


def _aligned(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def _write_at(out: BinaryIO, data, offset: int) -> None:
    """Write `data` at `offset`, zero-padding from the current end."""
    end = out.tell()
    if offset > end:
        out.write(b"\0" * (offset - end))
    out.write(data)
