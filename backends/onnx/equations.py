"""What jax2onnx gives at conversion time, recorded for `multiexport locate`: which tensor of the shipped graph
holds the output of which jaxpr equation, with the equation's source line.

jax2onnx lowers a jaxpr (traced with its plugins: a flax `nn.Conv` is one `linen.conv` equation) equation by
equation, binding each output variable to an ONNX value; it then optimizes the graph (transposes pushed
through, pairs removed), and a name it bound may afterwards hold another value (`relu_out_0` in NCHW instead of
the equation's NHWC). So a name alone proves nothing. Recorded here, while jax2onnx converts: each equation's
primitive, name stack, source frames and the name of each output as bound (its `_append_primitive_call_record`
hook, the one its `record_primitive_calls_file` option writes from), and the graph as lowered, before its
optimizer ran. Each value of both graphs gets a *canonical expression* (the op, its attributes and its inputs'
expressions; graph inputs by position, constants by content; a Transpose composes a permutation instead of
adding a node, and elementwise ops commute with it; a Reshape is its input viewed in another shape, so the
3-D to 2-D Reshape pair jax2onnx lowers around a Gemm's Gelu and its optimizer drops changes no expression
after it): an equation's output holds in the shipped graph exactly
the tensor whose expression is the one it had as lowered, read through the recorded permutation. An output
whose expression the optimizer changed (a bias folded into a Conv, a subgraph rewritten) is not recorded:
locate says it cannot map it.

The table (`EQUATION_TABLE_KEY` in the model's metadata_props; OpenVINO keeps it in rt_info) lists one entry
per recorded output: the tensor, the permutation from it to the equation's layout, shape, dtype, the
equation's primitive, source line and name stack, which input leaves it depends on, and its nearest recorded
ancestors, so locate can pair it with the reference's StableHLO ops (`multiexport.sdk.map_equations`) and check
every pairing against both graphs' dependencies.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from multiexport.sdk import EQUATION_TABLE_KEY, EQUATION_TABLE_VERSION, user_frame

# Ops that commute with a transpose of their input (elementwise on one tensor, attributes layout-free).
UNARY = frozenset({"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Erf", "Sin", "Cos", "Reciprocal",
                   "Floor", "Ceil", "Round", "Sign", "Softplus", "Softsign", "Cast", "Not", "IsNaN", "IsInf",
                   "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Gelu", "Mish"})
# Elementwise on several tensors: commute with one transpose applied to every input (equal ranks).
NARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
                  "GreaterOrEqual", "And", "Or", "Xor", "Where", "Mod", "PRelu"})

# ONNX element types (TensorProto numbering) -> those that hold each of their values exactly: a Cast there and
# back is the value itself (jax2onnx casts a bool mask to float and back to bool; its optimizer drops the pair).
_BOOL, _INT8, _UINT8, _INT16, _UINT16, _INT32, _INT64, _UINT32, _UINT64 = 9, 3, 2, 5, 4, 6, 7, 12, 13
_FLOAT, _DOUBLE, _FLOAT16, _BFLOAT16 = 1, 11, 10, 16
LOSSLESS = {_BOOL: frozenset({_FLOAT, _DOUBLE, _FLOAT16, _BFLOAT16, _INT8, _UINT8, _INT16, _UINT16, _INT32, _INT64,
                              _UINT32, _UINT64}),
            **{t: frozenset({_FLOAT, _DOUBLE, _INT32, _INT64}) for t in (_INT8, _UINT8, _INT16, _UINT16)},
            _INT32: frozenset({_INT64, _DOUBLE}), _FLOAT16: frozenset({_FLOAT, _DOUBLE}),
            _BFLOAT16: frozenset({_FLOAT, _DOUBLE}), _FLOAT: frozenset({_DOUBLE})}


_PATCHING = threading.Lock()


@dataclass
class Recorder:
    """What one jax2onnx conversion gave: `calls` (primitive, name stack, frames innermost first, per output
    (bound name, shape, dtype)), and `lowered`, the graph before jax2onnx's optimizer ran (a clone)."""

    calls: list[tuple[str, str, list[str], list[tuple[str, tuple, str]]]] = field(default_factory=list)
    # (a symbolic dimension is kept as its expression's text, `b` or `2*b`: locate binds it to the trial's size)
    lowered: Any = None
    failure: str = ""


