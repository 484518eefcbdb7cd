"""Constants, elementwise math, comparison, convert, select, clamp: one ONNX node (or a few) per op."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ..builder import Unsupported, np_dtype
from ..opcases import Arg, b1, example, f32, i32, jnp, lax, u32

_UNARY = {
    "stablehlo.negate": "Neg", "stablehlo.abs": "Abs", "stablehlo.exponential": "Exp", "stablehlo.log": "Log",
    "stablehlo.sqrt": "Sqrt", "stablehlo.tanh": "Tanh", "stablehlo.logistic": "Sigmoid", "stablehlo.sine": "Sin",
    "stablehlo.cosine": "Cos", "stablehlo.tan": "Tan", "stablehlo.floor": "Floor", "stablehlo.ceil": "Ceil",
    "stablehlo.round_nearest_even": "Round", "stablehlo.sign": "Sign",
}
_BINARY = {
    "stablehlo.add": "Add", "stablehlo.subtract": "Sub", "stablehlo.multiply": "Mul", "stablehlo.divide": "Div",
    "stablehlo.maximum": "Max", "stablehlo.minimum": "Min", "stablehlo.power": "Pow",
}
_LOGICAL = {"stablehlo.and": ("And", "BitwiseAnd"), "stablehlo.or": ("Or", "BitwiseOr"),
            "stablehlo.xor": ("Xor", "BitwiseXor")}
_COMPARE = {"EQ": "Equal", "LT": "Less", "GT": "Greater", "LE": "LessOrEqual", "GE": "GreaterOrEqual"}


def dense_value(cx, attr: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A dense elements attribute as a numpy array of `shape` and `dtype` (bfloat16 and float8 included)."""
    ir = cx.ir
    want = np_dtype(dtype)
    try:
        array = np.asarray(attr)
        if array.dtype != want:
            array = array.astype(want)
        return np.broadcast_to(array, shape).copy() if array.shape != shape else array
    except Exception:  # types the binding has no buffer for (bf16, f16 on some builds, float8)
        pass
    dense = ir.DenseElementsAttr(attr)
    if dense.is_splat:
        splat = dense.get_splat_value().maybe_downcast()
        value = splat.value
        return np.full(shape, value, dtype=want)
    text = str(attr)
    hexed = re.match(r'dense<"0x([0-9A-Fa-f]+)">', text)
    if hexed:
        return np.frombuffer(bytes.fromhex(hexed.group(1)), dtype=want).reshape(shape).copy()
    body = text[text.index("<") + 1:text.rindex(">")]
    body = body.replace("true", "1").replace("false", "0")
    numbers = [float.fromhex(n) if n.startswith(("0x", "-0x")) else float(n)
               for n in re.findall(r"-?0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|\d[\d.e+-]*)", body)]
    return np.asarray(numbers, dtype=np.float64).astype(want).reshape(shape)


def constant(cx, op) -> list[str]:
    t = cx.type_of(op.result)
    return [cx.b.const(dense_value(cx, cx.attr(op, "value"), t.shape, t.dtype), hint="const")]


def _elementwise(cx, op, op_type: str, **attrs) -> list[str]:
    """One ONNX op that broadcasts like numpy: lazy broadcasts stay unexpanded (see Converter.lazy)."""
    names, lazy = cx.broadcast_inputs(op)
    return [cx.lazy_result(cx.b.op1(op_type, names, **attrs), lazy)]


def unary(cx, op) -> list[str]:
    if op.operation.name == "stablehlo.tan" and cx.type_of(op.result).dtype == "float64":
        # ONNX Runtime's CPU provider has no double Tan kernel; its Sin and Cos have one.
        (x,), lazy = cx.broadcast_inputs(op)
        return [cx.lazy_result(cx.b.op1("Div", [cx.b.op1("Sin", [x]), cx.b.op1("Cos", [x])]), lazy)]
    return _elementwise(cx, op, _UNARY[op.operation.name])


def binary(cx, op) -> list[str]:
    kind = op.operation.name
    if kind == "stablehlo.power" and cx.type_of(op.result).dtype.startswith(("int", "uint")):
        # ONNX Pow on integers has no kernel for every width; compute in float64 (exact below 2**53).
        a, b = cx.inputs(op)
        t = cx.type_of(op.result).dtype
        return [cx.b.cast(cx.b.op1("Pow", [cx.b.cast(a, "float64"), cx.b.cast(b, "float64")]), t)]
    if kind == "stablehlo.maximum":  # max(x, 0): Relu, which ONNX Runtime fuses into the op before it
        (a, b), lazy = cx.broadcast_inputs(op)
        for x, other in ((a, b), (b, a)):
            zero = cx.b.known(other)
            if lazy is None and zero is not None and zero.size == 1 and float(zero.reshape(-1)[0]) == 0.0 \
                    and cx.type_of(op.result).dtype.startswith(("float", "bfloat")):
                return [cx.b.op1("Relu", [x])]
    return _elementwise(cx, op, _BINARY[kind])


