"""The backend SDK: everything a format backend may use from multiexport, and nothing else.

A backend (`backends/<name>/`, or a package of its own registered with `exporting.registry.register` or the
`multiexport.backends` entry point) imports from this module alone; tests/test_architecture.py enforces it.
The core behind it may move; these names stay. docs/backend-sdk.md walks through writing one, and
examples/reference_backend/ is a complete backend in about a hundred lines.

The surface, by concern:
- The contract: `Backend` (its `BackendFacts` and `Presentation` records, `_export_impl(ExportJob)` and
  `_load_impl`), `Runner` (its `_impl` methods), the options dataclass's `option` fields (or `NoOptions`),
  `FormatResult` (what an export returns), `FormatFacts` (the format's typed facts in the manifest), `Option`,
  `ExportOptions`, `RunOptions`, `Availability`, `Artifact`, `Manifest`, `LeafBinding`, `ExportSetup`.
- Errors, one line each, from the one root: `ExportError`, `ArtifactError`, `RunError`, `UsageError`,
  `leaf_message` (the "Input 'x' | got A, expected B" line), `present` (an internal invariant).
- Shared stages: StableHLO (`export_module`, `module_interface`, `leaf_binding`, ...), baked weights
  (`plan`, `embedded`, `LiftedWeights`, ...), JAX-callable runners (`JitRunner`), precision and calibration,
  the stage a backend builds on (`export_stage`), TPU-only failures (`tpu_only`).
- Native consumers: `NativeConsumer`, `Recipe`, `Request`, `Call`, `Program` and the native section's helpers.
- Files and versions: atomic writes, `inside`, `current_umask`, `iter_safetensors`, `dist_version`, `parse_dtype`.
- A child process an export starts: `report_child_peak` (its own peak memory, into the row's figures).
"""

from __future__ import annotations

from .dtypes import parse_dtype
from .errors import ArtifactError, ExportError, RunError, UsageError, leaf_message, present
from .exporting.artifact import Artifact, Availability
from .exporting.backend_facts import BackendFacts, Presentation
from .exporting.contract import Backend
from .exporting.equation_sites import (
    EQUATION_TABLE_KEY,
    EQUATION_TABLE_VERSION,
    EquationTensor,
    equations_hint,
    feed_dims,
    map_equations,
    misshapen,
)
from .exporting.facts import ExportSetup, FormatFacts
from .exporting.format_result import FormatResult
from .exporting.instrument import (
    Instrumented,
    describe_location,
    instrument_module,
    run_module,
    user_frame,
)
from .exporting.intermediates import (
    SITE_TABLE_KEY,
    Intermediates,
    IntermediatesRequest,
    Site,
    SiteTable,
    TensorSite,
    map_sites,
    site_key,
)
from .exporting.jit_runner import JitRunner
from .exporting.job import ExportJob
from .exporting.manifest import LeafBinding, Manifest
from .exporting.native_consumer import Call, NativeConsumer, Program, Recipe, Request
from .exporting.native_section import (
    COMPILE_OPTIONS_FILE,
    INPUT_DIR,
    MLIR_DTYPES,
    NATIVE_SCHEMA,
    OUTPUT_DIR,
    NoNativeSection,
    bound_section,
    compile_options_proto,
    leaf_entry,
    npy_describes,
    ports,
    static_filename,
    static_key,
    static_size_sets,
    symbolic_names,
)
from .exporting.options import (
    ExportOptions,
    NoOptions,
    Option,
    RunOptions,
    declared_options,
    observed_threads,
    option,
    usable_cpus,
)
from .exporting.pipeline import export_stage
from .exporting.precision import CalibrationFacts, PrecisionFacts, calibration_facts, calibration_feeds
from .exporting.refine import refine_module
from .exporting.resident_runner import ResidentFeed, ResidentFeedRunner, ResidentSession, check_session_inputs
from .exporting.runner import Runner
from .exporting.stablehlo import (
    ModuleArg,
    concrete_specs,
    evaluate_dim,
    export_module,
    exported_header,
    ir_context,
    leaf_binding,
    module_aliases,
    module_attributes,
    module_interface,
    parse_module,
    producer_version,
    retarget,
)
from .exporting.stage_files import check_stage_dtypes, place_stage_file
from .exporting.tpu_only import tpu_only
from .files import current_umask, inside, write_bytes_atomic, write_text_atomic
from .files.safetensors import iter_safetensors
from .leaves import Leaf, Signature
from .leaves.signature import NeedsTarget
from .leaves.weights import WEIGHTS_FILE, LiftedWeights, embedded, externalizes, module_function, plan
from .native.runtimes import NativeBuildError, package_dir, tpu_presence, tpu_variables
from .system.descendants import report_child_peak
from .versions import dist_version

