"""reduce -> ReduceSum/Max/Min/Prod (and/or through integers), a (value, iota) pair -> ArgMax/ArgMin;
reduce_window -> MaxPool/AveragePool over the windowed dims; sort -> TopK (+ GatherElements)."""

from __future__ import annotations

import math

import numpy as np

from ..builder import Unsupported, op_name
from ..opcases import Arg, b1, example, f32, i32, jnp, lax
from .elementwise import dense_value
from .regions import combiner, sort_direction

_REDUCE = {"stablehlo.add": "ReduceSum", "stablehlo.maximum": "ReduceMax", "stablehlo.minimum": "ReduceMin",
           "stablehlo.multiply": "ReduceProd", "stablehlo.and": "ReduceMin", "stablehlo.or": "ReduceMax"}
_COMBINE = {"stablehlo.add": "Add", "stablehlo.maximum": "Max", "stablehlo.minimum": "Min",
            "stablehlo.multiply": "Mul", "stablehlo.and": "And", "stablehlo.or": "Or"}


def _identity(kind: str, dtype: str) -> float | None:
    if kind in ("stablehlo.add", "stablehlo.or"):
        return 0
    if kind in ("stablehlo.multiply", "stablehlo.and"):
        return 1
    if dtype == "bool" or kind not in ("stablehlo.maximum", "stablehlo.minimum"):
        return None
    if dtype.startswith(("float", "bfloat")):
        return -math.inf if kind == "stablehlo.maximum" else math.inf
    info = np.iinfo(dtype)
    return int(info.min) if kind == "stablehlo.maximum" else int(info.max)


def _constant_value(cx, value) -> float | None:
    """The scalar a value holds when it is a (small) constant, else None."""
    known = cx.b.known(cx.name(value))
    return None if known is None or known.size != 1 else float(np.asarray(known, dtype=np.float64).reshape(-1)[0])


def reduce(cx, op) -> list[str]:
    n = len(op.operands) // 2
    if n == 2:
        return _arg_reduce(cx, op)
    if n != 1:
        raise Unsupported("stablehlo.reduce", f"a variadic reduce of {n} operands (only argmax/argmin pairs)")
    kind = combiner(cx, op)
    if kind not in _REDUCE:
        raise Unsupported("stablehlo.reduce", f"with a {kind} body")
    x, init = cx.inputs(op)
    src, out = cx.type_of(op.operands[0]), cx.type_of(op.result)
    dims = cx.ints(op, "dimensions")
    b = cx.b
    boolean = src.dtype == "bool"
    if boolean:
        x = b.cast(x, "int32")
    reduced = b.op1(_REDUCE[kind], [x, b.ints(dims)], keepdims=0) if dims else x
    if boolean:
        reduced = b.cast(reduced, "bool")
    start = _constant_value(cx, op.operands[1])
    if start is None or start != _identity(kind, src.dtype):
        reduced = b.op1(_COMBINE[kind], [reduced, init])
    if src.shape and not dims and out.shape != src.shape:
        reduced = b.reshape(reduced, out.shape)
    return [reduced]