@contextmanager
def recording() -> Iterator[Recorder]:
    """Record the equations and the lowered graph of the jax2onnx conversion run inside (see the module doc).
    jax2onnx's output is unchanged: the hooks only read. Should its internals not be where they are expected,
    nothing is recorded and the conversion goes on (locate then says it cannot map)."""
    rec = Recorder()
    try:
        import jax2onnx.converter.conversion_api as api
        import jax2onnx.converter.lowering_dispatch as dispatch

        bound = dispatch._bound_value_name
    except (ImportError, AttributeError) as exc:
        rec.failure = f"jax2onnx's conversion hooks are not where expected ({exc})"
        yield rec
        return

    def on_equation(ctx: Any, eqn: Any, **kwargs: Any) -> Any:
        try:
            info = eqn.source_info
            frames = [f"{f.file_name}:{f.line_num}" for f in info.traceback.frames] if info.traceback else []
            outs = [(bound(ctx, v), tuple(int(d) if isinstance(d, int) else str(d) for d in getattr(v.aval, "shape", ())),
                     str(getattr(v.aval, "dtype", ""))) for v in eqn.outvars]
            rec.calls.append((str(eqn.primitive.name), str(info.name_stack), frames, outs))
        except Exception as exc:  # a record we cannot read is a record missing, never a failed conversion
            rec.failure = rec.failure or f"an equation's record was unreadable ({type(exc).__name__})"
        return append(ctx, eqn, **kwargs)

    def on_optimize(model: Any, *args: Any, **kwargs: Any) -> Any:
        if rec.lowered is None:
            try:
                rec.lowered = model.clone()
            except Exception as exc:
                rec.failure = rec.failure or f"the lowered graph could not be copied ({type(exc).__name__})"
        return optimize(model, *args, **kwargs)

    with _PATCHING:  # one conversion at a time holds the hooks (jax2onnx's converter is module-global state)
        append, optimize = dispatch._append_primitive_call_record, api.optimize_graph
        dispatch._append_primitive_call_record, api.optimize_graph = on_equation, on_optimize
        try:
            yield rec
        finally:
            dispatch._append_primitive_call_record, api.optimize_graph = append, optimize


def attach_table(model: Any, rec: Recorder) -> int:
    """Write the equation table into `model`'s metadata_props (the shipped graph, inputs named by leaf); return
    how many outputs it maps. Nothing is written when nothing was recorded."""
    if rec.lowered is None or not rec.calls:
        return 0
    text, count = table_text(model, rec)
    model.metadata_props[EQUATION_TABLE_KEY] = text
    return count


def table_text(model: Any, rec: Recorder) -> tuple[str, int]:
    """(the table as JSON, entries)."""
    canon = _Canon()
    lowered = canon.graph(rec.lowered.graph)
    shipped = canon.graph(model.graph)
    by_expr: dict[int, tuple[Any, tuple[int, ...] | None]] = {}
    for value, (expr, perm) in shipped.items():
        if value.name and (expr not in by_expr or (perm is None and by_expr[expr][1] is not None)):
            by_expr[expr] = (value, perm)
    lowered_by_name = {v.name: v for v in lowered if v.name}
    inputs = [v.name for v in model.graph.inputs]
    entries: list[list[Any]] = []
    tensor_entry: dict[Any, int] = {}
    for primitive, stack, frames, outs in rec.calls:
        for name, shape, dtype in outs:
            value = lowered_by_name.get(name)
            if value is None or value not in lowered:
                continue
            expr, perm = lowered[value]
            found = by_expr.get(expr)
            if found is None or found[0] in tensor_entry:
                continue  # the optimizer rewrote it, or another equation holds the same value already
            tensor, shipped_perm = found
            to_jax = _to_jax(shipped_perm, perm, len(shape))
            shape_there = _shape(tensor)
            if to_jax is None or (shape_there is not None and tuple(shape_there[i] for i in to_jax) != shape):
                continue
            tensor_entry[tensor] = len(entries)
            entries.append([tensor.name, None if to_jax == tuple(range(len(shape))) else list(to_jax), list(shape),
                            dtype, primitive, stack, [_base_frame(user_frame(frames))] if frames else []])
    deps, near = _dependencies(model.graph, tensor_entry, inputs)
    for entry, tensor in zip(entries, tensor_entry):
        entry.extend([format(deps.get(tensor, 0), "x"), sorted(near.get(tensor, ()))])
    return json.dumps({"version": EQUATION_TABLE_VERSION, "inputs": inputs,
                       "fields": ["tensor", "to_jax", "shape", "dtype", "primitive", "name_stack", "frames",
                                  "inputs_mask", "near"], "entries": entries}, separators=(",", ":")), len(entries)


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = value.shape
    if shape is None:
        return None
    dims = [d for d in shape if isinstance(d, int)]
    return tuple(dims) if len(dims) == len(shape) else None