def remainder(cx, op) -> list[str]:
    # StableHLO's remainder has the dividend's sign (C fmod), which is ONNX Mod with fmod=1.
    return _elementwise(cx, op, "Mod", fmod=1)


def logical(cx, op) -> list[str]:
    boolean, bitwise = _LOGICAL[op.operation.name]
    return _elementwise(cx, op, boolean if cx.type_of(op.result).dtype == "bool" else bitwise)


def logical_not(cx, op) -> list[str]:
    return _elementwise(cx, op, "Not" if cx.type_of(op.result).dtype == "bool" else "BitwiseNot")


def rsqrt(cx, op) -> list[str]:
    (x,), lazy = cx.broadcast_inputs(op)
    return [cx.lazy_result(cx.b.op1("Reciprocal", [cx.b.op1("Sqrt", [x])]), lazy)]


def expm1(cx, op) -> list[str]:
    t = cx.type_of(op.result)
    (x,), lazy = cx.broadcast_inputs(op)
    return [cx.lazy_result(cx.b.op1("Sub", [cx.b.op1("Exp", [x]), cx.b.const(1, t.dtype)]), lazy)]


def log1p(cx, op) -> list[str]:
    t = cx.type_of(op.result)
    (x,), lazy = cx.broadcast_inputs(op)
    return [cx.lazy_result(cx.b.op1("Log", [cx.b.op1("Add", [x, cx.b.const(1, t.dtype)])]), lazy)]


