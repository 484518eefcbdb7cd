"""A StableHLO module with every op's result returned: the reference side of `locate`, and the tool XLA and IREE
use to expose their own shipped module's intermediates.

`instrument_module` flattens `main` (every `func.call` inlined in place, in order: the data-flow order the
sites are numbered in) and returns, after the module's own results, every result of every top-level op that
is a ranked tensor (constants excepted: they are the program, not what it computes). MLIR's own inliner is not
registered in JAX's bindings, so the flattening is done here by cloning ops and re-pointing their operands;
ops inside regions (a while's body, a reduce's computation) are cloned with their op and are not sites.
The op's location gives its name stack and the user's source line (`model.py:42`), read from the printed
location (the Python bindings have no accessors for them).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .intermediates import Site, site_key
from .native_section import MLIR_DTYPES
from .refine import text_context
from .stablehlo import ir_context, jax_stablehlo_versions

# Ops whose results are not sites: constants are what the program holds, not what it computes.
NOT_SITES = ("stablehlo.constant",)
_FRAME = re.compile(r'"([^"]+)":(\d+)(?::\d+)?')
_NAME = re.compile(r'loc\((?:callsite\()?(?:fused\[)?"((?:[^"\\]|\\.)*)"\(')


@dataclass(frozen=True)
class Instrumented:
    """A module whose `main` returns its own results and then every site's value.

    bytecode: the instrumented module as MLIR bytecode of this jaxlib (what jax's XLA client compiles).
    portable: the same as a StableHLO portable artifact at jax.export's target version (what IREE, TF's
        XlaCallModule and other StableHLO consumers read, like a shipped model.mlirbc).
    sites: the sites, in the order their values follow the original results.
    n_results: how many results the original `main` has (they come first).
    args: the original `main`'s argument types, printed (`tensor<2x3xf32>`), in order.
    """

    bytecode: bytes
    portable: bytes
    sites: tuple[Site, ...]
    n_results: int
    args: tuple[str, ...]


def instrument_module(source: str | bytes, ctx: Any = None) -> Instrumented:
    """`source` (MLIR text, or StableHLO portable bytecode as jax.export serializes it) instrumented."""
    from jax.extend.mlir import ir

    def work(context: Any) -> Instrumented:
        module = _parse(source, context)
        with ir.Location.unknown(context):
            return _instrument(module, ir)

    if ctx is not None:
        return work(ctx)
    with (text_context() if isinstance(source, str) else ir_context()) as context:
        return work(context)


def module_sites(source: str | bytes) -> tuple[Site, ...]:
    """The sites of `source`'s flattened `main` (what `instrument_module` would return), without compiling."""
    return instrument_module(source).sites


def _parse(source: str | bytes, ctx: Any) -> Any:
    from jax.extend import mlir as jmlir
    from jax.extend.mlir import ir

    if isinstance(source, bytes) and source[:4] == b"ML\xefR":
        try:
            return jmlir.deserialize_portable_artifact(source, ctx)
        except Exception:  # plain MLIR bytecode, not a portable artifact
            return ir.Module.parse(source, ctx)
    return ir.Module.parse(source if isinstance(source, str) else source.decode(), ctx)


def _instrument(module: Any, ir: Any) -> Instrumented:
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                 if op.operation.name == "func.func"}
    if "main" not in functions:
        raise ValueError("the module has no @main function")
    main = functions["main"]
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    new = ir.Operation.create("func.func", regions=1, attributes={
        "sym_name": ir.StringAttr.get("main"),
        "function_type": ir.TypeAttr.get(ftype),
        **({"arg_attrs": main.attributes["arg_attrs"]} if "arg_attrs" in main.attributes else {}),
    }, loc=main.location)
    body = new.regions[0].blocks.append(*ftype.inputs)
    old_block = main.regions[0].blocks[0]
    mapping: dict[Any, Any] = {}
    names: dict[Any, str] = {}
    for i, (arg, new_arg) in enumerate(zip(old_block.arguments, body.arguments)):
        mapping[arg] = new_arg
        names[new_arg] = f"arg{i}"
    flat = _Flattener(ir, functions, ir.InsertionPoint(body))
    results = flat.block(old_block, mapping)
    sites: list[Site] = []
    values: list[Any] = []
    for index, (op, clone, called_at) in enumerate(flat.ops):
        outs = list(clone.results)
        for r, value in enumerate(outs):
            names[value] = site_key(index, r, len(outs))
        if op.name in NOT_SITES:
            continue
        # The op's own location name, before a call's scope is prefixed: converters that name tensors after
        # locations (TFLite's GetNameFromLoc) call an op inlined from jit(relu) `max`, not its full scope.
        own = _NAME.match(str(op.location)) or re.match(r'loc\("((?:[^"\\]|\\.)*)"\)', str(op.location))
        scope, frames = describe_location(str(op.location))
        if not frames and called_at:  # an op of a called function without frames of its own: its call's
            outer_scope, frames = describe_location(called_at)
            scope = scope if "/" in scope else outer_scope + (f"/{scope}" if scope else "")
        for r, value in enumerate(outs):
            t = value.type.maybe_downcast() if hasattr(value.type, "maybe_downcast") else value.type
            if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
                continue
            dtype = MLIR_DTYPES.get(str(t.element_type))
            if dtype is None:
                continue
            sites.append(Site(key=site_key(index, r, len(outs)), index=index, result=r, op=op.name,
                              shape=tuple(int(d) for d in t.shape), dtype=dtype,
                              location=user_frame(frames), scope=scope,
                              operands=tuple(names.get(v, "?") for v in clone.operands), frames=tuple(frames),
                              name=own.group(1) if own else ""))
            values.append(value)
    with ir.InsertionPoint(body):
        ir.Operation.create("func.return", operands=[*results, *values])
    out_types = [v.type for v in results] + [v.type for v in values]
    new.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), out_types))
    main.operation.erase()
    module.body.append(new)
    return Instrumented(bytecode=_bytecode(module), portable=_portable(module), sites=tuple(sites),
                        n_results=len(results), args=tuple(str(t) for t in ftype.inputs))


