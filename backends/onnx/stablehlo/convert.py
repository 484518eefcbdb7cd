"""Walk a StableHLO module and write the ONNX graph that computes the same thing.

The module is the one `jax.export` produced (after jax's own lowering: every op is StableHLO, CHLO
composites carry their decomposition). Each op goes through its handler in `ops/`; an op without one,
or a form of an op ONNX cannot express, raises `Unsupported` naming it. `func.call` and `composite`
are inlined (a composite through its own decomposition function), regions become ONNX subgraphs
(`while` -> Loop, `case`/`if` -> If) or are read as a pattern (a reduce's body is `add` -> ReduceSum).
A module with symbolic dimensions (`convert_module`'s shapes) is written with its dynamic sizes computed in
the graph, as far as DYNAMIC_OPS reach; an op beyond them is refused, and the export falls back to fixed sizes.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from multiexport.sdk import SITE_TABLE_KEY, SiteTable

from .builder import ELEMENT_TYPES, Builder, Lazy, LazyShape, Names, TensorType, Unsupported, onnx_type
from .ops import ELEMENTWISE_KINDS, HANDLERS
from .ops.control import refuse_custom_call

PRODUCER = "multiexport-stablehlo"


class Converter:
    """State of one conversion: the module's functions, MLIR value -> ONNX name, the current builder."""

    def __init__(self, module: Any, handlers: dict[str, Callable[["Converter", Any], list[str]]],
                 symbolic: bool = False, assertions_checked: bool = False):
        from jax.extend.mlir import ir

        self.ir = ir
        self.handlers = handlers
        # A symbolic conversion: dynamic dimensions are None in `type_of`, and only the ops of DYNAMIC_OPS take
        # them (`_run_ops` refuses any other op that has one: the static-size fallback converts those modules).
        self.symbolic = symbolic
        # jax.export's `shape_assertion` calls may be dropped: whoever runs the graph checks what they check
        # (every input's symbolic dimension a plain name, bound >= 1 and equal across leaves: exporting.feed).
        self.assertions_checked = assertions_checked
        self.functions: dict[str, Any] = {}
        for op in module.body.operations:
            if op.operation.name == "func.func":
                self.functions[ir.StringAttr(op.attributes["sym_name"]).value] = op
        self.names = Names()
        self.b = Builder(self.names)
        self.values: dict[Any, str] = {}
        # Values whose ONNX name holds a tensor that numpy-broadcasts to their type's shape (a broadcast_in_dim
        # or a reshape adding leading 1s, not written): ONNX's elementwise ops broadcast themselves, so the
        # Expand is written only for a consumer that needs the full tensor ((builder, name, shape) -> it).
        self.lazy: dict[Any, tuple[int | None, ...]] = {}  # MLIR value -> its full shape, for lazy values only
        # A lazy value with a dynamic dimension: the ONNX name of its full shape as an int64 tensor (the shape a
        # dynamic_broadcast_in_dim computed), which its Expand takes instead of a constant.
        self.lazy_dims: dict[Any, str] = {}
        self._expanded: dict[tuple[int, str, Any], str] = {}
        # Results a handler already wrote while converting an earlier op (a divide folded into an average pool).
        self.precomputed: dict[Any, str] = {}
        self._depth = 0
        # The side table `locate` reads (the SDK's SiteTable): per op of `main` flattened (calls inlined, in order: the
        # numbering of multiexport's instrumented module), the ONNX names holding its results. `top_level` is True
        # while a block of the flattened `main` is converted (main's, or a function it calls at top level). A symbolic
        # conversion records none: `locate` numbers ops in the module refined to its trial's sizes, which a symbolic
        # module's (its shape computations, dynamic ops, assertions) does not follow.
        self.sites = SiteTable()
        self.top_level = False

    # -- reading the module ----------------------------------------------------------------------
    def type_of(self, value: Any) -> TensorType:
        ir = self.ir
        t = value.type.maybe_downcast()
        if not isinstance(t, ir.RankedTensorType):
            raise Unsupported(str(t), "a value that is not a ranked tensor (a token or a tuple)")
        ranked = t
        if not ranked.has_static_shape and not self.symbolic:
            raise Unsupported(str(t), "a dynamic shape: the StableHLO route converts static modules only")
        element = str(ranked.element_type)
        if element not in ELEMENT_TYPES:
            raise Unsupported(str(t), f"element type {element} has no ONNX tensor type here")
        return TensorType(tuple(None if ranked.is_dynamic_dim(i) else int(d) for i, d in enumerate(ranked.shape)),
                          ELEMENT_TYPES[element])

    def has_dynamic(self, op: Any) -> bool:
        """Whether any operand or result of `op` has a dynamic dimension (ranked tensors only)."""
        ir = self.ir
        for value in (*op.operands, *op.operation.results):
            t = value.type.maybe_downcast()
            if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
                return True
        return False

    def raw_name(self, value: Any) -> str:
        try:
            return self.values[value]
        except KeyError:
            raise Unsupported("value", f"used before it was converted: {value.get_name()}") from None

    def name(self, value: Any) -> str:
        """The ONNX name of `value` as the full tensor its type says (a lazy broadcast is expanded here)."""
        name = self.raw_name(value)
        if value not in self.lazy:
            return name
        dims = self.lazy_dims.get(value)
        key = (id(self.b), name, dims if dims is not None else self.lazy[value])
        if key not in self._expanded:
            shape = dims if dims is not None else self.b.ints(self.lazy[value])
            self._expanded[key] = self.b.op1("Expand", [name, shape])
        return self._expanded[key]

    def inputs(self, op: Any) -> list[str]:
        return [self.name(v) for v in op.operands]

    def broadcast_inputs(self, op: Any) -> tuple[list[str], tuple[int | None, ...] | None]:
        """Operand names for an elementwise op that broadcasts like numpy (lazy ones unexpanded), and the result
        shape when no operand has it (then the result is lazy too), else None."""
        shape = self.type_of(op.operation.results[0]).shape
        names, full = [], False
        for v in op.operands:
            full = full or (v not in self.lazy and self.type_of(v).shape == shape)
            names.append(self.raw_name(v))
        if not full and None in shape:
            # Every operand is lazy (an elementwise op's operands have its shape): the result stands for the same
            # dynamic shape, whose tensor a lazy operand of that shape carries.
            dims = next((self.lazy_dims[v] for v in op.operands if v in self.lazy_dims), None)
            if dims is None:
                raise Unsupported(op.operation.name, f"a lazy result of dynamic shape {list(shape)} without its "
                                                     "shape tensor")
            return names, LazyShape(shape, dims)
        return names, None if full else shape

    def lazy_result(self, name: str, shape: tuple[int | None, ...] | None) -> str:
        """`name` marked as standing for `shape` by broadcasting (when `shape` is not None; a dynamic one is a
        LazyShape, with its shape tensor)."""
        return Lazy(name, shape, getattr(shape, "dims", None)) if shape is not None else name

    def attr(self, op: Any, key: str) -> Any:
        attributes = op.operation.attributes
        return attributes[key] if key in attributes else None

    def ints(self, op: Any, key: str, default: Sequence[int] | None = None) -> list[int]:
        """An integer array attribute (`array<i64: ...>` or a dense integer tensor) as a list."""
        import numpy as np

        a = self.attr(op, key)
        if a is None:
            if default is None:
                raise Unsupported(op.operation.name, f"attribute {key} missing")
            return list(default)
        ir = self.ir
        a = a.maybe_downcast()
        if isinstance(a, (ir.DenseI64ArrayAttr, ir.DenseBoolArrayAttr)):
            return [int(x) for x in a]
        if isinstance(a, ir.IntegerAttr):
            return [int(a.value)]
        return [int(x) for x in np.asarray(a).reshape(-1)]

    def int_attr(self, op: Any, key: str, default: int | None = None) -> int:
        a = self.attr(op, key)
        if a is None:
            if default is None:
                raise Unsupported(op.operation.name, f"attribute {key} missing")
            return default
        return int(self.ir.IntegerAttr(a).value)

    def block_ops(self, op: Any, region: int = 0) -> tuple[Any, list[Any]]:
        block = op.operation.regions[region].blocks[0]
        return block, list(block.operations)

    # -- converting ----------------------------------------------------------------------------
    def run_block(self, block: Any, args: Sequence[str]) -> list[str]:
        """Convert the ops of `block` with its arguments bound to `args`; the terminator's operand names."""
        for arg, name in zip(block.arguments, args):
            self.values[arg] = name
            self.lazy.pop(arg, None)
            self.lazy_dims.pop(arg, None)
        top, self.top_level = self.top_level, False
        try:
            return self._run_ops(block, top)
        finally:
            self.top_level = top

    def _run_ops(self, block: Any, top: bool) -> list[str]:
        for op in block.operations:
            kind = op.operation.name
            if kind in ("func.return", "stablehlo.return"):
                return [self.name(v) for v in op.operands]
            results = list(op.operation.results)
            if len(results) == 1 and results[0] in self.precomputed:
                self.values[results[0]] = self.precomputed.pop(results[0])
                self.lazy.pop(results[0], None)
                self.lazy_dims.pop(results[0], None)
                if top:
                    self.sites.record(kind, [self.values[results[0]]], [None])
                continue
            handler = self.handlers.get(kind)
            if handler is None:
                raise Unsupported(kind, "no ONNX form written for this op")
            if self.symbolic and self.has_dynamic(op) and not _takes_dynamic(self, op, kind):
                raise Unsupported(kind, "with a dynamic (symbolic) dimension: this route writes it at fixed sizes only")
            self.top_level = top and kind == "func.call"  # a call's body is part of the flattened main
            outs = handler(self, op)
            self.top_level = False
            if top and kind != "func.call" and not self.symbolic:  # numbered like a static module only
                self.sites.record(kind, [str(o) for o in outs],
                                  [[int(d) for d in o.shape if d is not None] if isinstance(o, Lazy) else None
                                   for o in outs])  # static here: a symbolic conversion records none
            if len(outs) != len(results):
                raise Unsupported(kind, f"wrote {len(outs)} values for {len(results)} results")
            for result, out in zip(results, outs):
                self.values[result] = str(out)
                self.lazy_dims.pop(result, None)  # a block converted again (an inlined function called twice)
                if isinstance(out, Lazy):
                    self.lazy[result] = out.shape
                    if out.dims is not None:
                        self.lazy_dims[result] = out.dims
                else:
                    self.lazy.pop(result, None)
        raise Unsupported("block", "a region without a terminator")

    def call(self, callee: str, args: Sequence[str]) -> list[str]:
        """Inline `callee`'s body with its arguments bound to `args`."""
        if callee not in self.functions:
            raise Unsupported("func.call", f"calls @{callee}, which the module does not define")
        self._depth += 1
        if self._depth > 64:
            raise Unsupported("func.call", f"@{callee} is recursive")
        try:
            return self.run_block(self.functions[callee].regions[0].blocks[0], args)
        finally:
            self._depth -= 1

    def subgraph(self, block: Any, inputs: Sequence[tuple[str, TensorType]], name: str,
                 after: Callable[[list[str]], list[str]] | None = None,
                 outputs: Sequence[TensorType] | None = None) -> Any:
        """An ONNX GraphProto of `block` (for Loop/If): `inputs` are its formal inputs (name, type), bound to the
        block's arguments in order (extra leading ones, e.g. Loop's iteration number, are skipped by the caller);
        `after` may add nodes on the block's results; outputs are typed from `outputs` or the block's results."""
        from onnx import helper

        outer = self.b
        self.b = Builder(self.names, root=outer.root)
        try:
            results = self.run_block(block, [n for n, _ in inputs[len(inputs) - len(block.arguments):]])
            if after is not None:
                results = after(results)
            types = list(outputs) if outputs is not None else [self.type_of(v) for v in _terminator(block).operands]
            outs = []
            for r, t in zip(results, types):
                o = self.b.op1("Identity", [r], hint=f"{name}_out")  # a subgraph output made inside it
                outs.append(helper.make_tensor_value_info(o, onnx_type(t.dtype), list(t.shape)))
            ins = [helper.make_tensor_value_info(n, onnx_type(t.dtype), list(t.shape)) for n, t in inputs]
            return helper.make_graph(self.b.nodes, self.names.fresh(name), ins, outs)
        finally:
            self.b = outer


