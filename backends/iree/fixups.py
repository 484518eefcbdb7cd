"""StableHLO adaptations IREE 3.13 needs, and lifted weights bound as IREE parameters.

Each rewrite is sound for the modules jax.export writes and computes the same numbers; the manifest
records how many of each were made (`format.stablehlo`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from multiexport.sdk import ExportError, ir_context, parse_module

FUNCTION = "main"
PARAMETER_SCOPE = "model"  # iree-run-module --parameters=model=weights.safetensors

SHAPE_ASSERTIONS_WHY = (
    "jax.export guards symbolic dimensions with `shape_assertion` custom calls and jax 0.10 offers no "
    "DisabledSafetyCheck for them; IREE accepts them but drops them without checking (measured: a feed "
    "giving one symbolic dimension two different sizes ran and returned a result instead of failing). "
    "multiexport removes them explicitly and checks the same constraints (each symbolic dimension >= 1 "
    "and equal across leaves) in Runner.prepare and run_native before every call. A C/C++ caller must "
    "check them itself."
)


def prepare_stablehlo(exported, weights: Sequence[str] = ()) -> tuple[bytes, dict[str, Any]]:
    """The Exported's StableHLO adapted for IREE, as portable bytecode, and what was changed.

    With `weights` (names of the lifted weights among the module's trailing arguments), the module is
    returned as text instead, with those arguments turned into IREE parameters (see `_bind_parameters`).

    1. `shape_assertion` custom calls are removed (see SHAPE_ASSERTIONS_WHY).
    2. `dynamic_broadcast_in_dim` ops get `known_nonexpanding_dimensions` for their dynamic operand
       dimensions, after composing chains of them ourselves. IREE lowers a dynamic broadcast only when
       it knows which dimensions expand, and its own chain folding drops the attribute. The annotation
       is sound for JAX's output: lax.broadcast_in_dim requires each operand dimension to be 1 or equal
       to its output dimension, so a symbolic (dynamic) one is never 1 by construction and never expands.
    3. A batch-free `dot_general` whose lhs leads with a dynamic free dimension and whose result has
       rank > 2 becomes a batched one against the rhs broadcast along that dimension. IREE would flatten
       it into a 2-D dot with `dynamic_reshape`, which IREE 3.13 cannot lower (flax Dense on
       [b, seq, d]); the batched form lowers straight to linalg and computes the same numbers.
    4. A `gather` whose dynamic indices end in an index vector of one element, made by appending that
       size-1 dimension to a tensor (a `dynamic_broadcast_in_dim` keeping every dimension in place, as
       jnp.take and an embedding lookup lower), reads that tensor instead, with the same
       `index_vector_dim` (now its rank: the implicit trailing index vector of one element, the same
       gather by StableHLO's definition). IREE 3.13 canonicalizes the explicit form into a gather and a
       `stablehlo.reshape` to a dynamic shape, which its verifier then rejects (keras-hub's token
       embedding on [b, seq]: "'stablehlo.reshape' op result #0 must be statically shaped").
    """
    from jax.extend import mlir as jmlir
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo as hlo

    notes: dict[str, Any] = {"shape_assertions_removed": 0, "dynamic_broadcasts_annotated": 0, "dot_generals_batched": 0,
             "gather_index_vectors_implicit": 0, "custom_call_targets": []}
    with ir_context() as ctx, ir.Location.unknown():
        module = parse_module(exported, ctx)
        ops: list[Any] = []

        def collect(op):
            ops.append(op.operation)
            return ir.WalkResult.ADVANCE

        module.operation.walk(collect)
        for op in ops:
            if op.name == "stablehlo.custom_call":
                target = ir.StringAttr(op.attributes["call_target_name"]).value
                if target == "shape_assertion":
                    op.erase()
                    notes["shape_assertions_removed"] += 1
                elif target not in notes["custom_call_targets"]:
                    notes["custom_call_targets"].append(target)
            elif op.name == "stablehlo.dynamic_broadcast_in_dim":
                _annotate_broadcast(op, ir)
                notes["dynamic_broadcasts_annotated"] += 1
            elif op.name == "stablehlo.dot_general" and _batch_dot_general(op, ir, hlo):
                notes["dot_generals_batched"] += 1
            elif op.name == "stablehlo.gather" and _implicit_index_vector(op, ir, hlo):
                notes["gather_index_vectors_implicit"] += 1
        if weights:
            return _bind_parameters(module, weights, ir).encode(), notes
        version = hlo.get_version_from_compatibility_requirement(hlo.StablehloCompatibilityRequirement.WEEK_4)
        return bytes(jmlir.serialize_portable_artifact(module, version, False)), notes


def _bind_parameters(module, weights: Sequence[str], ir) -> str:
    """The module as text, its trailing `weights` arguments read from IREE parameters instead.

    `main` becomes the private `main_lifted`; a new `main` takes the leaves only, loads each weight from
    a `util.global` bound to `#stream.parameter.named<"model"::"params.Dense_0.kernel">` (the weight's
    name in weights.safetensors) and calls it. IREE then
    reads the values from the parameter file at load (mapped, not copied, where the device allows)
    instead of carrying them in the .vmfb: `iree-run-module --parameters=model=weights.safetensors`.
    """
    main = next(op for op in module.body.operations
                if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == FUNCTION)
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    ins, outs = [str(t) for t in ftype.inputs], [str(t) for t in ftype.results]
    leaves = len(ins) - len(weights)
    main.attributes["sym_name"] = ir.StringAttr.get(f"{FUNCTION}_lifted")
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    text = module.operation.get_asm(enable_debug_info=False).rstrip()
    if not text.endswith("}"):
        raise ExportError("Backend 'iree' | cannot bind parameters: the module's text does not end its body",
                          backend="iree", category="converter-error")
    # Symbols by position (a weight's name may hold characters MLIR identifiers cannot); keys by name.
    lines = [f'  util.global private @{FUNCTION}_weight_{k} = #stream.parameter.named<"{PARAMETER_SCOPE}"::"{w}"> : {t}'
             for k, (w, t) in enumerate(zip(weights, ins[leaves:]))]
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(ins[:leaves]))
    lines.append(f"  func.func @{FUNCTION}({args}) -> ({', '.join(outs)}) {{")
    lines += [f"    %w{k} = util.global.load @{FUNCTION}_weight_{k} : {t}" for k, t in enumerate(ins[leaves:])]
    operands = [f"%arg{i}" for i in range(leaves)] + [f"%w{k}" for k in range(len(weights))]
    results = ", ".join(f"%r#{i}" for i in range(len(outs)))
    lines.append(f"    %r:{len(outs)} = func.call @{FUNCTION}_lifted({', '.join(operands)}) : "
                 f"({', '.join(ins)}) -> ({', '.join(outs)})")
    lines.append(f"    return {results} : {', '.join(outs)}")
    lines.append("  }")
    return text[:-1] + "\n".join(lines) + "\n}\n"


def _annotate_broadcast(op, ir) -> None:
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    inner = op.operands[0].owner
    if isinstance(inner, (ir.Operation, ir.OpView)) and inner.name == "stablehlo.dynamic_broadcast_in_dim":
        # Compose broadcast(broadcast(x)) into one broadcast of x, as IREE would, but keeping the facts.
        inner_dims = list(ir.DenseI64ArrayAttr(inner.attributes["broadcast_dimensions"]))
        op.operands[0] = inner.operands[0]
        dims = [dims[d] for d in inner_dims]
        op.attributes["broadcast_dimensions"] = ir.DenseI64ArrayAttr.get(dims)
    operand = ir.RankedTensorType(op.operands[0].type)
    op.attributes["known_nonexpanding_dimensions"] = ir.DenseI64ArrayAttr.get(
        [i for i in range(operand.rank) if operand.is_dynamic_dim(i)])


def _batch_dot_general(op, ir, hlo) -> bool:
    """Rewrite lhs[b, ...] . rhs[...] as a dot_general batched over b (rhs broadcast); True if done."""
    numbers = hlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lhs, rhs = op.operands[0], op.operands[1]
    lhs_type, rhs_type = ir.RankedTensorType(lhs.type), ir.RankedTensorType(rhs.type)
    result_type = ir.RankedTensorType(op.results[0].type)
    if (numbers.lhs_batching_dimensions or result_type.rank <= 2 or not lhs_type.is_dynamic_dim(0)
            or 0 in numbers.lhs_contracting_dimensions or not rhs_type.has_static_shape):
        return False
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(op):
        size = hlo.ReshapeOp(ir.RankedTensorType.get([1], i32), hlo.GetDimensionSizeOp(lhs, 0).result).result
        rest = hlo.ConstantOp(ir.DenseElementsAttr.get(np.asarray(rhs_type.shape, np.int32))).result
        shape = hlo.ConcatenateOp([size, rest], 0).result
        broadcast_type = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size(), *rhs_type.shape],
                                                 rhs_type.element_type)
        broadcast = hlo.DynamicBroadcastInDimOp(
            broadcast_type, rhs, shape, list(range(1, rhs_type.rank + 1)),
            known_nonexpanding_dimensions=list(range(rhs_type.rank)))
        batched = hlo.DotDimensionNumbers.get(
            [0], [0], list(numbers.lhs_contracting_dimensions), [d + 1 for d in numbers.rhs_contracting_dimensions])
        # Batch dims lead the result, then lhs free dims, then rhs free dims: the same order as before.
        new = hlo.DotGeneralOp(result_type, lhs, broadcast.result, batched)
        for name in ("precision_config", "algorithm"):
            if name in op.attributes:
                new.operation.attributes[name] = op.attributes[name]
    op.results[0].replace_all_uses_with(new.result)
    op.erase()
    return True




def _implicit_index_vector(op, ir, hlo) -> bool:
    """Make a dynamic gather's one-element index vector implicit (rewrite 4 of `prepare_stablehlo`); True if done.

    Only where the indices are `dynamic_broadcast_in_dim(x, dims=[0, ..., r-1])` of rank r + 1 ending in a
    static 1, each dimension of x equal to the result's: static and the same, or dynamic (the broadcast's
    known non-expanding dimensions, rewrite 2), so the indices are x with a trailing 1 and nothing else.
    """
    indices = op.operands[1]
    indices_type = ir.RankedTensorType(indices.type)
    numbers = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    rank = indices_type.rank
    if (indices_type.has_static_shape or numbers.index_vector_dim != rank - 1
            or indices_type.is_dynamic_dim(rank - 1) or indices_type.shape[rank - 1] != 1):
        return False
    producer = indices.owner
    if not isinstance(producer, (ir.Operation, ir.OpView)) or producer.name != "stablehlo.dynamic_broadcast_in_dim":
        return False
    source = producer.operands[0]
    source_type = ir.RankedTensorType(source.type)
    if (source_type.rank != rank - 1
            or list(ir.DenseI64ArrayAttr(producer.attributes["broadcast_dimensions"])) != list(range(rank - 1))):
        return False
    for i in range(rank - 1):
        if source_type.is_dynamic_dim(i) != indices_type.is_dynamic_dim(i):
            return False
        if not source_type.is_dynamic_dim(i) and source_type.shape[i] != indices_type.shape[i]:
            return False
    op.operands[1] = source
    return True