def _bytecode(module: Any) -> bytes:
    import io

    out = io.BytesIO()
    module.operation.write_bytecode(out)
    return out.getvalue()


def _portable(module: Any) -> bytes:
    from jax.extend.mlir.dialects import stablehlo as jhlo


    return bytes(jhlo.serialize_portable_artifact(module, jax_stablehlo_versions()["stablehlo_export_target"]))


class _Flattener:
    """Clones the ops of `main` into a new body, inlining calls; `ops` lists (original op, clone, the printed
    location of the call it was inlined from or "") in order."""

    def __init__(self, ir: Any, functions: dict[str, Any], ip: Any):
        self.ir = ir
        self.functions = functions
        self.ip = ip
        self.ops: list[tuple[Any, Any, str]] = []
        self.calls: list[str] = []  # the printed locations of the calls being inlined, innermost last

    def block(self, block: Any, mapping: dict[Any, Any]) -> list[Any]:
        ir = self.ir
        for op in block.operations:
            operation = op.operation
            name = operation.name
            if name in ("func.return", "stablehlo.return"):
                return [mapping[v] for v in operation.operands]
            if name == "func.call":
                callee = ir.FlatSymbolRefAttr(operation.attributes["callee"]).value
                body = self.functions[callee].regions[0].blocks[0]
                if len(self.calls) > 64:
                    raise ValueError(f"@{callee} is recursive")
                for arg, value in zip(body.arguments, operation.operands):
                    mapping[arg] = mapping[value]
                self.calls.append(str(operation.location))
                returned = self.block(body, mapping)
                self.calls.pop()
                for result, value in zip(operation.results, returned):
                    mapping[result] = value
                continue
            clone = operation.clone(ip=self.ip)
            for i, value in enumerate(operation.operands):
                clone.operands[i] = mapping[value]
            for region in clone.regions:
                _repoint(region, mapping)
            for result, value in zip(operation.results, clone.results):
                mapping[result] = value
            self.ops.append((operation, clone, self.calls[-1] if self.calls else ""))
        raise ValueError("a block without a terminator")


def _repoint(region: Any, mapping: dict[Any, Any]) -> None:
    """Re-point every use, inside a cloned region, of a value defined above it to that value's clone."""
    for block in region.blocks:
        for op in block.operations:
            operation = op.operation
            for i, value in enumerate(operation.operands):
                if value in mapping:
                    operation.operands[i] = mapping[value]
            for inner in operation.regions:
                _repoint(inner, mapping)


def describe_location(text: str) -> tuple[str, list[str]]:
    """(name stack, source frames innermost first as `file:line`) of a printed MLIR location."""
    found = _NAME.match(text)
    scope = found.group(1) if found else ""
    frames: list[str] = []
    for file, line in _FRAME.findall(text):
        frame = f"{file}:{line}"
        if frame not in frames:
            frames.append(frame)
    return scope, frames


def user_frame(frames: Sequence[str], roots: Sequence[str] | None = None) -> str:
    """The innermost frame in the user's own code: the first whose file is not inside an installed package
    (a `site-packages` directory on sys.path, as the file name resolves here), else the innermost frame."""
    for frame in frames:
        file = frame.rsplit(":", 1)[0]
        if not _installed(file, roots):
            return frame
    return frames[0] if frames else ""


def installed_file(file: str) -> bool:
    """Whether a source file lies in an installed package (a `site-packages` directory), not the user's code."""
    return _installed(file, None)


def _installed(file: str, roots: Sequence[str] | None) -> bool:
    path = Path(file)
    if path.is_absolute():
        return any(part in ("site-packages", "dist-packages") for part in path.parts)
    for root in (sys.path if roots is None else roots):
        if root and (Path(root) / path).is_file():
            return any(part in ("site-packages", "dist-packages") for part in Path(root).parts)
    return False


