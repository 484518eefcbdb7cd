"""The ONNX graph being written: nodes, constants and value names, one builder per (sub)graph.

Value names are unique across the whole model (one counter shared by a graph and its subgraphs), so a
subgraph may read any value of an enclosing graph by name, as ONNX's outer-scope rule allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

# MLIR element type as printed -> numpy dtype name (ml_dtypes for bfloat16 and the float8 types).
ELEMENT_TYPES = {
    "f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i1": "bool",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz",
}


def op_name(value) -> str:
    """The name of the op defining an MLIR value (`stablehlo.iota`), or "" for a block argument."""
    owner = value.owner
    op = getattr(owner, "operation", owner)
    name = getattr(op, "name", "")
    return name if isinstance(name, str) else ""


class Unsupported(Exception):
    """An op or a form of an op this route cannot write in ONNX; `op` names it for the message."""

    def __init__(self, op: str, why: str = ""):
        super().__init__(f"{op}: {why}" if why else op)
        self.op = op
        self.why = why


def np_dtype(name: str) -> np.dtype:
    if name.startswith(("bfloat16", "float8")):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def onnx_type(dtype: np.dtype | str) -> int:
    """The ONNX TensorProto element type of a numpy dtype (ml_dtypes' names included)."""
    from onnx import TensorProto, helper

    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    special = {"bfloat16": TensorProto.BFLOAT16, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
               "float8_e5m2": TensorProto.FLOAT8E5M2, "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
               "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ}
    if name in special:
        return special[name]
    return helper.np_dtype_to_tensor_dtype(np.dtype(name))


@dataclass(frozen=True)
class TensorType:
    """A tensor type: shape and numpy dtype name (`float32`, `bool`, `bfloat16`).

    shape: each dimension's size; None for a dynamic one (a symbolic dimension, only in a symbolic conversion).
    dtype: the numpy dtype name.
    """

    shape: tuple[int | None, ...]
    dtype: str

    @property
    def dynamic(self) -> bool:
        return any(d is None for d in self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass
class Names:
    """The model-wide name counter (shared by every builder of one model)."""

    count: int = 0
    taken: set[str] = field(default_factory=set)

    def fresh(self, hint: str) -> str:
        while True:
            self.count += 1
            name = f"{hint}_{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name


class Builder:
    """Nodes and initializers of one graph. `op` appends a node and returns its output names."""

    def __init__(self, names: Names, root: "Builder | None" = None):
        self.names = names
        self.root = root or self  # constants go to the main graph: visible from every subgraph
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._consts: dict[tuple, str] = {}
        self.small: dict[str, np.ndarray] = {}  # name -> value of every small constant (patterns read them)
        self._transposed: dict[str, tuple[str, list[int]]] = {}  # a Transpose's output -> (its input, perm)

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, hint: str = "", **attrs: Any) -> list[str]:
        from onnx import helper

        outs = [self.names.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.names.fresh(f"n_{op_type}"),
                                           **{k: v for k, v in attrs.items() if v is not None}))
        return outs

    def op1(self, op_type: str, inputs: Sequence[str], hint: str = "", **attrs: Any) -> str:
        return self.op(op_type, inputs, 1, hint, **attrs)[0]

    def const(self, value: Any, dtype: str | np.dtype | None = None, hint: str = "c") -> str:
        """An initializer of the main graph (small ones shared by value)."""
        from onnx import numpy_helper

        array = np.asarray(value, dtype=np_dtype(dtype) if isinstance(dtype, str) else dtype)
        root = self.root
        key = (array.dtype.name, array.shape, array.tobytes()) if array.size <= 16 else None
        if key is not None and key in root._consts:
            return root._consts[key]
        name = self.names.fresh(hint)
        if array.dtype.name.startswith(("bfloat16", "float8")):
            from onnx import helper

            tensor = helper.make_tensor(name, onnx_type(array.dtype), array.shape,
                                        array.view(np.uint8 if array.dtype.itemsize == 1 else np.uint16).tobytes(),
                                        raw=True)
        else:
            tensor = numpy_helper.from_array(array, name)
        root.initializers.append(tensor)
        if key is not None:
            root._consts[key] = name
            root.small[name] = array
        return name

    def known(self, name: str) -> np.ndarray | None:
        """The value of `name` when it is a small constant, else None."""
        return self.root.small.get(name)

    def ints(self, values: Sequence[int | None]) -> str:
        listed = list(values)
        if any(v is None for v in listed):  # a dynamic dimension has no constant: the caller must compute it
            raise Unsupported("shape", f"a constant of sizes {listed} with a dynamic dimension")
        return self.const(np.asarray(listed, dtype=np.int64), hint="i")

    # -- small compositions used by many ops --------------------------------------------------
    def cast(self, x: str, dtype: str) -> str:
        return self.op1("Cast", [x], to=onnx_type(dtype))

    def reshape(self, x: str, shape: Sequence[int | None]) -> str:
        """x reshaped to `shape`; one dynamic dimension (None) is inferred from the element count (-1), which is
        exact when every other size is known and non-zero. More than one is refused (it would be ambiguous)."""
        shape = list(shape)
        if None in shape:
            if shape.count(None) > 1 or 0 in shape:
                raise Unsupported("reshape", f"to {shape}: more than one dynamic dimension (or a zero size beside "
                                             "one) cannot be inferred from the element count")
            shape = [-1 if d is None else d for d in shape]
        return self.op1("Reshape", [x, self.ints(shape)])

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        """x transposed by `perm`; a transpose of a transpose this builder wrote is one (or none) of x's input."""
        perm = list(perm)
        if x in self._transposed:
            source, first = self._transposed[x]
            x, perm = source, [first[p] for p in perm]
        if perm == sorted(perm):
            return x
        out = self.op1("Transpose", [x], perm=perm)
        self._transposed[out] = (x, perm)
        return out

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op1("Unsqueeze", [x, self.ints(axes)])


class Lazy(str):
    """An ONNX name that stands for a larger tensor (`shape`, None for a dynamic dimension) by numpy
    broadcasting; `dims`: the ONNX name of that shape as an int64 tensor, for a dynamic one. See Converter.lazy."""

    shape: tuple[int | None, ...]
    dims: str | None

    def __new__(cls, name: str, shape: tuple[int | None, ...], dims: str | None = None) -> "Lazy":
        made = super().__new__(cls, name)
        made.shape = tuple(shape)
        made.dims = dims
        if dims is None and None in made.shape:
            raise Unsupported("broadcast", f"a lazy broadcast to {list(made.shape)} without its shape tensor")
        return made


class LazyShape(tuple):
    """A dynamic shape a lazy result stands for (None per dynamic dimension) and `dims`, the ONNX name of that
    shape as an int64 tensor (Converter.broadcast_inputs returns it; Converter.lazy_result reads it)."""

    dims: str

    def __new__(cls, shape, dims: str) -> "LazyShape":
        made = super().__new__(cls, shape)
        made.dims = dims
        return made