def _to_jax(shipped: tuple[int, ...] | None, lowered: tuple[int, ...] | None, rank: int) -> tuple[int, ...] | None:
    """The permutation r with jax_value = np.transpose(shipped_value, r), both being one expression E transposed
    (shipped = E.transpose(shipped), the equation's value = E.transpose(lowered))."""
    ident = tuple(range(rank))
    s, lo = shipped or ident, lowered or ident
    if len(s) != rank or len(lo) != rank:
        return None
    inverse = [0] * rank
    for i, p in enumerate(s):
        inverse[p] = i
    return tuple(inverse[p] for p in lo)


class _Canon:
    """Canonical expressions of values, interned to ints shared across graphs: equal ints, equal computations
    of the graph inputs (by position) and constants (by content)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.tensors: dict[int, int] = {}
        self.shapes: dict[int, tuple] = {}  # expression -> its shape, where a value of it (untransposed) has one
        self.views: dict[int, tuple[int, tuple]] = {}  # a reshape's expression -> (what it reshapes, to which shape)
        self.casts: dict[int, tuple[int, int]] = {}  # a lossless Cast's expression -> (its input's, that input's type)

    def intern(self, key: tuple) -> int:
        return self.ids.setdefault(key, len(self.ids))

    def graph(self, graph: Any) -> dict[Any, tuple[int, tuple[int, ...] | None]]:
        """value -> (expression id, permutation or None); nodes in graph order (ONNX requires topological)."""
        out: dict[Any, tuple[int, tuple[int, ...] | None]] = {}
        for i, value in enumerate(graph.inputs):
            out[value] = (self.intern(("in", i)), None)
        for value in graph.initializers.values():
            out[value] = (self.constant(value.const_value), None)
        for node in graph:
            ins = [self.input(out, v) for v in node.inputs]
            results = self.node(node, ins)
            for value, result in zip(node.outputs, results):
                out[value] = result
                shape = _dims(value)
                if result[1] is None and shape is not None:
                    self.shapes.setdefault(result[0], shape)
        return out

    def input(self, out: dict, value: Any) -> tuple[int, tuple[int, ...] | None]:
        if value is None:
            return (self.intern(("none",)), None)
        if value not in out:  # read from an outer scope or unknown: an expression of its own, equal to nothing else
            out[value] = (self.intern(("free", id(value))), None)
        return out[value]

    def constant(self, tensor: Any) -> int:
        if tensor is None:
            return self.intern(("opaque", len(self.ids)))
        if id(tensor) not in self.tensors:
            array = tensor.numpy()
            digest = hashlib.sha256(array.tobytes()).hexdigest()
            self.tensors[id(tensor)] = self.intern(("const", str(array.dtype), array.shape, digest))
        return self.tensors[id(tensor)]

    def node(self, node: Any, ins: list) -> list[tuple[int, tuple[int, ...] | None]]:
        op = node.op_type
        if node.domain in ("", "ai.onnx") and op == "Identity" and len(ins) == 1:
            return [ins[0]]
        if node.domain in ("", "ai.onnx") and op == "Constant" and "value" in node.attributes:
            return [(self.constant(node.attributes["value"].value), None)]
        if node.domain in ("", "ai.onnx") and op == "Transpose" and len(ins) == 1 and "perm" in node.attributes:
            expr, q = ins[0]
            p = tuple(node.attributes["perm"].value)
            q = q or tuple(range(len(p)))
            if len(q) != len(p):
                return [(self.intern(("T", expr, q, p)), None)]
            c = tuple(q[i] for i in p)
            return [(expr, None if c == tuple(range(len(c))) else c)]
        dims = _dims(node.outputs[0]) if node.outputs else None
        if node.domain in ("", "ai.onnx") and op == "Reshape" and ins and dims is not None:
            expr, q = ins[0]
            return [(self.reshaped(expr if q is None else self.intern(("T", expr, q)), dims), None)]
        if node.domain in ("", "ai.onnx") and op == "Cast" and len(ins) == 1 and "to" in node.attributes:
            back = self.cast(ins[0], node)
            if back is not None:
                return [back]
        attrs = self.attributes(node)
        if node.domain in ("", "ai.onnx") and len(node.outputs) == 1:
            perms = {q for _, q in ins}
            if op in UNARY and len(ins) == 1 and ins[0][1] is None and ins[0][0] in self.views:
                base, shape = self.views[ins[0][0]]  # elementwise on a reshape: the reshape of it elementwise
                inner = self.intern((op, attrs, (base,)))
                if base in self.shapes:
                    self.shapes.setdefault(inner, self.shapes[base])
                return [(self.reshaped(inner, shape), None)]
            if (op in UNARY and len(ins) == 1) or (op in NARY and len(perms) == 1 and None not in perms):
                q = ins[0][1]
                return [(self.intern((op, attrs, tuple(e for e, _ in ins))), q)]
        materialized = tuple(e if q is None else self.intern(("T", e, q)) for e, q in ins)
        head = self.intern((op, node.domain, attrs, materialized))
        return [(self.intern((head, k)), None) for k in range(len(node.outputs))]

    def cast(self, value: tuple[int, tuple[int, ...] | None], node: Any) -> tuple[int, tuple[int, ...] | None] | None:
        """A Cast back to the type a lossless Cast came from is that Cast's input: (its expression, `value`'s
        permutation). Otherwise None, after noting a lossless Cast's expression for a later one."""
        expr, perm = value
        to = int(node.attributes["to"].value)
        if expr in self.casts and self.casts[expr][1] == to:
            return (self.casts[expr][0], perm)
        source = getattr(node.inputs[0], "dtype", None)
        if source is not None and to in LOSSLESS.get(int(source), ()):
            out = self.intern(("Cast", self.attributes(node), (expr,)))
            self.casts[out] = (expr, int(source))
        return None

    def reshaped(self, expr: int, shape: tuple) -> int:
        """`expr` reshaped to `shape` (row-major, as ONNX's Reshape): a reshape of a reshape is one reshape of
        the first's input, and a reshape to the shape the value has is the value itself. So the Reshape pairs
        jax2onnx lowers around a Gemm or an elementwise op (3-D to 2-D and back) and its optimizer removes are the
        same expression with them and without."""
        base = self.views[expr][0] if expr in self.views else expr
        if self.shapes.get(base) == shape:
            return base
        view = self.intern(("R", base, shape))
        self.views[view] = (base, shape)
        self.shapes[view] = shape
        return view

    def attributes(self, node: Any) -> tuple:
        items: list[tuple[str, Any]] = []
        for name, attr in sorted(node.attributes.items()):
            value = attr.value
            if hasattr(value, "numpy"):
                items.append((name, self.constant(value)))
            elif isinstance(value, (int, float, str, bytes)) or value is None:
                items.append((name, value))
            elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str, bytes)) for v in value):
                items.append((name, tuple(value)))
            else:  # a subgraph or a tensor list: equal to no other node's
                items.append((name, ("opaque", len(self.ids), id(node))))
        return tuple(items)