@dataclass(frozen=True)
class Isolated:
    """One op of a module's flattened `main` as a module of its own: `main` takes the op's operands that are not
    constants (in `operands` order, each named by its site key or `arg<i>`) and returns the op's results.

    bytecode, portable: as in `Instrumented`. text: the module printed (for a bug report), None when large.
    """

    bytecode: bytes
    portable: bytes
    operands: tuple[str, ...]
    operand_types: tuple[str, ...]
    text: str | None


def isolate_op(source: str | bytes, index: int, text_limit: int = 1 << 20) -> Isolated:
    """Op `index` of `source`'s flattened `main` (the numbering of `instrument_module`), alone: the constants it
    reads cloned in, every other value it reads (an operand, or a value its regions capture) a parameter."""
    from jax.extend.mlir import ir

    with ir_context() as ctx:
        module = _parse(source, ctx)
        with ir.Location.unknown(ctx):
            functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                         if op.operation.name == "func.func"}
            main = functions["main"]
            old_block = main.regions[0].blocks[0]
            scratch = ir.Operation.create("func.func", regions=1, attributes={
                "sym_name": ir.StringAttr.get("locate_scratch"),
                "function_type": main.attributes["function_type"]})
            scratch_block = scratch.regions[0].blocks.append(*[a.type for a in old_block.arguments])
            module.body.append(scratch)
            mapping = dict(zip(old_block.arguments, scratch_block.arguments))
            flat = _Flattener(ir, functions, ir.InsertionPoint(scratch_block))
            flat.block(old_block, mapping)
            if not 0 <= index < len(flat.ops):
                raise ValueError(f"op {index} is not in the module (it has {len(flat.ops)} ops)")
            keys = {a: f"arg{i}" for i, a in enumerate(scratch_block.arguments)}
            producers = {}
            for i, (op, clone, _) in enumerate(flat.ops):
                outs = list(clone.results)
                for r, value in enumerate(outs):
                    keys[value] = site_key(i, r, len(outs))
                    producers[value] = (op, clone)
            _, target, _ = flat.ops[index]
            outside = list(dict.fromkeys([*target.operands, *_captured(target)]))
            unique = [v for v in outside if not (v in producers and producers[v][0].name in NOT_SITES)]
            ftype = ir.FunctionType.get([v.type for v in unique], [r.type for r in target.results])
            new = ir.Operation.create("func.func", regions=1, attributes={
                "sym_name": ir.StringAttr.get("main"), "function_type": ir.TypeAttr.get(ftype)})
            body = new.regions[0].blocks.append(*[v.type for v in unique])
            inner = dict(zip(unique, body.arguments))
            ip = ir.InsertionPoint(body)
            for value in outside:
                if value not in inner:  # a constant: cloned in
                    inner[value] = producers[value][1].clone(ip=ip).results[0]
            clone = target.clone(ip=ip)
            for i, value in enumerate(target.operands):
                clone.operands[i] = inner[value]
            for region in clone.regions:
                _repoint(region, inner)
            with ip:
                ir.Operation.create("func.return", operands=list(clone.results))
            operands = tuple(keys[v] for v in unique)
            operand_types = tuple(str(v.type) for v in unique)
            del keys, producers, inner, unique, outside, target, clone, flat, mapping
            main.operation.erase()
            scratch.erase()
            module.body.append(new)
            text = module.operation.get_asm(large_elements_limit=16) if len(str(new)) < text_limit else None
            return Isolated(bytecode=_bytecode(module), portable=_portable(module),
                            operands=operands, operand_types=operand_types, text=text)


def _captured(op: Any) -> list[Any]:
    """The values defined outside `op` that uses inside its regions read, in order of use."""
    inside: set[Any] = set()

    def collect(region: Any) -> None:
        for block in region.blocks:
            inside.update(block.arguments)
            for inner in block.operations:
                inside.update(inner.operation.results)
                for r in inner.operation.regions:
                    collect(r)

    for region in op.regions:
        collect(region)
    found: list[Any] = []

    def reads(region: Any) -> None:
        for block in region.blocks:
            for inner in block.operations:
                found.extend(v for v in inner.operation.operands if v not in inside)
                for r in inner.operation.regions:
                    reads(r)

    for region in op.regions:
        reads(region)
    return found


def run_module(instrumented: Instrumented | Any, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Compile `instrumented.bytecode` (an `Instrumented` or `Isolated`) with XLA on the CPU and run it on `args`."""
    return compiled(instrumented)(args)


def compiled(instrumented: Instrumented | Any) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
    """`instrumented.bytecode` compiled once with XLA on the CPU: a function of the arguments, run as often as asked."""
    import jax
    from jaxlib import xla_client

    backend = jax.extend.backend.get_backend("cpu")
    device = backend.local_devices()[0]
    options = xla_client.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = 1
    executable = backend.compile_and_load(instrumented.bytecode, [device], options)

    def call(args: Sequence[np.ndarray]) -> list[np.ndarray]:
        buffers = [jax.device_put(np.asarray(a), device) for a in args]
        return [np.asarray(r) for r in executable.execute(buffers)]

    return call
