"""Ops that move data without arithmetic: broadcast, reshape, transpose, slices, concat, pad, iota, reverse."""

from __future__ import annotations

import numpy as np

from ..builder import Lazy, Unsupported
from ..opcases import Arg, example, f32, i32, jnp, lax

_INT64_MAX = 2**63 - 1


def _trailing_aligned(src, dst, dims: list[int]) -> bool:
    """Whether broadcasting `src` into `dst` along `dims` is numpy's own (trailing dims aligned, each 1 or the
    result's size; a dynamic one is the result's: lax never expands it): nothing to move."""
    return dims == list(range(dst.rank - src.rank, dst.rank)) and all(
        s in (1, d) for s, d in zip(src.shape, dst.shape[dst.rank - src.rank:]))


def broadcast_in_dim(cx, op) -> list[str]:
    src, dst = cx.type_of(op.operands[0]), cx.type_of(op.result)
    dims = cx.ints(op, "broadcast_dimensions")
    if _trailing_aligned(src, dst, dims):
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
    line = _iota_line(cx, t, dim)
    if tuple(_placed(t, dim)) == t.shape:
        return [line]
    return [cx.lazy_result(line, t.shape)]


def _placed(t, dim: int) -> list:
    shaped = [1] * t.rank
    shaped[dim] = t.shape[dim]
    return shaped


def _iota_line(cx, t, dim: int) -> str:
    """0, 1, ... along `dim` of type `t` (static there), other dimensions 1."""
    if t.dtype.startswith(("bfloat16", "float8")) or t.dtype == "bool":
        line = cx.b.cast(cx.b.const(np.arange(t.shape[dim], dtype=np.float32)), t.dtype)
    else:
        line = cx.b.const(np.arange(t.shape[dim]).astype(t.dtype))
    if t.rank != 1:
        line = cx.b.reshape(line, _placed(t, dim))
    return line


def reverse(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    dims = cx.ints(op, "dimensions")
    if not dims:
        return [x]
    return [cx.b.op1("Slice", [x, cx.b.ints([-1] * len(dims)), cx.b.ints([-_INT64_MAX] * len(dims)),
                               cx.b.ints(dims), cx.b.ints([-1] * len(dims))])]


def get_dimension_size(cx, op) -> list[str]:
    src = cx.type_of(op.operands[0])
    dim = cx.int_attr(op, "dimension")
    if src.shape[dim] is not None:
        return [cx.b.const(np.asarray(src.shape[dim], dtype=np.int32))]
    # A symbolic dimension: read from the tensor at run time (a lazy one expanded: its own tensor has 1 there).
    size = cx.b.op1("Shape", [cx.name(op.operands[0])], start=dim, end=dim + 1)
    return [cx.b.reshape(cx.b.cast(size, "int32"), [])]


def _int64(cx, value) -> str:
    """A dynamic op's shape (or index) operand as the int64 tensor ONNX's Reshape, Expand and Slice take."""
    name = cx.name(value)
    return name if cx.type_of(value).dtype == "int64" else cx.b.cast(name, "int64")


def dynamic_broadcast_in_dim(cx, op) -> list[str]:
    """broadcast_in_dim to a shape computed in the graph: the operand's dims moved into place (transposed, unit axes
    inserted), then lazy like a static broadcast (Converter.lazy), expanded by its shape operand where needed."""
    src, dst = cx.type_of(op.operands[0]), cx.type_of(op.result)
    dims = cx.ints(op, "broadcast_dimensions")
    if _trailing_aligned(src, dst, dims):  # the operand's own tensor, lazy or not, stands for the result as it is
        raw = cx.raw_name(op.operands[0])
        if src.shape == dst.shape and op.operands[0] not in cx.lazy:
            return [raw]
        return [Lazy(raw, dst.shape, _int64(cx, op.operands[1]))]
    order = sorted(range(len(dims)), key=dims.__getitem__)
    x = cx.b.transpose(cx.name(op.operands[0]), order)
    missing = [d for d in range(dst.rank) if d not in dims]
    if missing:
        x = cx.b.unsqueeze(x, missing)
    placed = [1] * dst.rank
    for i in order:
        placed[dims[i]] = src.shape[i]
    if tuple(placed) == dst.shape:
        # Every dimension already its size: a dynamic one is never expanded (lax.broadcast_in_dim takes an operand
        # dimension of 1 or of the result's size; a symbolic one is not 1), the rest are equal.
        return [x]
    return [Lazy(x, dst.shape, _int64(cx, op.operands[1]))]


def dynamic_reshape(cx, op) -> list[str]:
    dst = cx.type_of(op.result)
    x = cx.name(op.operands[0])
    if not dst.dynamic:
        return [cx.b.reshape(x, dst.shape)]
    # allowzero: a 0 in the shape is a size of zero, as in StableHLO (not ONNX's "copy this dimension")
    return [cx.b.op1("Reshape", [x, _int64(cx, op.operands[1])], allowzero=1)]


def real_dynamic_slice(cx, op) -> list[str]:
    """x[start:limit:stride] with the three as tensors (jnp.split, a slice of a symbolic dimension): ONNX Slice
    takes them as they are, on every axis."""
    x = cx.name(op.operands[0])
    starts, limits, strides = (_int64(cx, v) for v in op.operands[1:])
    axes = cx.b.ints(range(cx.type_of(op.operands[0]).rank))
    return [cx.b.op1("Slice", [x, starts, limits, axes, strides])]


def dynamic_iota(cx, op) -> list[str]:
    """iota in a shape computed in the graph: the line along its dimension (its length read from the shape operand
    when that dimension is dynamic), lazy to the whole shape."""
    t = cx.type_of(op.result)
    dim = cx.int_attr(op, "iota_dimension")
    shape = _int64(cx, op.operands[0]) if t.dynamic else None  # a static result needs no shape from the graph
    if shape is not None and t.shape[dim] is None:  # 0 .. n-1 with n read from the shape operand
        n = cx.b.op1("Gather", [shape, cx.b.ints([dim])], axis=0)
        count = cx.b.reshape(n, [])
        line = cx.b.op1("Range", [cx.b.const(np.asarray(0, np.int64)), count, cx.b.const(np.asarray(1, np.int64))])
        line = cx.b.cast(line, t.dtype) if t.dtype != "int64" else line
        others = [d for d in range(t.rank) if d != dim]
        line = cx.b.unsqueeze(line, others) if others else line
    else:
        line = _iota_line(cx, t, dim)
    if tuple(_placed(t, dim)) == t.shape:
        return [line]
    if shape is None:
        return [cx.lazy_result(line, t.shape)]
    return [Lazy(line, t.shape, shape)]


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
    "stablehlo.dynamic_broadcast_in_dim": dynamic_broadcast_in_dim,
    "stablehlo.dynamic_reshape": dynamic_reshape,
    "stablehlo.dynamic_iota": dynamic_iota,
    "stablehlo.real_dynamic_slice": real_dynamic_slice,
}


