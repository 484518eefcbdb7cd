"""dot_general -> MatMul (transposed and reshaped to [batch, m, k] x [batch, k, n] only when it must be),
convolution -> Conv (transposed to [N, C, spatial...] when the dimension numbers are not already that)."""

from __future__ import annotations

import math

from ..builder import Unsupported
from ..opcases import Arg, example, f32, i32, jnp, lax

# ONNX Runtime's MatMul kernels (CPU): other element types go through float32 and back.
_MATMUL_TYPES = ("float32", "float64", "float16", "int32", "int64", "uint32", "uint64")


def dot_general(cx, op) -> list[str]:
    from jax.extend.mlir.dialects import stablehlo as hlo

    numbers = hlo.DotDimensionNumbers(cx.attr(op, "dot_dimension_numbers"))
    return [_dot(cx, op, list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions),
                 list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions))]


def dot(cx, op) -> list[str]:
    lhs = cx.type_of(op.operands[0])
    return [_dot(cx, op, [], [], [lhs.rank - 1], [0])]


def _dot(cx, op, lb: list[int], rb: list[int], lc: list[int], rc: list[int]) -> str:
    b = cx.b
    x, y = cx.inputs(op)
    lt, rt, out = cx.type_of(op.operands[0]), cx.type_of(op.operands[1]), cx.type_of(op.result)
    lf = [d for d in range(lt.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rt.rank) if d not in rb and d not in rc]
    compute = out.dtype if out.dtype in _MATMUL_TYPES else "float32"
    if lt.dtype != compute:
        x = b.cast(x, compute)
    if rt.dtype != compute:
        y = b.cast(y, compute)

    def size(t, dims):  # a dynamic dimension among them: unknown here (Builder.reshape infers one)
        sizes = [t.shape[d] for d in dims]
        return None if None in sizes else math.prod(sizes)

    # The common forms MatMul takes as they are: x[..., k] @ w[k, n], and batched [B.., m, k] @ [B.., k, n].
    direct = (not lb and len(lc) == 1 and lc[0] == lt.rank - 1 and rt.rank == 2 and rc == [0]
              and lt.rank >= 1) or (
        lb == list(range(len(lb))) and rb == lb and len(lc) == 1 and lc[0] == lt.rank - 1 and len(rc) == 1
        and rc[0] == rt.rank - 2 and len(lf) == 1 and len(rf) == 1 and lt.rank == rt.rank == len(lb) + 2)
    if direct:
        result = b.op1("MatMul", [x, y])
    elif not lb and lt.rank == rt.rank == 2 and lc == [1] and rc == [1]:
        # W[m, k] . x[n, k] (a vmapped Linear: weights on the left): x @ W^T gives [n, m], whose transpose is the
        # result; the caller's own transpose back to [n, m] then cancels it (Builder.transpose composes them).
        result = b.transpose(b.op1("MatMul", [y, b.transpose(x, [1, 0])]), [1, 0])
    elif not lb and len(lc) == 1 and len(rf) == 1 and size(lt, lf) is None:
        # Dynamic free dimensions (b, s): MatMul broadcasts x's leading dims itself, so x[*free, k] @ y[k, n] is
        # already [*free, n], with no flattening (which could infer one dynamic size, not two)
        result = b.op1("MatMul", [b.transpose(x, lf + lc), b.transpose(y, rc + rf)])
    elif not lb:
        x = b.transpose(x, lf + lc)
        y = b.transpose(y, rc + rf)
        m, k, n = size(lt, lf), size(lt, lc), size(rt, rf)
        if len(lf) != 1 or len(lc) != 1:
            x = b.reshape(x, [m, k])
        if len(rc) != 1 or len(rf) != 1:
            y = b.reshape(y, [k, n])
        result = b.op1("MatMul", [x, y])
        if tuple(out.shape) != (m, n):
            result = b.reshape(result, out.shape)
    else:
        x = b.transpose(x, lb + lf + lc)
        y = b.transpose(y, rb + rc + rf)
        batch = [lt.shape[d] for d in lb]
        x3 = [size(lt, lb), size(lt, lf), size(lt, lc)]
        y3 = [size(rt, rb), size(rt, rc), size(rt, rf)]
        if [*batch, *(lt.shape[d] for d in lf), *(lt.shape[d] for d in lc)] != x3:
            x = b.reshape(x, x3)
        if [*batch, *(rt.shape[d] for d in rc), *(rt.shape[d] for d in rf)] != y3:
            y = b.reshape(y, y3)
        result = b.op1("MatMul", [x, y])
        if not (None in out.shape and len(lb) == len(lf) == len(rf) == 1):  # else already [batch, m, n]
            result = b.reshape(result, out.shape)
    if compute != out.dtype:
        result = b.cast(result, out.dtype)
    return result


