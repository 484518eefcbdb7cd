"""Ops that move data without arithmetic: broadcast, reshape, transpose, slices, concat, pad, iota, reverse."""

from __future__ import annotations

import numpy as np

from ..builder import Unsupported
from ..opcases import Arg, example, f32, i32, jnp, lax

_INT64_MAX = 2**63 - 1


def broadcast_in_dim(cx, op) -> list[str]:
    src, dst = cx.type_of(op.operands[0]), cx.type_of(op.result)
    dims = cx.ints(op, "broadcast_dimensions")
    if dims == list(range(dst.rank - src.rank, dst.rank)) and all(
            s in (1, d) for s, d in zip(src.shape, dst.shape[dst.rank - src.rank:])):
        # numpy broadcasting aligns trailing dims: nothing to move, and a lazy operand stays lazy
        raw = cx.raw_name(op.operands[0])
        return [raw if src.shape == dst.shape and op.operands[0] not in cx.lazy else cx.lazy_result(raw, dst.shape)]
    (x,) = cx.inputs(op)
    order = sorted(range(len(dims)), key=dims.__getitem__)
    x = cx.b.transpose(x, order)  # ascending target dims: then a reshape places every source dim
    placed = [1] * dst.rank
    for i in order:
        placed[dims[i]] = src.shape[i]
    if tuple(placed) != tuple(src.shape[i] for i in order) and src.rank:  # a scalar broadcasts as it is
        x = cx.b.reshape(x, placed)
    if tuple(placed) == dst.shape:
        return [x]
    # Not expanded here: elementwise consumers broadcast it themselves, others get the Expand (Converter.name).
    return [cx.lazy_result(x, dst.shape)]


def reshape(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    src, dst = cx.type_of(op.operands[0]), cx.type_of(op.result)
    if src.shape == dst.shape:
        return [x]
    if dst.shape == (1,) * (dst.rank - src.rank) + src.shape:
        return [cx.lazy_result(x, dst.shape)]  # leading 1s only: broadcasting adds them (Converter.lazy)
    return [cx.b.reshape(x, dst.shape)]


def transpose(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    return [cx.b.transpose(x, cx.ints(op, "permutation"))]


def slice_(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    src = cx.type_of(op.operands[0])
    start, limit = cx.ints(op, "start_indices"), cx.ints(op, "limit_indices")
    strides = cx.ints(op, "strides", [1] * src.rank)
    axes = [i for i in range(src.rank) if (start[i], limit[i], strides[i]) != (0, src.shape[i], 1)]
    if not axes:
        return [x]
    return [cx.b.op1("Slice", [x, cx.b.ints([start[i] for i in axes]), cx.b.ints([limit[i] for i in axes]),
                               cx.b.ints(axes), cx.b.ints([strides[i] for i in axes])])]


def clamped_starts(cx, starts: list[str], shape, sizes) -> str:
    """The 1-D int64 start vector of a dynamic slice, each clamped to [0, dim - size] as StableHLO does."""
    b = cx.b
    scalars = [b.cast(s, "int64") for s in starts]
    vector = b.op1("Concat", [b.unsqueeze(s, [0]) for s in scalars], axis=0) if scalars else b.ints([])
    high = b.ints([d - s for d, s in zip(shape, sizes)])
    return b.op1("Min", [b.op1("Max", [vector, b.ints([0] * len(shape))]), high])


def dynamic_slice(cx, op) -> list[str]:
    x, *starts = cx.inputs(op)
    src = cx.type_of(op.operands[0])
    sizes = cx.ints(op, "slice_sizes")
    begin = clamped_starts(cx, starts, src.shape, sizes)
    end = cx.b.op1("Add", [begin, cx.b.ints(sizes)])
    return [cx.b.op1("Slice", [x, begin, end, cx.b.ints(range(src.rank))])]


def dynamic_update_slice(cx, op) -> list[str]:
    x, update, *starts = cx.inputs(op)
    src, upd = cx.type_of(op.operands[0]), cx.type_of(op.operands[1])
    if upd.shape == src.shape:
        return [update]  # the clamped start is 0 on every axis: the update is the whole result
    begin = clamped_starts(cx, starts, src.shape, upd.shape)
    # Every position of the update, offset by the start: ScatterND writes them in one node.
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in upd.shape], indexing="ij"), axis=-1).astype(np.int64)
    indices = cx.b.op1("Add", [cx.b.const(grid), begin])
    return [cx.b.op1("ScatterND", [x, indices, update])]


def concatenate(cx, op) -> list[str]:
    names = cx.inputs(op)
    if len(names) == 1:
        return names
    return [cx.b.op1("Concat", names, axis=cx.int_attr(op, "dimension"))]


def pad(cx, op) -> list[str]:
    x, value = cx.inputs(op)
    low, high = cx.ints(op, "edge_padding_low"), cx.ints(op, "edge_padding_high")
    interior = cx.ints(op, "interior_padding", [0] * len(low))
    if any(interior):
        raise Unsupported("stablehlo.pad", f"interior padding {interior} (ONNX Pad has none)")
    if not any(low) and not any(high):
        return [x]
    return [cx.b.op1("Pad", [x, cx.b.ints([*low, *high]), value], mode="constant")]


