"""The equation table (backends/onnx/equations.py) across what jax2onnx's optimizer drops: a Reshape pair around
an elementwise op between two Gemms (BERT's FFN Gelu), a bool mask Cast to float and back (BERT's attention
mask). Each graph here is one jax2onnx lowered and the same after its optimizer; an equation after the dropped
pair is recorded, one whose value the shipped graph no longer holds is not."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.onnx.equations import Recorder, table_text

FRAME = ["/home/user/model.py:5"]


def _ir(nodes, inputs, outputs, initializers=()):
    import onnx_ir as ir

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    proto = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    return ir.serde.deserialize_model(proto)


def _recorded(lowered, shipped, calls) -> dict[str, str]:
    """primitive -> the shipped tensor its output is recorded at."""
    rec = Recorder(calls=calls, lowered=lowered)
    text, _ = table_text(shipped, rec)
    return {entry[4]: entry[0] for entry in json.loads(text)["entries"]}


def _shape(name, *dims):
    return numpy_helper.from_array(np.array(dims, np.int64), name)


def test_equations_after_a_dropped_reshape_pair_are_recorded():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])
    w1 = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(4, 5), "w1")
    w2 = numpy_helper.from_array(np.arange(25, dtype=np.float32).reshape(5, 5), "w2")
    shapes = [_shape("s2", 6, 4), _shape("s3", 2, 3, 5), _shape("s2b", 6, 5)]
    lowered = _ir([helper.make_node("Reshape", ["x", "s2"], ["r"]), helper.make_node("Gemm", ["r", "w1"], ["g"]),
                   helper.make_node("Reshape", ["g", "s3"], ["dense"]), helper.make_node("Relu", ["dense"], ["act"]),
                   helper.make_node("Reshape", ["act", "s2b"], ["r2"]), helper.make_node("Gemm", ["r2", "w2"], ["g2"]),
                   helper.make_node("Reshape", ["g2", "s3"], ["y"])], [x], [y], [w1, w2, *shapes])
    shipped = _ir([helper.make_node("Reshape", ["x", "s2"], ["r"]), helper.make_node("Gemm", ["r", "w1"], ["g"]),
                   helper.make_node("Relu", ["g"], ["act"]), helper.make_node("Gemm", ["act", "w2"], ["g2"]),
                   helper.make_node("Reshape", ["g2", "s3"], ["y"])], [x], [y], [w1, w2, shapes[0], shapes[1]])
    calls = [("linen.dense", "", FRAME, [("dense", (2, 3, 5), "float32")]),
             ("relu", "", FRAME, [("act", (2, 3, 5), "float32")]),
             ("linen.dense_out", "", FRAME, [("y", (2, 3, 5), "float32")])]
    # the first Dense and the relu exist only 2-D in the shipped graph: not recorded; the second Dense's output,
    # computed from them, is the same expression in both graphs
    assert _recorded(lowered, shipped, calls) == {"linen.dense_out": "y"}


def test_equations_after_a_dropped_cast_pair_are_recorded():
    m = helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 3])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    lowered = _ir([helper.make_node("Cast", ["m"], ["maskf"], to=TensorProto.FLOAT),
                   helper.make_node("Cast", ["maskf"], ["maskb"], to=TensorProto.BOOL),
                   helper.make_node("Where", ["maskb", "v", "zero"], ["out"])], [m, v], [out], [zero])
    shipped = _ir([helper.make_node("Where", ["m", "v", "zero"], ["out"])], [m, v], [out], [zero])
    calls = [("convert_element_type", "", FRAME, [("maskf", (2, 3), "float32")]),
             ("jax.numpy.where", "", FRAME, [("out", (2, 3), "float32")])]
    assert _recorded(lowered, shipped, calls) == {"jax.numpy.where": "out"}
    # a Cast back from a type that does not hold every value (float to int32 and back) is not dropped
    lossy = _ir([helper.make_node("Cast", ["v"], ["vi"], to=TensorProto.INT32),
                 helper.make_node("Cast", ["vi"], ["vf"], to=TensorProto.FLOAT),
                 helper.make_node("Where", ["m", "vf", "zero"], ["out"])], [m, v], [out], [zero])
    direct = _ir([helper.make_node("Where", ["m", "v", "zero"], ["out"])], [m, v], [out], [zero])
    assert _recorded(lossy, direct, calls[1:]) == {}
