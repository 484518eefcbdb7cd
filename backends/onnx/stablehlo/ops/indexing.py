"""gather -> GatherND, scatter -> ScatterND, in the forms models lower to: every indexed operand dim taken
at single indices (an embedding lookup, x[i], take_along_axis with batching dims) or, for gather, as windows
(a vmapped dynamic_slice), every other dim taken whole.

Indices are clamped into range as StableHLO's gather does (jax's default `fill`/`clip` modes guard them
before the op; an index still out of range would otherwise make ONNX Runtime fail the call)."""

from __future__ import annotations

import numpy as np

from ..builder import Unsupported
from ..opcases import Arg, example, f32, jax, jnp, lax
from .regions import combiner


def _index_matrix(cx, indices: str, it, index_vector_dim: int, batching: list[int]) -> tuple[str, list[int]]:
    """Indices as [batching..., other batch dims..., K] int64, and the order of the batch dims it has."""
    b = cx.b
    rank = it.rank
    shape = list(it.shape)
    if index_vector_dim == rank:
        indices = b.unsqueeze(indices, [rank])
        shape.append(1)
        rank += 1
    batch = [d for d in range(rank) if d != index_vector_dim]
    order = batching + [d for d in batch if d not in batching]
    indices = b.transpose(indices, order + [index_vector_dim])
    if it.dtype != "int64":
        indices = b.cast(indices, "int64")
    return indices, order


def gather(cx, op) -> list[str]:
    from jax.extend.mlir.dialects import stablehlo as hlo

    b = cx.b
    x, idx = cx.inputs(op)
    xt, it, out = cx.type_of(op.operands[0]), cx.type_of(op.operands[1]), cx.type_of(op.result)
    dn = hlo.GatherDimensionNumbers(cx.attr(op, "dimension_numbers"))
    sizes = cx.ints(op, "slice_sizes")
    offset_dims, collapsed = list(dn.offset_dims), list(dn.collapsed_slice_dims)
    start_map, ivd = list(dn.start_index_map), int(dn.index_vector_dim)
    op_batch, idx_batch = list(dn.operand_batching_dims), list(dn.start_indices_batching_dims)
    rest = [d for d in range(xt.rank) if d not in start_map and d not in op_batch]
    if any(sizes[d] != xt.shape[d] for d in rest):
        raise Unsupported("stablehlo.gather", f"slice sizes {sizes} of operand {list(xt.shape)} indexed at "
                                              f"{start_map}: a dim not indexed must be taken whole")
    # Operand as [batching..., indexed (in start_index_map order)..., rest...]
    data = b.transpose(x, op_batch + start_map + rest)
    indices, order = _index_matrix(cx, idx, it, ivd, idx_batch)
    # A start is clamped so its whole window fits, as StableHLO says: into [0, dim - size].
    high = b.ints([xt.shape[d] - sizes[d] for d in start_map])
    indices = b.op1("Min", [b.op1("Max", [indices, b.ints([0] * len(start_map))]), high])
    # Indexed dims not collapsed are windows (a vmapped dynamic_slice): every position of the window is indexed
    # on its own, start + offset, in new axes before the index vector.
    windows = [d for d in start_map if d not in collapsed]
    n_batch = len(order)
    if windows:
        grid = np.zeros([sizes[d] for d in windows] + [len(start_map)], dtype=np.int64)
        for axis, d in enumerate(windows):
            shape = [1] * len(windows)
            shape[axis] = sizes[d]
            grid[..., start_map.index(d)] = np.arange(sizes[d]).reshape(shape)
        indices = b.op1("Add", [b.unsqueeze(indices, [n_batch + i for i in range(len(windows))]), b.const(grid)])
    got = b.op1("GatherND", [data, indices], batch_dims=len(op_batch))
    # got: [batch dims in `order`..., windows..., rest...]; StableHLO's result: batch dims in index order at the
    # positions not in offset_dims, and the offset dims (rest and windows) in operand order.
    offset_operand_dims = sorted(rest + windows)
    current = [("batch", d) for d in order] + [("offset", d) for d in windows] + [("offset", d) for d in rest]
    batch_in_index_order = sorted(order)
    target: list[tuple[str, int]] = []
    batch_iter, offset_iter = iter(batch_in_index_order), iter(offset_operand_dims)
    for pos in range(out.rank):
        target.append(("offset", next(offset_iter)) if pos in offset_dims else ("batch", next(batch_iter)))
    perm = [current.index(t) for t in target]
    return [b.transpose(got, perm)]


_SCATTER = {"replace": "none", "stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
            "stablehlo.minimum": "min"}