__all__ = [
    # the contract
    "Artifact", "Availability", "Backend", "BackendFacts", "Presentation", "NoOptions", "option", "declared_options", "ExportJob", "ExportOptions", "ExportSetup", "FormatFacts", "FormatResult",
    "LeafBinding", "Leaf", "Manifest", "Option", "RunOptions", "Runner", "Signature",
    # errors
    "ArtifactError", "ExportError", "RunError", "UsageError", "leaf_message", "present",
    # an export that needs the target's function in a worker that has not built it (not an Exception)
    "NeedsTarget",
    # shared stages: StableHLO
    "ModuleArg", "concrete_specs", "evaluate_dim", "export_module", "exported_header", "ir_context", "leaf_binding",
    "module_attributes", "module_interface", "parse_module", "producer_version", "retarget",
    # shared stages: weights, runners, precision, the stage built on, TPU-only failures
    "WEIGHTS_FILE", "LiftedWeights", "embedded", "externalizes", "module_function", "plan", "JitRunner",
    "CalibrationFacts", "PrecisionFacts", "calibration_facts", "calibration_feeds", "export_stage", "tpu_only",
    "observed_threads", "usable_cpus",
    # a runtime in another process holding the feeds (a JavaScript engine); a stage's files placed, its dtypes checked
    "ResidentFeed", "ResidentFeedRunner", "ResidentSession", "check_session_inputs", "check_stage_dtypes", "place_stage_file",
    # native consumers
    "Call", "NativeConsumer", "Program", "Recipe", "Request", "NativeBuildError", "package_dir", "tpu_presence",
    "tpu_variables", "COMPILE_OPTIONS_FILE", "INPUT_DIR", "MLIR_DTYPES", "NATIVE_SCHEMA", "OUTPUT_DIR",
    "NoNativeSection", "bound_section", "compile_options_proto", "leaf_entry", "npy_describes", "ports",
    "static_filename", "static_key", "static_size_sets", "symbolic_names",
    # files, dtypes, versions
    "current_umask", "inside", "iter_safetensors", "write_bytes_atomic", "write_text_atomic", "parse_dtype",
    "dist_version",
    # locate: the intermediates hook's types, and the instrumented StableHLO module (every op result returned)
    "Intermediates", "IntermediatesRequest", "Site", "site_key", "Instrumented", "instrument_module", "run_module",
    "describe_location", "user_frame", "SITE_TABLE_KEY", "SiteTable", "TensorSite", "map_sites",
    # StableHLO: the module's input/output aliases (a donated cache)
    "module_aliases",
    # locate on jax2onnx's graphs: the equation table its conversion records, paired with the module's ops
    "EQUATION_TABLE_KEY", "EQUATION_TABLE_VERSION", "EquationTensor", "equations_hint", "map_equations", "feed_dims",
    "misshapen",
    # locate: a module with symbolic dimensions refined to one feed's sizes (XLA's and the SavedModel's hooks)
    "refine_module",
    # a child process the export started, its own peak memory as it measured it (the row's export child peak)
    "report_child_peak",
]