def _takes_dynamic(cx: Converter, op: Any, kind: str) -> bool:
    """Whether `op`'s handler writes it with dynamic dimensions (DYNAMIC_OPS, and that entry's condition)."""
    if kind not in DYNAMIC_OPS:
        return False
    condition = DYNAMIC_OPS[kind]
    return condition is None or condition(cx, op)


# The ops whose handlers read no static size of a dynamic dimension (sizes they need come from the graph: a
# Shape, the shape operand of a dynamic op, a Reshape inferring one dimension), with a condition where only some
# forms do. Every other op with a dynamic dimension is refused in a symbolic conversion.
DYNAMIC_OPS: dict[str, Callable[[Converter, Any], bool] | None] = {
    **{kind: None for kind in ELEMENTWISE_KINDS},
    "stablehlo.transpose": None,
    "stablehlo.concatenate": None,
    "stablehlo.reduce": None,
    "stablehlo.dot_general": None,  # sizes as Builder.reshape infers them (one dynamic dimension at most)
    "stablehlo.dot": None,
    "stablehlo.gather": lambda cx, op: not cx.type_of(op.operands[0]).dynamic,  # a static table, dynamic indices
    "stablehlo.get_dimension_size": None,
    "stablehlo.dynamic_broadcast_in_dim": None,
    "stablehlo.dynamic_reshape": None,
    "stablehlo.dynamic_iota": None,
    "stablehlo.real_dynamic_slice": None,
    "stablehlo.custom_call": None,  # a shape_assertion (dropped) or a sharding annotation (the value)
    "stablehlo.composite": None,
    "sdy.sharding_constraint": None,
    "func.call": None,
}


