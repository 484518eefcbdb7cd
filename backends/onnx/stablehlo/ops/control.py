"""Calls and control flow: func.call and composites inlined, while -> Loop, case/if -> If; and the ops this
route refuses by name (custom_call names its target, rng_bit_generator says why)."""

from __future__ import annotations

from ..builder import TensorType, Unsupported, onnx_type


def call(cx, op) -> list[str]:
    callee = str(cx.attr(op, "callee")).lstrip("@")
    return cx.call(callee, cx.inputs(op))


def composite(cx, op) -> list[str]:
    name = cx.ir.StringAttr(cx.attr(op, "name")).value
    if name == "chlo.erf":
        return [cx.b.op1("Erf", cx.inputs(op))]
    if name == "chlo.top_k" and len(op.operation.results) == 2:  # ONNX's own TopK, not a full sort
        attributes = cx.ir.DictAttr(cx.attr(op, "composite_attributes"))
        k = int(cx.ir.IntegerAttr(attributes["k"]).value)
        (x,) = cx.inputs(op)
        values_t, index_t = (cx.type_of(r) for r in op.operation.results)
        if values_t.dtype in ("float32", "float64", "float16", "int32", "int64"):
            values, indices = cx.b.op("TopK", [x, cx.b.ints([k])], 2, axis=-1, largest=1, sorted=1)
            return [values, cx.b.cast(indices, index_t.dtype)]
    decomposition = str(cx.attr(op, "decomposition")).lstrip("@")
    return cx.call(decomposition, cx.inputs(op))


def custom_call(cx, op) -> list[str]:
    refuse_custom_call(cx, op)
    return cx.inputs(op)  # a sharding annotation: the value itself on one device


def refuse_custom_call(cx, op) -> None:
    """Raise for every custom_call but a one-operand sharding annotation, naming its target."""
    target = cx.ir.StringAttr(cx.attr(op, "call_target_name")).value
    if target == "Sharding" and len(op.operands) == 1:
        return
    raise Unsupported("stablehlo.custom_call", f"target '{target}': a call into code outside StableHLO "
                                               "(a library kernel or a platform callback) has no ONNX form")


def rng_bit_generator(cx, op) -> list[str]:
    raise Unsupported("stablehlo.rng_bit_generator", "the platform's own random bit generator (jax's 'rbg'/"
                                                     "'unsafe_rbg' PRNG): its bits are defined only by the XLA "
                                                     "backend, so no ONNX graph can reproduce them; use the "
                                                     "default threefry PRNG")


def refused(why: str):
    def handler(cx, op) -> list[str]:
        raise Unsupported(op.operation.name, why)
    return handler


def while_(cx, op) -> list[str]:
    """stablehlo.while -> Loop: the condition is computed once before the loop and again after each body."""
    from onnx import helper

    b = cx.b
    initial = cx.inputs(op)
    types = [cx.type_of(v) for v in op.operands]
    cond_block = op.operation.regions[0].blocks[0]
    body_block = op.operation.regions[1].blocks[0]
    (first,) = cx.run_block(cond_block, initial)
    carried = [(cx.names.fresh("carried"), t) for t in types]
    iteration, cond_in = cx.names.fresh("iter"), cx.names.fresh("cond_in")

    def then_condition(results: list[str]) -> list[str]:
        (again,) = cx.run_block(cond_block, results)
        return [again, *results]

    body = cx.subgraph(body_block, [(iteration, TensorType((), "int64")), (cond_in, TensorType((), "bool")),
                                    *carried], "loop_body", after=then_condition,
                       outputs=[TensorType((), "bool"), *types])
    del helper
    return b.op("Loop", ["", first, *initial], len(initial), body=body)


def _branches(cx, op, blocks) -> list:
    types = [cx.type_of(r) for r in op.operation.results]
    return [cx.subgraph(block, [], "branch", outputs=types) for block in blocks]


def case(cx, op) -> list[str]:
    """stablehlo.case -> nested If (an index out of range takes the last branch, as StableHLO says)."""
    b = cx.b
    (index,) = cx.inputs(op)
    blocks = [r.blocks[0] for r in op.operation.regions]
    graphs = _branches(cx, op, blocks)
    n = len(op.operation.results)
    if len(graphs) == 1:
        return b.op("If", [b.const(True)], n, then_branch=graphs[0], else_branch=graphs[0])
    index = b.cast(index, "int64")
    return _nested_if(cx, index, graphs, 0, n)


def _nested_if(cx, index: str, graphs: list, i: int, n: int) -> list[str]:
    from onnx import helper

    b = cx.b
    if i == len(graphs) - 2:
        return b.op("If", [b.op1("Equal", [index, b.const(i, "int64")])], n, then_branch=graphs[i],
                    else_branch=graphs[i + 1])
    outer = b
    inner = type(b)(cx.names, root=b.root)
    cx.b = inner
    try:
        outs = _nested_if(cx, index, graphs, i + 1, n)
        finals = [inner.op1("Identity", [o]) for o in outs]
    finally:
        cx.b = outer
    out_infos = [helper.make_tensor_value_info(o, onnx_type(t.dtype), list(t.shape))
                 for o, t in zip(finals, _types_of(graphs[i]))]
    rest = helper.make_graph(inner.nodes, cx.names.fresh("else"), [], out_infos)
    return b.op("If", [b.op1("Equal", [index, b.const(i, "int64")])], n, then_branch=graphs[i], else_branch=rest)


def _types_of(graph) -> list[TensorType]:
    from onnx import helper

    out = []
    for v in graph.output:
        tt = v.type.tensor_type
        out.append(TensorType(tuple(d.dim_value for d in tt.shape.dim),
                              helper.tensor_dtype_to_np_dtype(tt.elem_type).name
                              if tt.elem_type != 16 else "bfloat16"))
    return out


def if_(cx, op) -> list[str]:
    (pred,) = cx.inputs(op)
    blocks = [r.blocks[0] for r in op.operation.regions]
    then_graph, else_graph = _branches(cx, op, blocks)
    return cx.b.op("If", [pred], len(op.operation.results), then_branch=then_graph, else_branch=else_graph)


HANDLERS = {
    "func.call": call,
    "stablehlo.composite": composite,
    "stablehlo.custom_call": custom_call,
    "stablehlo.rng_bit_generator": rng_bit_generator,
    "stablehlo.while": while_,
    "stablehlo.case": case,
    "stablehlo.if": if_,
    "stablehlo.rng": refused("a random draw inside the graph ignores the function's key"),
    "stablehlo.reduce_precision": refused("ONNX has no mantissa/exponent rounding op"),
    "stablehlo.select_and_scatter": refused("a pooling gradient: no ONNX op scatters to window maxima"),
    "stablehlo.fft": refused("ONNX's DFT is not written by this route yet"),
}