def convolution(cx, op) -> list[str]:
    from jax.extend.mlir.dialects import stablehlo as hlo

    b = cx.b
    x, w = cx.inputs(op)
    lt, out = cx.type_of(op.operands[0]), cx.type_of(op.result)
    dn = hlo.ConvDimensionNumbers(cx.attr(op, "dimension_numbers"))
    spatial = len(dn.input_spatial_dimensions)
    strides = cx.ints(op, "window_strides", [1] * spatial)
    padding = cx.ints(op, "padding", [0] * (2 * spatial))
    lhs_dilation = cx.ints(op, "lhs_dilation", [1] * spatial)
    rhs_dilation = cx.ints(op, "rhs_dilation", [1] * spatial)
    reversal = cx.ints(op, "window_reversal", [0] * spatial)
    groups = cx.int_attr(op, "feature_group_count", 1)
    if cx.int_attr(op, "batch_group_count", 1) != 1:
        raise Unsupported("stablehlo.convolution", "batch_group_count > 1 (a weight gradient; ONNX Conv has none)")
    if any(d != 1 for d in lhs_dilation):
        raise Unsupported("stablehlo.convolution", f"lhs_dilation {lhs_dilation} (a transposed convolution)")
    if any(reversal):
        raise Unsupported("stablehlo.convolution", "window_reversal")
    if any(p < 0 for p in padding):
        raise Unsupported("stablehlo.convolution", f"negative padding {padding}")
    if spatial == 0:
        raise Unsupported("stablehlo.convolution", "no spatial dimension")
    if out.dtype not in ("float32", "float64", "float16"):
        raise Unsupported("stablehlo.convolution", f"on {out.dtype} (ONNX Runtime's Conv takes floats)")
    x = b.transpose(x, [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions])
    w = b.transpose(w, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                        *dn.kernel_spatial_dimensions])
    low, high = padding[0::2], padding[1::2]
    y = b.op1("Conv", [x, w], strides=strides, pads=[*low, *high], dilations=rhs_dilation, group=groups)
    order = [dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions]
    inverse = [order.index(d) for d in range(out.rank)]
    del lt
    return [b.transpose(y, inverse)]


HANDLERS = {
    "stablehlo.dot_general": dot_general,
    "stablehlo.dot": dot,
    "stablehlo.convolution": convolution,
}


_DOT = """
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = stablehlo.dot %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}"""


def _conv(x, w, padding="SAME", **kw):
    return lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"), **kw)


CASES = (
    example("stablehlo.dot_general", lambda x, w: x @ w, f32(2, 3), f32(3, 4), onnx="MatMul"),
    example("stablehlo.dot_general", lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), f32(2, 3, 4), f32(2, 4, 5),
            onnx="MatMul", name="batched"),
    example("stablehlo.dot_general", lambda x, y: jnp.einsum("mkb,nbk->bmn", x, y), f32(3, 4, 2), f32(5, 2, 4),
            onnx=("MatMul", "Transpose"), name="permuted"),
    example("stablehlo.dot_general", lambda w, x: jnp.einsum("mk,nk->nm", w, x), f32(4, 3), f32(2, 3),
            onnx="MatMul", name="weights-left"),
    example("stablehlo.dot_general", lambda x, w: x @ w, i32(2, 3), i32(3, 4), onnx="MatMul", name="int"),
    example("stablehlo.dot_general", lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.int32),
            Arg((2, 3), "int8", "int"), Arg((3, 4), "int8", "int"), onnx=("MatMul", "Cast"), name="int8-to-int32"),
    example("stablehlo.dot_general", lambda a, b: jnp.dot(a, b), f32(5), f32(5), onnx="MatMul", name="vector"),
    example("stablehlo.dot_general", lambda x, w: x @ w, Arg((2, 3), "float64"), Arg((3, 4), "float64"),
            onnx="MatMul", name="f64", x64=True, rtol=1e-12, atol=1e-14),
    example("stablehlo.dot", lambda a, b: a @ b, f32(2, 3), f32(3, 4), onnx="MatMul", mlir=_DOT,
            note="jax writes dot_general"),
    example("stablehlo.convolution", lambda x, w: _conv(x, w), f32(1, 5, 5, 2), f32(3, 3, 2, 4), onnx="Conv",
            rtol=1e-4, atol=1e-5, note="float only; batch groups and window reversal refused; "
                                       "float64: ONNX Runtime has no double Conv kernel"),
    example("stablehlo.convolution", lambda x, w: _conv(x, w, feature_group_count=2, rhs_dilation=(2, 1)),
            f32(1, 6, 5, 4), f32(3, 3, 2, 4), onnx="Conv", name="grouped-dilated", rtol=1e-4, atol=1e-5),
    example("stablehlo.convolution", lambda x, w: lax.conv_general_dilated(
        x, w, (2,), ((1, 2),), dimension_numbers=("NWC", "WIO", "NWC")), f32(2, 9, 3), f32(3, 3, 4), onnx="Conv",
            name="1d-strided", rtol=1e-4, atol=1e-5),
    example("stablehlo.convolution", lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID"), f32(1, 2, 5, 5),
            f32(4, 2, 3, 3), onnx="Conv", name="nchw", rtol=1e-4, atol=1e-5),
    example("stablehlo.convolution", lambda x, w: _conv(x, w, ((1, 1), (1, 1)), lhs_dilation=(2, 2)), f32(1, 3, 3, 2),
            f32(3, 3, 2, 2), name="transposed", refused="lhs_dilation",
            note="lhs dilation (a transposed convolution) refused"),
)