def _terminator(block: Any) -> Any:
    ops = list(block.operations)
    return ops[-1]


# Ops refused by what they are, whatever else the module holds: reported before any partial conversion.
_REFUSED_FIRST = ("stablehlo.rng_bit_generator", "stablehlo.custom_call")


def _refuse_early(cx: Converter, module: Any) -> None:
    """Raise for the first op of the module this route refuses outright, or that has no handler at all."""
    found: dict[str, Any] = {}

    def walk(op: Any) -> None:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    name = inner.operation.name
                    if name == "stablehlo.custom_call":
                        refuse_custom_call(cx, inner)
                    elif name not in found and (name in _REFUSED_FIRST or hasattr(cx.handlers.get(name), "refuses") or (
                            name not in cx.handlers and name not in ("func.func", "func.return", "stablehlo.return"))):
                        found[name] = inner
                    walk(inner.operation)

    for function in cx.functions.values():
        walk(function.operation)
    # An op refused with its reason first (an FFT's `real` has no handler either, but the FFT is the cause).
    for name in [*_REFUSED_FIRST, *sorted(found, key=lambda n: (n not in cx.handlers, n))]:
        if name == "stablehlo.custom_call" and name in found:
            refuse_custom_call(cx, found[name])
        elif name in found and name in cx.handlers:
            cx.handlers[name](cx, found[name])  # raises with the op's own reason
        elif name in found:
            others = sorted(n for n in found if n != name and n not in cx.handlers)
            raise Unsupported(name, "no ONNX form written for this op" + (
                f" (nor for {', '.join(others)})" if others else ""))
    del module