def _arg_reduce(cx, op) -> list[str]:
    """jnp.argmax/argmin: reduce over (values, iota along the axis) keeping the extreme value and its index."""
    block, ops = cx.block_ops(op)
    dims = cx.ints(op, "dimensions")
    directions = [str(cx.ir.Attribute(o.attributes["comparison_direction"])) for o in ops
                  if o.operation.name == "stablehlo.compare"]
    if len(dims) != 1 or not directions:
        raise Unsupported("stablehlo.reduce", "a variadic reduce that is not an argmax/argmin over one axis")
    index_src = op.operands[1]
    if op_name(index_src) != "stablehlo.iota" or cx.int_attr(index_src.owner, "iota_dimension") != dims[0]:
        raise Unsupported("stablehlo.reduce", "a variadic reduce whose second operand is not an iota along its axis")
    x = cx.inputs(op)[0]
    first = directions[0]
    kind = "ArgMax" if "GT" in first else "ArgMin" if "LT" in first else None
    if kind is None:
        raise Unsupported("stablehlo.reduce", f"a variadic reduce comparing with {first}")
    value_t, index_t = cx.type_of(op.results[0]), cx.type_of(op.results[1])
    b = cx.b
    src = cx.type_of(op.operands[0])
    xs = b.cast(x, "float32") if src.dtype in ("bool", "bfloat16") else x
    index = b.op1(kind, [xs], axis=dims[0], keepdims=0, select_last_index=0)
    value = b.op1("ReduceMax" if kind == "ArgMax" else "ReduceMin", [xs, b.ints(dims)], keepdims=0)
    if value_t.dtype != cx.type_of(op.operands[0]).dtype or xs != x:
        value = b.cast(value, value_t.dtype)
    return [value, b.cast(index, index_t.dtype)]


def reduce_window(cx, op) -> list[str]:
    if len(op.operands) != 2:
        raise Unsupported("stablehlo.reduce_window", "a variadic reduce_window")
    kind = combiner(cx, op)
    x, init = cx.inputs(op)
    src, out = cx.type_of(op.operands[0]), cx.type_of(op.result)
    rank = src.rank
    window = cx.ints(op, "window_dimensions")
    strides = cx.ints(op, "window_strides", [1] * rank)
    base = cx.ints(op, "base_dilations", [1] * rank)
    dilation = cx.ints(op, "window_dilations", [1] * rank)
    padding = cx.ints(op, "padding", [0] * (2 * rank))
    low, high = padding[0::2], padding[1::2]
    if any(d != 1 for d in base):
        raise Unsupported("stablehlo.reduce_window", f"base dilations {base}")
    if kind not in ("stablehlo.maximum", "stablehlo.add", "stablehlo.minimum"):
        raise Unsupported("stablehlo.reduce_window", f"with a {kind} body (max, min and sum windows are written)")
    start = _constant_value(cx, op.operands[1])
    if start != _identity(kind, src.dtype):
        raise Unsupported("stablehlo.reduce_window", f"an initial value {start} that is not the identity of {kind}")
    pooled = [d for d in range(rank) if (window[d], strides[d], low[d], high[d], dilation[d]) != (1, 1, 0, 0, 1)]
    if not pooled:
        return [x]
    b = cx.b
    if kind == "stablehlo.add" and len(pooled) == 1:  # jnp.cumsum: a window as long as the axis, padded before
        d = pooled[0]
        n = src.shape[d]
        if (window[d], strides[d], dilation[d]) == (n, 1, 1) and sorted((low[d], high[d])) == [0, n - 1]:
            return [b.op1("CumSum", [x, b.const(np.asarray(d, dtype=np.int64))], reverse=int(high[d] == n - 1 and n > 1))]
    kept = [d for d in range(rank) if d not in pooled]
    perm = kept + pooled
    y = b.transpose(x, perm)
    lead = math.prod(src.shape[d] for d in kept)
    if len(kept) != 2:  # ONNX pools take [N, C, spatial...]: two kept dims are that already (NHWC -> NCHW)
        y = b.reshape(y, [lead, 1, *(src.shape[d] for d in pooled)])
    dtype = src.dtype
    compute = dtype if dtype in ("float32", "float64", "float16") else "float32"
    if compute != dtype:
        y = b.cast(y, compute)
    attrs = dict(kernel_shape=[window[d] for d in pooled], strides=[strides[d] for d in pooled],
                 pads=[*(low[d] for d in pooled), *(high[d] for d in pooled)],
                 dilations=[dilation[d] for d in pooled])
    divide = None  # a divide by the window size that uses the sum: it gets the average itself
    if kind == "stablehlo.maximum":
        y = b.op1("MaxPool", [y], **attrs)
    elif kind == "stablehlo.minimum":
        y = b.op1("Neg", [b.op1("MaxPool", [b.op1("Neg", [y])], **attrs)])
    else:  # a sum window: the padding counts as zeros, so the average including padding times the window size
        y = b.op1("AveragePool", [y], count_include_pad=1, **attrs)
        size = math.prod(window[d] for d in pooled)
        divide = _divided_by(cx, op, size) if dtype.startswith(("float", "bfloat")) else None
        if divide is None:  # jax's avg_pool divides the sum by the window size next: the average is that
            y = b.op1("Mul", [y, b.const(size, compute)])
        if not dtype.startswith(("float", "bfloat")):
            y = b.op1("Round", [y])
    if compute != dtype:
        y = b.cast(y, dtype)
    if len(kept) != 2:
        y = b.reshape(y, [*(src.shape[d] for d in kept), *(out.shape[d] for d in pooled)])
    y = b.transpose(y, [perm.index(d) for d in range(rank)])
    if divide is not None:
        cx.precomputed[divide] = y
    return [y]


