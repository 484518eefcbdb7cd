"""Every op the StableHLO route writes: op name -> handler(converter, op) -> ONNX value names of its results."""

from __future__ import annotations

from . import control, elementwise, indexing, linalg, reduce, shape

HANDLERS = {**control.HANDLERS, **elementwise.HANDLERS, **shape.HANDLERS, **linalg.HANDLERS, **reduce.HANDLERS,
            **indexing.HANDLERS}
