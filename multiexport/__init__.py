"""multiexport: export one JAX function to XLA/PJRT, TF SavedModel, ONNX and IREE, with every input
and output named, and check that each format computes the same numbers.

Importing this package imports no JAX or backend library; they load when a function needs them.
"""

from __future__ import annotations

__version__ = "0.2.0"

from .api import as_target, compare, describe, export, load, signature
from .errors import (
    ArtifactError,
    BackendUnavailable,
    ExportError,
    InputError,
    InternalError,
    Interrupted,
    MultiexportError,
    RunError,
    SignatureError,
    TargetError,
    UsageError,
)
from .signature import Target, load_target

__all__ = [
    "ArtifactError",
    "BackendUnavailable",
    "ExportError",
    "InputError",
    "InternalError",
    "Interrupted",
    "MultiexportError",
    "RunError",
    "SignatureError",
    "Target",
    "TargetError",
    "UsageError",
    "__version__",
    "as_target",
    "compare",
    "describe",
    "export",
    "load",
    "load_target",
    "signature",
]