def _divided_by(cx, op, size: int):
    """The result value of the one `divide` that uses `op`'s result, when it divides by the constant `size`."""
    uses = list(op.result.uses)
    if len(uses) != 1:
        return None
    user = uses[0].owner
    user = getattr(user, "operation", user)
    if user.name != "stablehlo.divide" or list(user.operands)[0] != op.result:
        return None
    divisor = splat_of(cx, list(user.operands)[1])
    return user.results[0] if divisor is not None and divisor == float(size) else None


def splat_of(cx, value) -> float | None:
    """The one number a value holds everywhere when it is a broadcast/reshape/convert of a constant, else None."""

    while op_name(value) in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert"):
        value = list(value.owner.operands)[0]
    if op_name(value) != "stablehlo.constant":
        return None
    t = cx.type_of(value)
    array = np.asarray(dense_value(cx, value.owner.attributes["value"], t.shape, t.dtype), dtype=np.float64)
    return float(array.reshape(-1)[0]) if array.size and (array == array.reshape(-1)[0]).all() else None


def sort(cx, op) -> list[str]:
    direction = sort_direction(cx, op)
    dim = cx.int_attr(op, "dimension")
    names = cx.inputs(op)
    t = cx.type_of(op.operands[0])
    b = cx.b
    k = b.ints([t.shape[dim]])
    keys = names[0]
    compute = t.dtype if t.dtype in ("float32", "float64", "float16", "int32", "int64") else None
    if compute is None:
        if t.dtype.startswith(("bfloat", "float8")) or t.dtype in ("int8", "int16", "uint8", "uint16", "bool"):
            keys, compute = b.cast(keys, "float32"), "float32"
        else:
            raise Unsupported("stablehlo.sort", f"keys of {t.dtype}")
    values, indices = b.op(("TopK"), [keys, k], 2, largest=int(direction == "descending"), sorted=1, axis=dim)
    outs = [values if compute == t.dtype else b.cast(values, t.dtype)]
    for name, value in zip(names[1:], list(op.operands)[1:]):
        if op_name(value) == "stablehlo.iota" and cx.int_attr(value.owner, "iota_dimension") == dim:
            vt = cx.type_of(value)
            outs.append(b.cast(indices, vt.dtype))  # argsort: the permutation itself
        else:
            outs.append(b.op1("GatherElements", [name, indices], axis=dim))
    return outs


HANDLERS = {
    "stablehlo.reduce": reduce,
    "stablehlo.reduce_window": reduce_window,
    "stablehlo.sort": sort,
}


def _window(x, init, combine, window, strides, padding="VALID"):
    return lax.reduce_window(x, init, combine, window, strides, padding)