def iota(cx, op) -> list[str]:
    t = cx.type_of(op.result)
    dim = cx.int_attr(op, "iota_dimension")
    if t.dtype.startswith(("bfloat16", "float8")) or t.dtype == "bool":
        line = cx.b.cast(cx.b.const(np.arange(t.shape[dim], dtype=np.float32)), t.dtype)
    else:
        line = cx.b.const(np.arange(t.shape[dim]).astype(t.dtype))
    shaped = [1] * t.rank
    shaped[dim] = t.shape[dim]
    if t.rank != 1:
        line = cx.b.reshape(line, shaped)
    if tuple(shaped) == t.shape:
        return [line]
    return [cx.lazy_result(line, t.shape)]


def reverse(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    dims = cx.ints(op, "dimensions")
    if not dims:
        return [x]
    return [cx.b.op1("Slice", [x, cx.b.ints([-1] * len(dims)), cx.b.ints([-_INT64_MAX] * len(dims)),
                               cx.b.ints(dims), cx.b.ints([-1] * len(dims))])]


def get_dimension_size(cx, op) -> list[str]:
    src = cx.type_of(op.operands[0])
    return [cx.b.const(np.asarray(src.shape[cx.int_attr(op, "dimension")], dtype=np.int32))]


HANDLERS = {
    "stablehlo.broadcast_in_dim": broadcast_in_dim,
    "stablehlo.reshape": reshape,
    "stablehlo.transpose": transpose,
    "stablehlo.slice": slice_,
    "stablehlo.dynamic_slice": dynamic_slice,
    "stablehlo.dynamic_update_slice": dynamic_update_slice,
    "stablehlo.concatenate": concatenate,
    "stablehlo.pad": pad,
    "stablehlo.iota": iota,
    "stablehlo.reverse": reverse,
    "stablehlo.get_dimension_size": get_dimension_size,
}


_DIM_SIZE = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<i32> {
  %0 = stablehlo.get_dimension_size %x, dim = 1 : (tensor<2x3xf32>) -> tensor<i32>
  return %0 : tensor<i32>
}"""
_INDEX = Arg((), "int32", "index")

CASES = (
    example("stablehlo.broadcast_in_dim", lambda x: jnp.broadcast_to(x[:, None, :], (2, 4, 3)), f32(2, 3),
            onnx="Expand", note="trailing-aligned broadcasts stay unexpanded for elementwise consumers"),
    example("stablehlo.broadcast_in_dim", lambda x, y: x[:, None] * y, f32(2), f32(2, 3), onnx="Reshape",
            name="lazy"),
    example("stablehlo.reshape", lambda x: x.reshape(3, 2), f32(2, 3), onnx="Reshape"),
    example("stablehlo.transpose", lambda x: jnp.transpose(x, (2, 0, 1)), f32(2, 3, 4), onnx="Transpose"),
    example("stablehlo.slice", lambda x: x[:, 1:4:2], f32(2, 5), onnx="Slice"),
    example("stablehlo.dynamic_slice", lambda x, i: lax.dynamic_slice(x, (i, i), (2, 2)), f32(4, 5), _INDEX,
            onnx="Slice", note="starts clamped into range as StableHLO says"),
    example("stablehlo.dynamic_update_slice", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 1)), f32(4, 5),
            f32(2, 3), _INDEX, onnx="ScatterND"),
    example("stablehlo.concatenate", lambda a, b: jnp.concatenate([a, b], axis=1), f32(2, 3), f32(2, 2),
            onnx="Concat"),
    example("stablehlo.pad", lambda x: jnp.pad(x, ((1, 0), (0, 2)), constant_values=0.5), f32(2, 3), onnx="Pad"),
    example("stablehlo.pad", lambda x: lax.pad(x, 0.0, ((-1, 1, 0), (0, -1, 0))), f32(3, 3), onnx="Pad",
            name="negative"),
    example("stablehlo.pad", lambda x: lax.pad(x, 0.0, ((0, 0, 0), (0, 0, 1))), f32(2, 3), name="interior",
            refused="interior padding", note="interior padding refused (ONNX Pad has none)"),
    example("stablehlo.iota", lambda x: x + lax.broadcasted_iota(jnp.int32, (2, 3), 1), i32(2, 3),
            note="an initializer (and a Reshape when the axis is not the last)"),
    example("stablehlo.iota", lambda x: x + lax.broadcasted_iota(jnp.float32, (3, 2), 0), f32(3, 2),
            onnx="Reshape", name="leading-axis"),
    example("stablehlo.reverse", lambda x: jnp.flip(x, axis=1), f32(2, 3), onnx="Slice"),
    example("stablehlo.get_dimension_size", lambda x: jnp.int32(3), f32(2, 3), mlir=_DIM_SIZE,
            note="a constant: static shapes only"),
)
