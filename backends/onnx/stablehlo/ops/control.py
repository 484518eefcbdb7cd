"""Calls and control flow: func.call and composites inlined, while -> Loop, case/if -> If; and the ops this
route refuses by name (custom_call names its target, rng_bit_generator says why)."""

from __future__ import annotations

from ..builder import TensorType, Unsupported, onnx_type
from ..opcases import Arg, b1, example, f32, jax, jnp, lax, u32


def symbol(cx, attr) -> str:
    """The name a symbol reference points at: `@"<lambda>"` (a name MLIR must quote) is `<lambda>`."""
    return cx.ir.FlatSymbolRefAttr(attr).value


def call(cx, op) -> list[str]:
    return cx.call(symbol(cx, cx.attr(op, "callee")), cx.inputs(op))


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
    return cx.call(symbol(cx, cx.attr(op, "decomposition")), cx.inputs(op))


def custom_call(cx, op) -> list[str]:
    refuse_custom_call(cx, op)
    if _target(cx, op) == "shape_assertion":
        return []  # checked by whoever runs the graph (Converter.assertions_checked)
    return cx.inputs(op)  # a sharding annotation: the value itself on one device


def _target(cx, op) -> str:
    return cx.ir.StringAttr(cx.attr(op, "call_target_name")).value


def refuse_custom_call(cx, op) -> None:
    """Raise for every custom_call but a one-operand sharding annotation and, in a symbolic conversion whose
    assertions the runner checks, jax.export's `shape_assertion` (no result: dropped), naming its target."""
    target = _target(cx, op)
    if target == "Sharding" and len(op.operands) == 1:
        return
    if target == "shape_assertion" and cx.symbolic and cx.assertions_checked and not op.operation.results:
        return
    if target == "shape_assertion":
        raise Unsupported("stablehlo.custom_call", "target 'shape_assertion': jax.export's check of a symbolic "
                                                   "input dimension that is not a plain name (2*b), which a runner "
                                                   "binding names does not make, so the graph cannot leave it out")
    raise Unsupported("stablehlo.custom_call", f"target '{target}': a call into code outside StableHLO "
                                               "(a library kernel or a platform callback) has no ONNX form")


def sharding_constraint(cx, op) -> list[str]:
    """Shardy's sharding constraint (jax.lax.with_sharding_constraint): on one device, the value itself."""
    return cx.inputs(op)


def rng_bit_generator(cx, op) -> list[str]:
    raise Unsupported("stablehlo.rng_bit_generator", "the platform's own random bit generator (jax's 'rbg'/"
                                                     "'unsafe_rbg' PRNG): its bits are defined only by the XLA "
                                                     "backend, so no ONNX graph can reproduce them; use the "
                                                     "default threefry PRNG")


def refused(why: str):
    """A handler that refuses its op with `why`; marked so the converter reports it before converting anything."""
    def handler(cx, op) -> list[str]:
        raise Unsupported(op.operation.name, why)
    handler.refuses = why  # type: ignore[attr-defined]
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
    "sdy.sharding_constraint": sharding_constraint,
    "stablehlo.while": while_,
    "stablehlo.case": case,
    "stablehlo.if": if_,
    "stablehlo.rng": refused("a random draw inside the graph ignores the function's key"),
    "stablehlo.reduce_precision": refused("ONNX has no mantissa/exponent rounding op"),
    "stablehlo.select_and_scatter": refused("a pooling gradient: no ONNX op scatters to window maxima"),
    "stablehlo.fft": refused("ONNX's DFT is not written by this route yet"),
}


def _max_pool_grad(x):
    return jax.grad(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2), (1, 1), "VALID").sum())(x)


def _one_device():
    return jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])


def _rbg(key, x):
    return x + jax.random.uniform(jax.random.wrap_key_data(key, impl="rbg"), x.shape)


_IF = """
func.func @main(%p: tensor<i1>, %x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "stablehlo.if"(%p) ({
    stablehlo.return %x : tensor<2x3xf32>
  }, {
    %1 = stablehlo.negate %x : tensor<2x3xf32>
    stablehlo.return %1 : tensor<2x3xf32>
  }) : (tensor<i1>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"""
_SHARDING = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{replicated}"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = stablehlo.add %0, %0 : tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}"""

CASES = (
    example("func.call", lambda x: jax.jit(lambda y: y * 3.0)(x) + 1.0, f32(2, 3), onnx="Mul",
            note="inlined: the callee's ops are written in place"),
    example("stablehlo.composite", lambda x: lax.top_k(x, 2), f32(2, 5), onnx="TopK", name="top_k",
            note="chlo.top_k -> TopK; other composites through their decomposition"),
    example("stablehlo.composite", lambda x: lax.erf(x), f32(2, 3), onnx="Erf", name="erf",
            note="chlo ops reach the route only as composites: a portable artifact holds no chlo op; "
                 "float64 erf: ONNX Runtime has no double Erf kernel"),
    example("stablehlo.custom_call", lambda x: x + x, f32(2, 3), mlir=_SHARDING, name="sharding",
            note="a one-operand Sharding annotation is its operand"),
    example("stablehlo.custom_call", lambda x: jnp.linalg.cholesky(x @ x.T + 3 * jnp.eye(3)), f32(3, 3),
            name="lapack", refused="target 'lapack_spotrf_ffi'", note="every other target is refused, named"),
    example("sdy.sharding_constraint", lambda x: lax.with_sharding_constraint(x, _one_device()) * 2.0, f32(2, 3),
            note="the value itself (one device)"),
    example("stablehlo.rng_bit_generator", _rbg, u32(4), f32(3), refused="threefry",
            note="refused: its bits are the XLA backend's own ('rbg' PRNG); jax's default threefry converts"),
    example("stablehlo.while", lambda x: lax.fori_loop(0, 3, lambda i, c: c * 2.0 + 1.0, x), f32(2, 3),
            onnx="Loop"),
    example("stablehlo.while", lambda n, x: lax.fori_loop(0, n, lambda i, c: (c[0] * 2.0, c[1] + i), (x, 0))[0],
            Arg((), "int32", "count"), f32(2, 3), onnx="Loop", name="dynamic-trips"),
    example("stablehlo.case", lambda i, x: lax.switch(i, [lambda v: v, lambda v: v * 2.0, lambda v: -v], x),
            Arg((), "int32", "index"), f32(2, 3), onnx="If", note="nested If; an index out of range takes the last"),
    example("stablehlo.case", lambda i, x: lax.switch(i, [lambda v: (v, v.sum()), lambda v: (-v, v.max())], x),
            Arg((), "int32", "index"), f32(2, 3), onnx="If", name="two-results"),
    example("stablehlo.if", lambda p, x: jnp.where(p, x, -x), b1(), f32(2, 3), onnx="If", mlir=_IF,
            note="jax writes lax.cond as a case"),
    example("stablehlo.rng", lambda x: x + lax.rng_uniform(0.0, 1.0, (2, 3)), f32(2, 3), refused="ignores"),
    example("stablehlo.reduce_precision", lambda x: lax.reduce_precision(x, 5, 10), f32(2, 3),
            refused="mantissa"),
    example("stablehlo.select_and_scatter", _max_pool_grad, f32(2, 4), refused="pooling gradient"),
    example("stablehlo.fft", lambda x: jnp.fft.fft(x).real, f32(2, 4), refused="DFT"),
)
