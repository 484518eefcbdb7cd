"""A dimension the jax2onnx equation table records symbolically (`b`, `2*b + 1`: jax's shape expressions), sized
with a trial's values of its symbols, so a recorded shape can be compared with the reference op's concrete one."""

from __future__ import annotations

import ast
from typing import Mapping


def recorded_size(dim: int | str, dims: Mapping[str, int]) -> int:
    """A recorded dimension's size: an int as is, a symbolic one (`b`, `2*b + 1`) evaluated with the trial's sizes;
    -1 (matching no op's shape) when it names a dimension the trial does not bind or is not plain arithmetic."""
    if isinstance(dim, int):
        return dim
    try:
        return int(_arith(ast.parse(str(dim), mode="eval").body, dims))
    except (ValueError, SyntaxError, KeyError, ZeroDivisionError):
        return -1


def _arith(node: ast.AST, dims: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return int(dims[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arith(node.operand, dims)
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left, dims), _arith(node.right, dims)
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b} if not isinstance(node.op, (ast.FloorDiv, ast.Mod)) \
            else {ast.FloorDiv: a // b, ast.Mod: a % b}
        if type(node.op) in ops:
            return ops[type(node.op)]
    raise ValueError(f"not plain arithmetic: {ast.dump(node)[:80]}")
