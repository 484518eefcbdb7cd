"""Integer bit operations: shifts on unsigned views (ONNX's BitShift), arithmetic shift right and the one
bit reinterpretation models need (32-bit integers -> float32, jax.random's uniform) computed arithmetically."""

from __future__ import annotations

import numpy as np

from ..builder import Unsupported
from ..opcases import Arg, example, i32, jnp, lax, u32


def shift(cx, op) -> list[str]:
    """shift_left / shift_right_logical on unsigned views (ONNX BitShift takes unsigned integers only)."""
    t = cx.type_of(op.result)
    if not t.dtype.startswith(("int", "uint")):
        raise Unsupported(op.operation.name, f"on {t.dtype}")
    unsigned = t.dtype if t.dtype.startswith("uint") else "u" + t.dtype
    a, s = (cx.b.cast(v, unsigned) if t.dtype != unsigned else v for v in cx.inputs(op))
    direction = "LEFT" if op.operation.name == "stablehlo.shift_left" else "RIGHT"
    out = cx.b.cast(cx.b.op1("BitShift", [a, s], direction=direction), "int64")
    # StableHLO gives 0 for a shift by the width or more; C (and so ONNX Runtime) does not define it. The
    # select runs on int64: ONNX Runtime's Where and Less have no unsigned kernels.
    width = np.dtype(unsigned).itemsize * 8
    amount = cx.inputs(op)[1] if t.dtype == "int64" else cx.b.cast(cx.inputs(op)[1], "int64")
    out = cx.b.op1("Where", [cx.b.op1("Less", [amount, cx.b.const(width, "int64")]), out, cx.b.const(0, "int64")])
    return [cx.b.cast(out, t.dtype) if t.dtype != "int64" else out]


def shift_right_arithmetic(cx, op) -> list[str]:
    """floor(a / 2**s), exact in float64 for signed integers up to 32 bits (ONNX's BitShift is unsigned only).
    An amount out of [0, width) (negative read as unsigned: huge) fills with the sign, as a shift by width - 1."""
    t = cx.type_of(op.result)
    if t.dtype not in ("int8", "int16", "int32"):
        raise Unsupported(op.operation.name, f"on {t.dtype} (written for signed integers up to 32 bits)")
    b = cx.b
    a, s = (b.cast(v, "float64") for v in cx.inputs(op))
    width = float(np.dtype(t.dtype).itemsize * 8)
    out_of_range = b.op1("Or", [b.op1("Less", [s, b.const(0.0, "float64")]),
                                b.op1("GreaterOrEqual", [s, b.const(width, "float64")])])
    amount = b.op1("Where", [out_of_range, b.const(width - 1, "float64"), s])
    scaled = b.op1("Div", [a, b.op1("Pow", [b.const(2.0, "float64"), amount])])
    return [b.cast(b.op1("Floor", [scaled]), t.dtype)]


def bitcast_convert(cx, op) -> list[str]:
    """32-bit integer bits -> float32 (jax.random's uniform draws), computed from sign, exponent and mantissa:
    ONNX (opset 21) has no bit reinterpretation, and this is exact (float64 holds every float32)."""
    src, dst = cx.type_of(op.operands[0]), cx.type_of(op.result)
    if src.dtype not in ("uint32", "int32") or dst.dtype != "float32" or src.shape != dst.shape:
        raise Unsupported("stablehlo.bitcast_convert", f"{src.dtype} -> {dst.dtype}: ONNX (opset 21) has no bit "
                                                       "reinterpretation; only 32-bit integers -> float32 is written")
    b = cx.b
    (x,) = cx.inputs(op)
    bits = b.cast(x, "int64") if src.dtype == "uint32" else b.op1("BitwiseAnd", [b.cast(x, "int64"),
                                                                                  b.const(0xFFFFFFFF, "int64")])
    field = lambda shift, mask: b.op1("BitwiseAnd", [b.op1("Div", [bits, b.const(2**shift, "int64")]),  # noqa: E731
                                                     b.const(mask, "int64")])
    sign, exponent, mantissa = field(31, 1), field(23, 0xFF), field(0, 0x7FFFFF)
    f = lambda v: b.cast(v, "float64")  # noqa: E731
    m, e = f(mantissa), f(exponent)
    normal = b.op1("Mul", [b.op1("Add", [b.const(1.0, "float64"), b.op1("Mul", [m, b.const(2.0**-23, "float64")])]),
                           b.op1("Pow", [b.const(2.0, "float64"), b.op1("Sub", [e, b.const(127.0, "float64")])])])
    subnormal = b.op1("Mul", [m, b.const(2.0**-149, "float64")])
    special = b.op1("Where", [b.op1("Equal", [mantissa, b.const(0, "int64")]), b.const(np.inf, "float64"),
                              b.const(np.nan, "float64")])
    value = b.op1("Where", [b.op1("Equal", [exponent, b.const(0, "int64")]), subnormal,
                            b.op1("Where", [b.op1("Equal", [exponent, b.const(255, "int64")]), special, normal])])
    signed = b.op1("Where", [b.op1("Equal", [sign, b.const(1, "int64")]), b.op1("Neg", [value]), value])
    return [b.cast(signed, "float32")]


HANDLERS = {
    "stablehlo.bitcast_convert": bitcast_convert,
    "stablehlo.shift_left": shift,
    "stablehlo.shift_right_logical": shift,
    "stablehlo.shift_right_arithmetic": shift_right_arithmetic,
}

CASES = (
    example("stablehlo.shift_left", lambda a, s: lax.shift_left(a, s), i32(2, 3), Arg((2, 3), "int32", "shift"),
            onnx="BitShift", note="a shift by the width or more is 0"),
    example("stablehlo.shift_left", lambda a, s: lax.shift_left(a, s), Arg((2, 3), "int64", "int"),
            Arg((2, 3), "int64", "shift"), onnx="BitShift", name="int64", x64=True),
    example("stablehlo.shift_left", lambda a, s: lax.shift_left(a, s), i32(2, 3), i32(2, 3), onnx="BitShift",
            name="negative", note="a negative amount is a huge unsigned one: 0"),
    example("stablehlo.shift_right_logical", lambda a, s: lax.shift_right_logical(a, s), u32(2, 3),
            Arg((2, 3), "uint32", "shift"), onnx="BitShift"),
    example("stablehlo.shift_right_arithmetic", lambda a, s: a >> s, i32(2, 3), Arg((2, 3), "int32", "shift"),
            onnx=("Floor", "Pow"), note="floor(a / 2**s) in float64: signed integers up to 32 bits"),
    example("stablehlo.shift_right_arithmetic", lambda a, s: lax.shift_right_arithmetic(a, s),
            Arg((2, 3), "int8", "int"), Arg((2, 3), "int8", "int"), onnx="Floor", name="int8-negative"),
    example("stablehlo.bitcast_convert", lambda x: lax.bitcast_convert_type(x, jnp.float32),
            Arg((2, 3), "uint32", "bits"),
            onnx=("BitwiseAnd", "Pow"), note="only 32-bit integers -> float32 (jax.random's uniform)"),
)