def _dims(value: Any) -> tuple | None:
    """A value's shape, a symbolic dimension by its name (`b`), None when unknown or of unknown rank."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    dims = tuple(d if isinstance(d, int) else getattr(d, "value", None) for d in shape)
    return dims if all(d is not None for d in dims) else None


def _dependencies(graph: Any, entries: dict[Any, int], inputs: list[str]) -> tuple[dict[Any, int], dict[Any, set[int]]]:
    """(tensor -> bit mask of the graph inputs it depends on, tensor -> the entries among its nearest recorded
    ancestors), over the shipped graph."""
    position = {v: i for i, v in enumerate(graph.inputs)}
    deps: dict[Any, int] = {v: 1 << i for v, i in position.items()}
    near: dict[Any, set[int]] = {}
    for node in graph:
        mask, parents = 0, set()
        for v in node.inputs:
            if v is None:
                continue
            mask |= deps.get(v, 0)
            if v in entries:
                parents.add(entries[v])
            else:
                parents |= near.get(v, set())
        for v in node.outputs:
            deps[v], near[v] = mask, parents
    return deps, near


def table_in(path: Path) -> str | None:
    """The equation table's text in a shipped model.onnx, or None (for tests and tools)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((p.value for p in model.metadata_props if p.key == EQUATION_TABLE_KEY), None)


def _base_frame(frame: str) -> str:
    """`model.py:42` of `/home/me/project/model.py:42`: an artifact names the user's file, never its directory
    (a shipped model must not carry the exporting machine's paths; locate pairs by base name and line)."""
    file, _, line = frame.rpartition(":")
    return f"{posixpath.basename(file.replace(chr(92), '/'))}:{line}" if file else frame