def cbrt(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    t = cx.type_of(op.result)
    magnitude = cx.b.op1("Pow", [cx.b.op1("Abs", [x]), cx.b.const(1 / 3, t.dtype)])
    return [cx.b.op1("Mul", [cx.b.op1("Sign", [x]), magnitude])]


def round_afz(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    t = cx.type_of(op.result)
    rounded = cx.b.op1("Floor", [cx.b.op1("Add", [cx.b.op1("Abs", [x]), cx.b.const(0.5, t.dtype)])])
    return [cx.b.op1("Mul", [cx.b.op1("Sign", [x]), rounded])]


def is_finite(cx, op) -> list[str]:
    (x,) = cx.inputs(op)
    bad = cx.b.op1("Or", [cx.b.op1("IsInf", [x]), cx.b.op1("IsNaN", [x])])
    return [cx.b.op1("Not", [bad])]


def atan2(cx, op) -> list[str]:
    """atan(y / x) moved to its quadrant, with C's atan2 at the edges: both infinite (±pi/4, ±3pi/4), x = ±0,
    and a signed zero picking the side of the branch cut (atan2(-0, -1) = -pi); NaN stays NaN."""
    y, x = cx.inputs(op)
    b = cx.b
    dt = cx.type_of(op.result).dtype
    zero, one, pi, half = b.const(0, dt), b.const(1, dt), b.const(math.pi, dt), b.const(math.pi / 2, dt)
    signed_neg = lambda v: b.op1("Or", [b.op1("Less", [v, zero]),  # noqa: E731  (-0 too: 1 / -0 = -inf)
                                        b.op1("Less", [b.op1("Div", [one, v]), zero])])
    y_neg, x_neg = signed_neg(y), signed_neg(x)
    both_inf = b.op1("And", [b.op1("IsInf", [y]), b.op1("IsInf", [x])])
    ratio = b.op1("Div", [b.op1("Where", [both_inf, b.op1("Sign", [y]), y]),
                          b.op1("Where", [both_inf, b.op1("Sign", [x]), x])])
    base = b.op1("Atan", [ratio])
    neg_pi = b.op1("Neg", [pi])
    out = b.op1("Where", [x_neg, b.op1("Add", [base, b.op1("Where", [y_neg, neg_pi, pi])]), base])
    both_zero = b.op1("Where", [x_neg, b.op1("Where", [y_neg, neg_pi, pi]), y])
    at_zero = b.op1("Where", [b.op1("Equal", [y, zero]), both_zero,
                              b.op1("Where", [b.op1("Greater", [y, zero]), half,
                                              b.op1("Where", [b.op1("Less", [y, zero]), b.op1("Neg", [half]), y])])])
    return [b.op1("Where", [b.op1("Equal", [x, zero]), at_zero, out])]


def compare(cx, op) -> list[str]:
    direction = cx.ir.Attribute(cx.attr(op, "comparison_direction"))
    text = re.search(r"comparison_direction (\w+)", str(direction))
    kind = text.group(1) if text else str(direction)
    (a, b), lazy = cx.broadcast_inputs(op)
    if kind == "NE":
        return [cx.lazy_result(cx.b.op1("Not", [cx.b.op1("Equal", [a, b])]), lazy)]
    if kind not in _COMPARE:
        raise Unsupported("stablehlo.compare", f"direction {kind}")
    if cx.type_of(op.operands[0]).dtype == "bool" and kind != "EQ":
        a, b = cx.b.cast(a, "int8"), cx.b.cast(b, "int8")  # ONNX orders numbers, not booleans
    return [cx.lazy_result(cx.b.op1(_COMPARE[kind], [a, b]), lazy)]


def convert(cx, op) -> list[str]:
    src, dst = cx.type_of(op.operands[0]), cx.type_of(op.result)
    (x,), lazy = cx.broadcast_inputs(op)
    if src.dtype == dst.dtype:
        return [cx.lazy_result(x, lazy)]  # the same name, standing for what it stood for
    return [cx.lazy_result(cx.b.cast(x, dst.dtype), lazy)]


# ONNX Runtime's Where kernels (CPU); other element types are selected in a wider type and cast back.
_WHERE_TYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8")
_WIDER = {"int8": "int32", "int16": "int32", "uint16": "int32", "uint32": "int64"}


def select(cx, op) -> list[str]:
    t = cx.type_of(op.result)
    if t.dtype == "bool":  # no boolean Where kernel: (p and a) or (not p and b)
        (pred, a, b), lazy = cx.broadcast_inputs(op)
        both = cx.b.op1("Or", [cx.b.op1("And", [pred, a]), cx.b.op1("And", [cx.b.op1("Not", [pred]), b])])
        return [cx.lazy_result(both, lazy)]
    if t.dtype in _WHERE_TYPES or t.dtype not in _WIDER:
        return _elementwise(cx, op, "Where")
    (pred, a, b), lazy = cx.broadcast_inputs(op)
    wide = _WIDER[t.dtype]
    chosen = cx.b.op1("Where", [pred, cx.b.cast(a, wide), cx.b.cast(b, wide)])
    return [cx.lazy_result(cx.b.cast(chosen, t.dtype), lazy)]


def clamp(cx, op) -> list[str]:
    (low, x, high), lazy = cx.broadcast_inputs(op)
    return [cx.lazy_result(cx.b.op1("Max", [cx.b.op1("Min", [x, high]), low]), lazy)]


def identity(cx, op) -> list[str]:
    return cx.inputs(op)


HANDLERS = {
    "stablehlo.constant": constant,
    **{k: unary for k in _UNARY},
    **{k: binary for k in _BINARY},
    **{k: logical for k in _LOGICAL},
    "stablehlo.not": logical_not,
    "stablehlo.remainder": remainder,
    "stablehlo.rsqrt": rsqrt,
    "stablehlo.exponential_minus_one": expm1,
    "stablehlo.log_plus_one": log1p,
    "stablehlo.cbrt": cbrt,
    "stablehlo.round_nearest_afz": round_afz,
    "stablehlo.is_finite": is_finite,
    "stablehlo.atan2": atan2,
    "stablehlo.compare": compare,
    "stablehlo.convert": convert,
    "stablehlo.select": select,
    "stablehlo.clamp": clamp,
    "stablehlo.optimization_barrier": identity,
}

_LOGISTIC = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.logistic %x : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"""
_INT_POWER = """
func.func @main(%a: tensor<2x3xi32>, %b: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %0 = stablehlo.power %a, %b : tensor<2x3xi32>
  return %0 : tensor<2x3xi32>
}"""
_UNARY_FN = {  # op -> (jax function, domain)
    "stablehlo.negate": (lambda x: -x, "normal"), "stablehlo.abs": (lambda x: jnp.abs(x), "normal"),
    "stablehlo.exponential": (lambda x: jnp.exp(x), "normal"), "stablehlo.log": (lambda x: jnp.log(x), "positive"),
    "stablehlo.sqrt": (lambda x: jnp.sqrt(x), "positive"), "stablehlo.tanh": (lambda x: jnp.tanh(x), "normal"),
    "stablehlo.sine": (lambda x: jnp.sin(x), "normal"),
    "stablehlo.cosine": (lambda x: jnp.cos(x), "normal"), "stablehlo.tan": (lambda x: jnp.tan(x), "unit"),
    "stablehlo.floor": (lambda x: jnp.floor(x), "normal"), "stablehlo.ceil": (lambda x: jnp.ceil(x), "normal"),
    "stablehlo.round_nearest_even": (lambda x: jnp.round(x * 2.0), "normal"),
    "stablehlo.sign": (lambda x: jnp.sign(x), "normal"),
}
_BINARY_FN = {
    "stablehlo.add": lambda a, b: a + b, "stablehlo.subtract": lambda a, b: a - b,
    "stablehlo.multiply": lambda a, b: a * b, "stablehlo.divide": lambda a, b: a / b,
    "stablehlo.maximum": lambda a, b: jnp.maximum(a, b), "stablehlo.minimum": lambda a, b: jnp.minimum(a, b),
    "stablehlo.power": lambda a, b: a ** b,
}

CASES = (
    example("stablehlo.constant", lambda x: x + jnp.asarray([1.0, -2.0, 3.5]), f32(2, 3),
            note="an initializer of the main graph, small ones shared by value"),
    *(example(op, fn, f32(2, 3, domain=domain), onnx=_UNARY[op]) for op, (fn, domain) in _UNARY_FN.items()),
    *(example(op, fn, f32(2, 3), f32(2, 3, domain="positive"), onnx=_BINARY[op]) for op, fn in _BINARY_FN.items()
      if op not in ("stablehlo.power",)),
    example("stablehlo.add", lambda a, b: a + b, i32(2, 3), i32(3), onnx="Add", name="int-broadcast"),
    example("stablehlo.maximum", lambda x: jnp.maximum(x, 0.0), f32(2, 3, domain="special"), onnx="Relu",
            name="relu", note="NaN propagates"),
    example("stablehlo.maximum", lambda a, b: jnp.maximum(a, b), f32(2, 3, domain="special"), f32(2, 3), onnx="Max",
            name="nan"),
    example("stablehlo.minimum", lambda a, b: jnp.minimum(a, b), f32(2, 3, domain="special"), f32(2, 3), onnx="Min",
            name="nan", note="NaN propagates"),
    example("stablehlo.divide", lambda a, b: lax.div(a, b), i32(2, 3), i32(2, 3, domain="count"), onnx="Div",
            name="int", note="integers truncate toward zero in both"),
    example("stablehlo.exponential", lambda x: jnp.exp(x), Arg((2, 3), "float16"), onnx="Exp", name="f16",
            rtol=1e-3, atol=1e-3),
    example("stablehlo.tan", lambda x: jnp.tan(x), Arg((2, 3), "float64", "unit"), onnx=("Sin", "Cos"), name="f64",
            x64=True, rtol=1e-12, atol=1e-14, note="float64 as Sin / Cos (ONNX Runtime has no double Tan)"),
    example("stablehlo.add", lambda a, b: a + b * 2.5, Arg((2, 3), "float64"), Arg((2, 3), "float64"), onnx="Add",
            name="f64", x64=True, rtol=1e-14, atol=0.0),
    example("stablehlo.power", lambda a, b: a ** b, f32(2, 3, domain="positive"), f32(2, 3), onnx="Pow"),
    example("stablehlo.power", lambda a, b: jnp.power(a, b), i32(2, 3), i32(2, 3, domain="count"),
            onnx=("Pow", "Cast"), name="int", mlir=_INT_POWER, note="integers through float64 (exact below 2**53)"),
    example("stablehlo.logistic", lambda x: lax.logistic(x), f32(2, 3), onnx="Sigmoid", mlir=_LOGISTIC,
            note="jax's CPU lowering writes 1 / (1 + exp(-x)) instead"),
    example("stablehlo.and", lambda a, b: a & b, b1(2, 3), b1(2, 3), onnx="And"),
    example("stablehlo.and", lambda a, b: a & b, i32(2, 3), i32(2, 3), onnx="BitwiseAnd", name="int"),
    example("stablehlo.or", lambda a, b: a | b, b1(2, 3), b1(2, 3), onnx="Or"),
    example("stablehlo.or", lambda a, b: a | b, u32(2, 3), u32(2, 3), onnx="BitwiseOr", name="uint"),
    example("stablehlo.xor", lambda a, b: a ^ b, b1(2, 3), b1(2, 3), onnx="Xor"),
    example("stablehlo.xor", lambda a, b: a ^ b, i32(2, 3), i32(2, 3), onnx="BitwiseXor", name="int"),
    example("stablehlo.not", lambda a: ~a, b1(2, 3), onnx="Not"),
    example("stablehlo.not", lambda a: ~a, i32(2, 3), onnx="BitwiseNot", name="int"),
    example("stablehlo.remainder", lambda a, b: lax.rem(a, b), f32(2, 3), f32(2, 3, domain="positive"), onnx="Mod",
            note="the dividend's sign (Mod fmod=1)"),
    example("stablehlo.remainder", lambda a, b: lax.rem(a, b), i32(2, 3), i32(2, 3, domain="count"),
            onnx="Mod", name="int", note="an integer divisor of 0 is kept out of the inputs: undefined in C"),
    example("stablehlo.rsqrt", lambda x: lax.rsqrt(x), f32(2, 3, domain="positive"), onnx=("Reciprocal", "Sqrt")),
    example("stablehlo.exponential_minus_one", lambda x: jnp.expm1(x), f32(2, 3), onnx=("Exp", "Sub"),
            note="exp(x) - 1: absolute, not relative, accuracy near 0"),
    example("stablehlo.log_plus_one", lambda x: jnp.log1p(x), f32(2, 3, domain="positive"), onnx=("Log", "Add"),
            note="log(1 + x): absolute, not relative, accuracy near 0"),
    example("stablehlo.cbrt", lambda x: jnp.cbrt(x), f32(2, 3), onnx=("Pow", "Sign")),
    example("stablehlo.round_nearest_afz", lambda x: lax.round(x * 2.0), f32(2, 3), onnx=("Floor", "Sign")),
    example("stablehlo.is_finite", lambda x: jnp.isfinite(x), f32(2, 3, domain="special"), onnx=("IsInf", "IsNaN")),
    example("stablehlo.atan2", lambda y, x: jnp.arctan2(y, x), f32(3, 4), f32(3, 4), onnx=("Atan", "Where"),
            note="float64: ONNX Runtime has no double Atan kernel (the export says unsupported-dtype)"),
    example("stablehlo.atan2", lambda y, x: jnp.arctan2(y[:, None], x[None, :]), f32(7, domain="edges"),
            f32(7, domain="edges"), onnx="Atan", name="edges", note="C's atan2 at ±0, ±inf and NaN (every pair)"),
    example("stablehlo.compare", lambda a, b: (a < b, a >= b, a != b, a == b), f32(2, 3), f32(2, 3),
            onnx=("Less", "GreaterOrEqual", "Not", "Equal")),
    example("stablehlo.compare", lambda a, b: (a > b, a <= b), b1(2, 3), b1(2, 3), onnx=("Greater", "Cast"),
            name="bool", note="booleans ordered through int8"),
    example("stablehlo.convert", lambda x: (x * 3.0).astype(jnp.int32), f32(2, 3), onnx="Cast",
            note="float -> int truncates toward zero in both"),
    example("stablehlo.convert", lambda x: (x * 3.0).astype(jnp.uint8), f32(2, 3, domain="positive"), onnx="Cast",
            name="uint8"),
    example("stablehlo.convert", lambda x: x.astype(jnp.float32), b1(2, 3), onnx="Cast", name="from-bool"),
    example("stablehlo.select", lambda p, a, b: jnp.where(p, a, b), b1(2, 3), f32(2, 3), f32(2, 3), onnx="Where"),
    example("stablehlo.select", lambda p, a, b: jnp.where(p, a, b), b1(2, 3), b1(2, 3), b1(2, 3),
            onnx=("And", "Or"), name="bool", note="no boolean Where kernel: and/or"),
    example("stablehlo.select", lambda p, a, b: jnp.where(p, a, b).astype(jnp.int8), b1(2, 3),
            Arg((2, 3), "int8", "int"), Arg((2, 3), "int8", "int"), onnx=("Where", "Cast"), name="int8"),
    example("stablehlo.clamp", lambda x: lax.clamp(-0.5, x, 0.5), f32(2, 3), onnx=("Max", "Min")),
    example("stablehlo.optimization_barrier", lambda x: lax.optimization_barrier(x) * 2.0, f32(2, 3),
            note="its operands"),
)