CASES = (
    example("stablehlo.reduce", lambda x: jnp.sum(x, axis=1), f32(2, 5), onnx="ReduceSum",
            note="NaN: ONNX Runtime's ReduceMax/ReduceMin/ArgMax skip a NaN that XLA's max/min/argmax return"),
    example("stablehlo.reduce", lambda x: lax.reduce(x, 1.5, lax.add, (1,)), f32(2, 3), onnx=("ReduceSum", "Add"),
            name="init", note="an initial value that is not the identity is combined after"),
    example("stablehlo.reduce", lambda x: (jnp.max(x, axis=0), jnp.min(x), jnp.prod(x, axis=1)), f32(3, 4),
            onnx=("ReduceMax", "ReduceMin", "ReduceProd"), name="max-min-prod"),
    example("stablehlo.reduce", lambda x: (jnp.any(x, axis=1), jnp.all(x, axis=0)), b1(3, 4),
            onnx=("ReduceMax", "ReduceMin"), name="bool"),
    example("stablehlo.reduce", lambda x: jnp.sum(x, axis=0), i32(3, 4), onnx="ReduceSum", name="int"),
    example("stablehlo.reduce", lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0)), f32(3, 4),
            onnx=("ArgMax", "ArgMin"), name="argmax", note="a (value, iota) pair: ArgMax/ArgMin"),
    example("stablehlo.reduce", lambda x: jnp.argmax(x, axis=1), i32(2, 6), onnx="ArgMax", name="argmax-ties"),
    example("stablehlo.reduce", lambda x: (jnp.sum(x, axis=1), jnp.argmax(x, axis=0)), Arg((3, 4), "float64"),
            onnx=("ReduceSum", "ArgMax"), name="f64", x64=True, rtol=1e-12, atol=1e-14),
    example("stablehlo.reduce_window", lambda x: _window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1)),
            f32(1, 4, 4, 3), onnx="MaxPool", name="max-pool"),
    example("stablehlo.reduce_window", lambda x: _window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
            f32(1, 5, 5, 2), onnx="MaxPool", name="max-pool-same"),
    example("stablehlo.reduce_window", lambda x: _window(x, jnp.iinfo(jnp.int32).min, lax.max, (1, 2), (1, 1)),
            i32(2, 5), onnx=("MaxPool", "Cast"), name="int", note="integers pooled in float32"),
    example("stablehlo.reduce_window", lambda x: _window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1)) / 4.0,
            f32(1, 4, 4, 3), onnx="AveragePool", name="avg-pool", note="a sum window divided by its size; "
                                                                      "float64: no double AveragePool kernel"),
    example("stablehlo.reduce_window", lambda x: _window(x, jnp.inf, lax.min, (1, 3), (1, 1), ((0, 0), (1, 1))),
            f32(2, 5), onnx=("MaxPool", "Neg"), name="min-pool"),
    example("stablehlo.reduce_window", lambda x: jnp.cumsum(x, axis=1), f32(2, 5), onnx="CumSum", name="cumsum",
            note="max/min/sum windows only, no base dilation"),
    example("stablehlo.sort", lambda x: jnp.sort(x, axis=1), f32(3, 5), onnx="TopK",
            note="TopK over the whole axis; payloads by GatherElements"),
    example("stablehlo.sort", lambda x: jnp.argsort(-x, axis=0), f32(4, 3), onnx="TopK", name="argsort"),
    example("stablehlo.sort", lambda x: (jnp.argsort(x, axis=1), jnp.argsort(x, axis=1, descending=True)),
            i32(3, 6), onnx="TopK", name="argsort-ties", note="ties keep their order (stable), as in jax"),
    example("stablehlo.sort", lambda x: jnp.sort(x, axis=1), f32(2, 3, domain="special"), onnx="TopK", name="nan"),
    example("stablehlo.sort", lambda k, v: lax.sort((k, v), num_keys=1), f32(2, 5), i32(2, 5),
            onnx=("TopK", "GatherElements"), name="payload"),
)
