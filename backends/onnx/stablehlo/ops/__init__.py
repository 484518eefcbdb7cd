"""Every op the StableHLO route writes: op name -> handler(converter, op) -> ONNX value names of its results;
and every module's test cases, declared beside its handlers (opcases.py)."""

from __future__ import annotations

from . import bits, control, elementwise, indexing, linalg, reduce, shape

_MODULES = (control, elementwise, bits, shape, linalg, reduce, indexing)
HANDLERS = {name: handler for module in _MODULES for name, handler in module.HANDLERS.items()}
# The elementwise ops (one value per element, every operand of the result's shape): shape-agnostic handlers.
ELEMENTWISE_KINDS = tuple(name for name in elementwise.HANDLERS if name != "stablehlo.constant")
CASES = tuple(c for module in _MODULES for c in getattr(module, "CASES", ()))
