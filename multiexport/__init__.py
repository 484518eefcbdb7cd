"""multiexport: export one JAX function to XLA/PJRT, TF SavedModel, ONNX, IREE, LiteRT and OpenVINO, with
every input and output named, and check that each format computes the same numbers.

The Python API is the engine the command line calls: `compare`, `export`, `load`, `signature`, `describe`,
`register_backend`, with their config and result types (`CompareConfig`, `BenchConfig`, `ExportOptions`,
`Results`, `Artifact`, `Runner`). Every verb takes a function with its example arguments, a `Target` or a
TARGET string alike, and returns an object with the next verbs on it:

    exported = multiexport.export(f, params, batch, backend="onnx", out_dir="out/onnx")
    outputs = exported.run()              # named outputs, the artifact run from disk
    results = exported.compare()          # parity against jax.jit and latency

Importing this package imports no JAX or backend library; they load when a function needs them.
"""

from __future__ import annotations

from .api import (
    Exported,
    TargetSignature,
    as_target,
    compare,
    describe,
    export,
    load,
    register_backend,
    signature,
    target_spec,
)
from .comparison import CompareConfig, CompareOptions
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
from .exporting.contract import Artifact, ExportOptions, RunOptions, Runner
from .leaves import Signature, Target, load_target
from .measure.bench import BenchConfig
from .results import Results, Status
from .telemetry import quiet_runtimes as _quiet_runtimes
from .versions import __version__

# Before any runtime starts (importing this package starts none), here and in every worker (they inherit it).
_quiet_runtimes()

__all__ = [
    "Artifact",
    "ArtifactError",
    "BenchConfig",
    "CompareConfig",
    "CompareOptions",
    "ExportOptions",
    "Exported",
    "Results",
    "RunOptions",
    "Runner",
    "Signature",
    "Status",
    "BackendUnavailable",
    "ExportError",
    "InputError",
    "InternalError",
    "Interrupted",
    "MultiexportError",
    "RunError",
    "SignatureError",
    "Target",
    "TargetSignature",
    "TargetError",
    "UsageError",
    "__version__",
    "as_target",
    "compare",
    "describe",
    "export",
    "load",
    "load_target",
    "register_backend",
    "signature",
    "target_spec",
]
