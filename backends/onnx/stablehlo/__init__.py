"""multiexport's own StableHLO -> ONNX converter: the ONNX backend's second route.

jax2onnx traces the jaxpr with high-level plugins and fails where a model's Python meets them (symbolic
shape logic, an int32 Einsum, a 6-D MaxPool). The StableHLO module `jax.export` produced is the program
XLA and IREE run faithfully; converting it op by op writes a lower-level but complete graph. Static
shapes only: a symbolic module is refused, and the export's static-size fallback converts one per size.
"""

from __future__ import annotations

from .builder import Unsupported
from .convert import PRODUCER, convert_module

__all__ = ["PRODUCER", "Unsupported", "convert_module"]