_DIM_SIZE = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<i32> {
  %0 = stablehlo.get_dimension_size %x, dim = 1 : (tensor<2x3xf32>) -> tensor<i32>
  return %0 : tensor<i32>
}"""
_INDEX = Arg((), "int32", "index")
# The dynamic ops with their shape operand a constant: how a static module would hold them (jax.export writes them
# for symbolic dimensions, where the shape is computed; tests/backends/test_onnx_stablehlo.py converts those).
_DYN_BROADCAST = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<3x4x2xf32> {
  %s = stablehlo.constant dense<[3, 4, 2]> : tensor<3xi32>
  %0 = stablehlo.dynamic_broadcast_in_dim %x, %s, dims = [2, 0] : (tensor<2x3xf32>, tensor<3xi32>) -> tensor<3x4x2xf32>
  return %0 : tensor<3x4x2xf32>
}"""
_DYN_BROADCAST_TRAILING = """
func.func @main(%x: tensor<3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %s = stablehlo.constant dense<[2, 3]> : tensor<2xi64>
  %0 = stablehlo.dynamic_broadcast_in_dim %x, %s, dims = [1] : (tensor<3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  %1 = stablehlo.multiply %0, %y : tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}"""
_DYN_RESHAPE = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %s = stablehlo.constant dense<[3, 2]> : tensor<2xi32>
  %0 = stablehlo.dynamic_reshape %x, %s : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}"""
_REAL_DYNAMIC_SLICE = """
func.func @main(%x: tensor<4x6xf32>) -> tensor<2x2xf32> {
  %start = stablehlo.constant dense<[1, 0]> : tensor<2xi32>
  %limit = stablehlo.constant dense<[3, 6]> : tensor<2xi32>
  %stride = stablehlo.constant dense<[1, 3]> : tensor<2xi32>
  %0 = stablehlo.real_dynamic_slice %x, %start, %limit, %stride : (tensor<4x6xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}"""
_DYN_IOTA = """
func.func @main(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %s = stablehlo.constant dense<[2, 3]> : tensor<2xi32>
  %0 = stablehlo.dynamic_iota %s, dim = 1 : (tensor<2xi32>) -> tensor<2x3xi32>
  %1 = stablehlo.add %x, %0 : tensor<2x3xi32>
  return %1 : tensor<2x3xi32>
}"""

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
            note="a constant; a symbolic dimension is read at run time (Shape)"),
    example("stablehlo.dynamic_broadcast_in_dim", lambda x: jnp.broadcast_to(x.T[:, None, :], (3, 4, 2)), f32(2, 3),
            mlir=_DYN_BROADCAST, onnx=("Transpose", "Unsqueeze", "Expand"),
            note="operand dims moved into place, expanded to the shape operand where a consumer needs it"),
    example("stablehlo.dynamic_broadcast_in_dim", lambda x, y: x * y, f32(3), f32(2, 3), name="trailing",
            mlir=_DYN_BROADCAST_TRAILING, onnx="Mul", note="trailing-aligned: the elementwise consumer broadcasts"),
    example("stablehlo.dynamic_reshape", lambda x: x.reshape(3, 2), f32(2, 3), mlir=_DYN_RESHAPE, onnx="Reshape",
            note="the shape operand as ONNX Reshape's (allowzero) where the result is dynamic"),
    example("stablehlo.real_dynamic_slice", lambda x: x[1:3, 0:6:3], f32(4, 6), mlir=_REAL_DYNAMIC_SLICE,
            onnx="Slice", note="starts, limits and strides as tensors"),
    example("stablehlo.dynamic_iota", lambda x: x + lax.broadcasted_iota(jnp.int32, (2, 3), 1), i32(2, 3),
            mlir=_DYN_IOTA, note="Range from the shape operand along a dynamic dimension"),
)