def scatter(cx, op) -> list[str]:
    from jax.extend.mlir.dialects import stablehlo as hlo


    if len(op.operands) != 3:
        raise Unsupported("stablehlo.scatter", "a variadic scatter")
    b = cx.b
    x, idx, upd = cx.inputs(op)
    xt, it, ut = (cx.type_of(v) for v in op.operands)
    dn = hlo.ScatterDimensionNumbers(cx.attr(op, "scatter_dimension_numbers"))
    window, inserted = list(dn.update_window_dims), list(dn.inserted_window_dims)
    to_operand, ivd = list(dn.scattered_dims_to_operand_dims), int(dn.index_vector_dim)
    op_batch, idx_batch = list(dn.input_batching_dims), list(dn.scatter_indices_batching_dims)
    kind = combiner(cx, op)
    if kind not in _SCATTER:
        raise Unsupported("stablehlo.scatter", f"with a {kind} body")
    rest = [d for d in range(xt.rank) if d not in to_operand and d not in op_batch]
    if sorted(inserted) != sorted(d for d in to_operand) or op_batch:
        raise Unsupported("stablehlo.scatter", f"scattered dims {to_operand} not all inserted ({inserted}) or "
                                               "batching dims: only single-index updates of whole slices are written")
    window_sizes = [ut.shape[d] for d in window]
    if window_sizes != [xt.shape[d] for d in rest]:
        raise Unsupported("stablehlo.scatter", f"update windows {window_sizes} smaller than the operand's "
                                               f"{[xt.shape[d] for d in rest]}")
    perm = to_operand + rest
    data = b.transpose(x, perm)
    indices, _ = _index_matrix(cx, idx, it, ivd, idx_batch)
    update_batch = [d for d in range(ut.rank) if d not in window]
    updates = b.transpose(upd, update_batch + window)
    reduction = _SCATTER[kind]
    dims = [xt.shape[d] for d in to_operand]
    data, indices = _spare_slot(cx, data, indices, dims, len(perm))
    if reduction == "none":
        written = b.op1("ScatterND", [data, indices, updates])
    else:
        written = b.op1("ScatterND", [data, indices, updates], reduction=reduction)
    written = b.op1("Slice", [written, b.ints([0] * len(dims)), b.ints(dims), b.ints(range(len(dims)))])
    return [b.transpose(written, [perm.index(d) for d in range(xt.rank)])]


def _spare_slot(cx, data: str, indices: str, dims: list[int], rank: int) -> tuple[str, str]:
    """StableHLO (as XLA runs it) skips an update whose index is out of range; ONNX Runtime's ScatterND fails the
    call. The data gets one spare slot past the end of each indexed dim, an index out of range points there,
    and the caller slices the slots off: those updates land nowhere, as in jax."""
    b = cx.b
    high = b.ints(dims)
    inside = b.op1("And", [b.op1("GreaterOrEqual", [indices, b.ints([0] * len(dims))]),
                           b.op1("Less", [indices, high])])
    indices = b.op1("Where", [inside, indices, high])
    pads = [0] * rank + [1] * len(dims) + [0] * (rank - len(dims))
    return b.op1("Pad", [data, b.ints(pads)], mode="constant"), indices


HANDLERS = {"stablehlo.gather": gather, "stablehlo.scatter": scatter}


_INDICES = Arg((3,), "int32", "index")

CASES = (
    example("stablehlo.gather", lambda x, i: x[i], f32(5, 3), _INDICES, onnx="GatherND",
            note="whole slices at single indices (embedding lookups, x[i], take_along_axis); indices clamped"),
    example("stablehlo.gather", lambda x, i: jnp.take_along_axis(x, i, axis=1), f32(3, 5),
            Arg((3, 2), "int32", "index"), onnx="GatherND", name="take-along-axis"),
    example("stablehlo.gather", lambda x, i: x[:, i], f32(2, 5, 3), _INDICES, onnx="GatherND", name="middle-axis"),
    example("stablehlo.gather", lambda x, i, j: x[i, j], f32(5, 4), _INDICES, _INDICES, onnx="GatherND",
            name="two-indices"),
    example("stablehlo.gather", lambda x, i: jax.vmap(lambda r, k: lax.dynamic_slice(r, (k,), (2,)))(x, i),
            f32(3, 5), _INDICES, onnx="GatherND", name="windows",
            note="windows (a vmapped dynamic_slice): each position indexed, starts clamped so the window fits"),
    example("stablehlo.gather", lambda x, i: jax.vmap(lambda k: lax.dynamic_slice(x, (k, 1, 0), (2, 3, 2)))(i),
            f32(4, 5, 2), _INDICES, onnx="GatherND", name="windows-2d"),
    example("stablehlo.scatter", lambda x, i, u: x.at[i].set(u), f32(5, 3), Arg((2,), "int32", "int"), f32(2, 3),
            onnx="ScatterND", note="set/add/mul/max/min of whole slices at single indices"),
    example("stablehlo.scatter", lambda x, i, u: x.at[i].add(u), f32(5, 3), _INDICES, f32(3, 3), onnx="ScatterND",
            name="add"),
    example("stablehlo.scatter", lambda x, i, u: x.at[i].add(u), Arg((5, 3), "float64"), Arg((3,), "int64", "index"),
            Arg((3, 3), "float64"), onnx="ScatterND", name="f64", x64=True, rtol=1e-14, atol=0.0),
    example("stablehlo.scatter", lambda x, i, u: x.at[i].max(u), f32(5, 3), _INDICES, f32(3, 3), onnx="ScatterND",
            name="max"),
    example("stablehlo.scatter", lambda x, i, j, u: x.at[i, j].set(u), f32(5, 4), _INDICES, _INDICES, f32(3),
            onnx="ScatterND", name="two-indices", note="an index out of range drops its update, as in jax"),
)
