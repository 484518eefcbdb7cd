"""Reading a reducer or comparator region as a pattern: which binary op combines, which way a sort goes."""

from __future__ import annotations

from typing import Any

from ..builder import Unsupported, op_name


def combiner(cx, op: Any, region: int = 0) -> str:
    """The one elementwise op a reduce/scatter body applies to its two arguments (`stablehlo.add`), or
    `replace` for a body that returns its second argument (scatter's set)."""
    block, ops = cx.block_ops(op, region)
    args = list(block.arguments)
    ret = ops[-1]
    if len(ops) == 1 and len(args) == 2 and list(ret.operands) == [args[1]]:
        return "replace"
    if len(ops) == 2 and len(list(ret.operands)) == 1:
        inner = ops[0]
        if list(ret.operands) == [inner.result] and set(inner.operands) == set(args) and len(args) == 2:
            return inner.operation.name
    raise Unsupported(op.operation.name, f"a {len(ops) - 1}-op body ({', '.join(o.operation.name for o in ops[:-1])}); "
                                         "only a single add/max/min/mul/and/or body is written")


def sort_direction(cx, op: Any) -> str:
    """`ascending` or `descending` for a sort whose comparator orders its first operand (LT / GT, with or
    without jax's NaN and -0 canonicalisation in front), else Unsupported."""
    block, ops = cx.block_ops(op)
    args = list(block.arguments)
    ret = ops[-1]
    value = list(ret.operands)[0]
    if op_name(value) != "stablehlo.compare":
        raise Unsupported("stablehlo.sort", f"a comparator ending in {op_name(value) or 'an argument'}")
    final = value.owner
    direction = str(cx.ir.Attribute(final.attributes["comparison_direction"]))
    lhs, rhs = list(final.operands)

    def root(v):  # through jax's select(x == 0, 0, x) / select(isnan(x), nan, ...) canonicalisation
        while v not in args and op_name(v) == "stablehlo.select":
            v = list(v.owner.operands)[2]
        return v

    if root(lhs) == args[0] and root(rhs) == args[1]:
        flipped = False
    elif root(lhs) == args[1] and root(rhs) == args[0]:
        flipped = True
    else:
        raise Unsupported("stablehlo.sort", "a comparator that does not compare the first operand's pair")
    if "LT" in direction:
        return "descending" if flipped else "ascending"
    if "GT" in direction:
        return "ascending" if flipped else "descending"
    raise Unsupported("stablehlo.sort", f"a comparator with {direction}")