def convert_module(module: Any, input_names: Sequence[str], output_names: Sequence[str], opset: int,
                   model_name: str, input_shapes: Sequence[Sequence[int | str]] | None = None,
                   output_shapes: Sequence[Sequence[int | str]] | None = None) -> Any:
    """The onnx.ModelProto computing `module`'s `main`: graph inputs named `input_names` (one per argument of
    main, in order) and outputs `output_names` (one per result). Raises Unsupported for what it cannot write.

    input_shapes / output_shapes: the leaves' shapes with their symbolic dimensions named ("b"), for a module
    jax.export wrote with symbolic dimensions: the graph's inputs and outputs then carry those names (ONNX
    dim_params) and its ops compute every dynamic size at run time. Without them the module must be static.
    Every input's symbolic dimension must then be a plain name (`b`, not `2*b`): the runner binds each name
    once and checks it (exporting.feed), which is what jax.export's shape assertions check, so they are dropped.
    """
    from onnx import helper

    symbolic = input_shapes is not None
    plain = all(isinstance(d, int) or str(d).isidentifier() for shape in input_shapes or () for d in shape)
    cx = Converter(module, HANDLERS, symbolic=symbolic, assertions_checked=plain)
    _refuse_early(cx, module)
    if "main" not in cx.functions:
        raise Unsupported("module", "no @main function")
    main = cx.functions["main"]
    block = main.regions[0].blocks[0]
    if len(block.arguments) != len(input_names):
        raise Unsupported("module", f"main takes {len(block.arguments)} arguments, expected {len(input_names)} "
                                    "(a platform index or an effect token)")
    arg_types = [cx.type_of(a) for a in block.arguments]
    cx.names.taken.update(input_names)
    cx.names.taken.update(output_names)
    cx.top_level = True
    results = cx.run_block(block, list(input_names))
    if len(results) != len(output_names):
        raise Unsupported("module", f"main returns {len(results)} values, expected {len(output_names)}")
    out_types = [cx.type_of(v) for v in _terminator(block).operands]
    for r, o in zip(results, output_names):
        cx.b.nodes.append(helper.make_node("Identity", [r], [o], name=cx.names.fresh("n_output")))
    ins: list[list[Any]] = ([list(s) for s in input_shapes] if input_shapes is not None
                            else [list(t.shape) for t in arg_types])
    outs: list[list[Any]] = ([list(s) for s in output_shapes] if output_shapes is not None
                             else [list(t.shape) for t in out_types])
    graph = helper.make_graph(
        cx.b.nodes, model_name,
        [helper.make_tensor_value_info(n, onnx_type(t.dtype), s) for n, t, s in zip(input_names, arg_types, ins)],
        [helper.make_tensor_value_info(n, onnx_type(t.dtype), s) for n, t, s in zip(output_names, out_types, outs)],
        initializer=cx.b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name=PRODUCER)
    helper.set_model_props(model, {SITE_TABLE_KEY: cx.sites.to_text()})  # for `locate`
    model.ir_version = 10  # what opset 21 was released with; older runtimes read it
    return model
