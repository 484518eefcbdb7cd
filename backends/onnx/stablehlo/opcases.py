"""Per-op test cases, declared in ops/ beside the handlers they exercise (as jax2onnx declares its plugins').

Each handler module has a `CASES` tuple of `OpCase`s next to its `HANDLERS`: a small JAX function that lowers
to the op (or, for an op jax never emits, a StableHLO module with the JAX function as its reference), its
inputs (shape, dtype, value domain), the ONNX op types the converted graph must hold, and the tolerance. The
per-op tests (tests/backends/test_stablehlo_ops.py) and the coverage page (docs/converter-ops.md, written by
`python -m multiexport.backends.onnx.stablehlo.coverage`) are both generated from them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


class _Deferred:
    """A module imported on first attribute use: declarations read `jnp.sin` without importing jax when the
    converter (or the coverage page) is imported; the function body runs only in the tests."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


jax = _Deferred("jax")
jnp = _Deferred("jax.numpy")
lax = _Deferred("jax.lax")

DOMAINS = ("normal", "positive", "unit", "int", "count", "bool", "index", "shift", "bits", "special", "edges")
# The float edge values, in order: an `edges` input of shape (7,) holds each once (pairs: broadcast two of them).
EDGES = (0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0)


@dataclass(frozen=True)
class Arg:
    """One input of a case."""

    shape: tuple[int, ...]  # static shape (symbolic modules: tests/backends/test_onnx_stablehlo.py)
    dtype: str = "float32"  # numpy dtype name
    # Where the values come from: normal (N(0, 1)), positive ([0.5, 2]), unit ((-0.9, 0.9)), int (-5..5, 0..9
    # unsigned), count (1..6: exponents, divisors), bool, index (-2..5: out of range both ways, to check clamping), shift (0..width+3: StableHLO's
    # shift by the width or more), bits (any 32-bit pattern: NaNs, infinities, subnormals), special (N(0, 1)
    # with inf, -inf and NaN planted), edges (EDGES repeated in order: signed zeros, infinities, NaN, +-1).
    domain: str = "normal"

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Values of this input, drawn from its domain by `rng` (a case's inputs are the same on every run)."""
        shape, dt = self.shape, np.dtype(self.dtype)
        if self.domain == "bool" or dt == np.bool_:
            return np.asarray(rng.random(shape) < 0.5)
        if self.domain == "edges":
            return np.resize(np.asarray(EDGES, dtype=dt), shape)
        if self.domain == "bits":
            return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32).view(dt)
        if self.domain in ("int", "count", "index", "shift"):
            low, high = {"int": (0 if dt.kind == "u" else -5, 10 if dt.kind == "u" else 6), "count": (1, 7),
                         "index": (-2, 6),
                         "shift": (0, dt.itemsize * 8 + 4)}[self.domain]
            return rng.integers(low, high, shape).astype(dt)
        if self.domain == "positive":
            values = rng.uniform(0.5, 2.0, shape)
        elif self.domain == "unit":
            values = rng.uniform(-0.9, 0.9, shape)
        else:
            values = rng.normal(size=shape)
        if self.domain == "special":
            flat = values.reshape(-1)
            flat[: 3] = [np.inf, -np.inf, np.nan][: flat.size]
        return np.asarray(values).astype(dt)


def f32(*shape: int, domain: str = "normal") -> Arg:
    return Arg(tuple(shape), "float32", domain)


def i32(*shape: int, domain: str = "int") -> Arg:
    return Arg(tuple(shape), "int32", domain)


def u32(*shape: int, domain: str = "int") -> Arg:
    return Arg(tuple(shape), "uint32", domain)


def b1(*shape: int) -> Arg:
    return Arg(tuple(shape), "bool", "bool")


@dataclass(frozen=True)
class OpCase:
    """A test of one handler: convert `fn` (or `mlir`), check the ONNX ops and run it against jax.jit(fn)."""

    op: str  # the handler's key in HANDLERS: the StableHLO op the exported module must contain
    fn: Callable[..., Any]  # the JAX function lowered (and the reference for `mlir` cases), one arg per `args`
    args: tuple[Arg, ...]  # its inputs
    onnx: tuple[str, ...] = ()  # ONNX op types the converted graph must hold (any depth); () for a pass-through
    name: str = ""  # what the case shows of the op (`relu`, `bool`); unique per op
    rtol: float = 1e-5  # float outputs: |got - want| <= atol + rtol * |want|; other dtypes compare exactly
    atol: float = 1e-6
    mlir: str = ""  # a StableHLO `func.func @main` for ops jax's export never writes; `fn` is then the reference
    refused: str = ""  # when set, the converter must refuse the op with an Unsupported whose text holds this
    note: str = ""  # a limit or remark for the coverage page
    x64: bool = False  # exported and run with jax's 64-bit types on (float64/int64 inputs stay 64-bit)

    @property
    def id(self) -> str:
        short = self.op.split(".", 1)[1] if "." in self.op else self.op
        return f"{short}-{self.name}" if self.name else short


def example(op: str, fn: Callable[..., Any], *args: Arg, onnx: tuple[str, ...] | str = (), **rest: Any) -> OpCase:
    """An OpCase with its inputs positional (`example("stablehlo.sine", lambda x: jnp.sin(x), f32(2, 3), onnx="Sin")`)."""
    return OpCase(op, fn, tuple(args), (onnx,) if isinstance(onnx, str) else tuple(onnx), **rest)

