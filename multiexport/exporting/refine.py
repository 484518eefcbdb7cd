"""Modules in forms the XLA CPU client cannot compile as they are, made compilable for `locate`: a module with
symbolic dimensions refined to one feed's sizes (as JAX refines one before compiling it), and a module's text
parsed (the func dialect registered).
"""

from __future__ import annotations

from typing import Any, Sequence

from .stablehlo import ir_context


def refine_module(module: bytes, shapes: Sequence[tuple[int, ...]]) -> bytes:
    """A module with symbolic dimensions (a portable artifact) refined to the argument `shapes` of one feed, as jax
    itself does before it compiles one: its `main` called from a static `main`, then JAX's shape refinement. A
    portable artifact at this jaxlib's StableHLO version. Raises ValueError (one line) when it cannot."""
    from jax.extend import mlir as jmlir
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo as jhlo

    try:
        from jax._src.interpreters import mlir as jax_mlir  # private: JAX's refinement pass has no public API
    except ImportError as exc:
        raise ValueError("has symbolic dimensions and this JAX has no shape refinement pass to make them the "
                         "feed's") from exc
    with ir_context() as ctx, ir.Location.unknown(ctx):
        parsed = jmlir.deserialize_portable_artifact(module, ctx)
        main = next(op for op in parsed.body.operations if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        if len(ftype.inputs) != len(shapes):
            raise ValueError(f"takes {len(ftype.inputs)} arguments, the feed binds {len(shapes)}")
        static = [ir.RankedTensorType.get(list(shape), ir.RankedTensorType(t).element_type)
                  for t, shape in zip(ftype.inputs, shapes)]
        main.attributes["sym_name"] = ir.StringAttr.get("_locate_polymorphic_main")
        main.attributes["sym_visibility"] = ir.StringAttr.get("private")
        wrapper = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get("main"),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get(static, list(ftype.results)))})
        body = wrapper.regions[0].blocks.append(*static)
        with ir.InsertionPoint(body):
            loose = [ir.Operation.create("stablehlo.convert", results=[t], operands=[a]).result
                     for a, t in zip(body.arguments, ftype.inputs)]
            call = ir.Operation.create("func.call", results=list(ftype.results), operands=loose,
                                       attributes={"callee": ir.FlatSymbolRefAttr.get("_locate_polymorphic_main")})
            ir.Operation.create("func.return", operands=list(call.results))
        parsed.body.append(wrapper)
        refined = jax_mlir.refine_polymorphic_shapes(parsed)
        return bytes(jhlo.serialize_portable_artifact(refined, str(jhlo.get_current_version())))


def text_context() -> Any:
    """A context that parses a module's text: the func dialect registered, which the public bindings only load
    while deserializing a portable artifact (so JAX's own context maker, private, with the public one as the
    fallback)."""
    try:
        from jax._src.interpreters import mlir as jax_mlir  # private: the public bindings cannot register func

        return jax_mlir.make_ir_context()
    except (ImportError, AttributeError):
        return ir_context()
