"""ONNX through jax2onnx, run by ONNX Runtime.

jax2onnx keeps every positional input, read or not: the graph itself says which inputs feed a node, and
without `keep_unused` the others are removed, so `param` is None exactly for the leaves the artifact does
not take (as XLA prunes them). The model is validated (onnx.checker full check, strict shape inference)
in the staging directory before the artifact is published; weights past 16 MiB (`auto`) or any
(`always`) go to `model.onnx.data` beside it, functions inlined first so none stays behind.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from multiexport.sdk import (
    ArtifactError,
    Availability,
    Backend,
    BackendFacts,
    ExportError,
    ExportJob,
    ExportSetup,
    FormatResult,
    Intermediates,
    IntermediatesRequest,
    Manifest,
    Presentation,
    RunError,
    RunOptions,
    Runner,
    Site,
    calibration_facts,
    calibration_feeds,
    embedded,
    externalizes,
)

from .convert import (
    DATA_FILE,
    MODEL_FILE,
    PLUGIN_IMPORT,
    STALE_SHAPE,
    check_no_random_ops,
    convert,
    declared_dtypes,
    drop_intermediate_shapes,
    drop_unread_inputs,
    jax2onnx_first_use,
    save,
    tensor_bytes,
    validate,
)
from .describe import Routed, facts_of, requires_of, versions_of, warnings_of
from .facts import OnnxFacts
from .intermediates import onnx_intermediates, reduced_onnx
from .native import ONNX_SESSION_OPTIONS, OrtConsumer, onnx_section
from .options import EXTERNAL_DATA_THRESHOLD_BYTES, OPSET, OnnxOptions  # noqa: F401  (re-exported)
from .quantize import quantize
from .routes import route_failure, run_once, stablehlo_model
from .runner import OnnxRunner, session_error, session_options as runner_session_options

# Failures the other route cannot avoid: the environment or the function, not the converter.
_NO_SECOND_ROUTE = frozenset({"unavailable", "size-limit", "version-skew", "interrupted", "timeout", "out-of-memory",
                              "nondeterministic-target", "internal-error"})


def _clear(directory: Path) -> None:
    """Remove the files a failed route wrote, so the next route starts from an empty directory."""
    for name in (MODEL_FILE, DATA_FILE):
        (directory / name).unlink(missing_ok=True)


def describe(exc: BaseException) -> str:
    return " ".join(str(exc).replace("Backend 'onnx' | ", "").split())[:600]

class OnnxBackend(Backend):
    spec = BackendFacts(
        name="onnx",
        requires=("onnx", "onnx_ir", "onnxruntime", "jax2onnx"),
        extra="onnx",
        distributions=("onnx", "onnx-ir", "onnxruntime", "jax2onnx"),
        runtime_modules=("onnxruntime",),
        facts_type=OnnxFacts,
        options_type=OnnxOptions,
        precisions=("fp32", "fp16", "int8-dynamic", "int8"),
        export_memory=(1.5, 0.75), runner_memory=(2.0, 0.25),  # measured peaks, docs/large-models.md "Memory"
        export_cost=2.4,  # median export seconds over the compare_time zoo (benchmarks/README.md)
        export_modules=("jax2onnx", "onnx_ir"),  # needs_target: jax2onnx traces the function (needs_target_for)
    )
    presentation = Presentation(
        summary="ONNX (jax2onnx, or multiexport's StableHLO converter) run by ONNX Runtime, inputs named by leaf",
        color="#2ca02c", order=30)

    def native_consumer(self):
        """ort_run on ONNX Runtime's C API (`native.OrtConsumer`)."""

        return OrtConsumer()

    def needs_target_for(self, backend_options, signature) -> bool:
        """The jax2onnx route (tried first for "auto") traces the function; the StableHLO route reads the module."""
        return self.resolve_options(backend_options).get("route") != "stablehlo"

    def _export_impl(self, job: ExportJob[OnnxOptions]) -> FormatResult:
        started = time.perf_counter()
        signature, out_dir, options = job.signature, job.out_dir, job.options
        routed = self._convert(job)
        model, unread, total, external, model_bytes, repaired = routed.made
        kept = {v.name for v in model.graph.inputs}
        precision = None
        if options.precision != "fp32":
            model, precision = self._reduce(signature, out_dir, options, kept)
            total, external, model_bytes = tensor_bytes(model), False, (out_dir / MODEL_FILE).stat().st_size
        used = [options.keep_unused or leaf.name not in unread for leaf in signature.inputs]
        params = [leaf.name if leaf.name in kept else None for leaf in signature.inputs]
        weights = ({"storage": "external", "file": DATA_FILE, "file_format": "ONNX external data",
                    "external_bytes": (out_dir / DATA_FILE).stat().st_size, "embedded_bytes": 0}
                   if external else embedded(signature))
        return FormatResult(
            files={"model": MODEL_FILE, **({"external_data": DATA_FILE} if external else {})},
            used=used, params=params, output_params=[o.name for o in signature.outputs],
            versions=versions_of(model, routed.route), requires=requires_of(model),
            format=facts_of(model, signature, routed, (model_bytes, total, external), unread, repaired, started),
            warnings=warnings_of(signature, routed, repaired, unread, options.keep_unused), weights=weights,
            declared=declared_dtypes(model),
            platforms=["cpu", "cuda"],  # an ONNX graph names no platform: the provider decides where it runs
            setup=ExportSetup(round(routed.first_use, 3),
                              f"jax2onnx plugin import, {PLUGIN_IMPORT[-1] if PLUGIN_IMPORT else 'all'} (once per process)"),
            native=onnx_section(signature.inputs, params, signature.outputs, [o.name for o in signature.outputs],
                                model=MODEL_FILE, session_options=ONNX_SESSION_OPTIONS),
            precision=precision,
        )

    def _convert(self, job: ExportJob[OnnxOptions]) -> Routed:
        """The graph written, validated and run once by the route asked: jax2onnx first for auto, multiexport's
        StableHLO converter when jax2onnx's graph fails (unless the failure is one no route avoids)."""
        fn, signature, out_dir, chosen = job.fn, job.signature, job.out_dir, job.backend_options
        route = chosen.route
        if route in ("auto", "jax2onnx"):
            try:
                first_use, in_process = jax2onnx_first_use(signature.flat_function(fn), list(signature.specs))
                model = convert(fn, signature, chosen.opset, double=signature.x64)
                check_no_random_ops(model, signature)
                made = self._write(model, signature, out_dir, job.options, chosen)
                return Routed(made, "jax2onnx", route, (), first_use, in_process)
            except ExportError as exc:
                if route == "jax2onnx" or exc.category in _NO_SECOND_ROUTE:
                    raise
                first_failure = exc
                _clear(out_dir)
        try:
            made = self._write(stablehlo_model(fn, signature, chosen.opset, job.options.static_sizes), signature, out_dir,
                               job.options, chosen)
        except ExportError as exc:
            if route == "stablehlo":
                raise
            raise route_failure(first_failure, exc) from first_failure
        note = (f"route stablehlo (multiexport's StableHLO -> ONNX converter): jax2onnx's graph was not used: "
                f"{describe(first_failure)}" if route == "auto" else
                "route stablehlo (multiexport's StableHLO -> ONNX converter), as asked (onnx.route)")
        return Routed(made, "stablehlo", route, (note,))

    def _reduce(self, signature, out_dir: Path, options, kept: set[str]):
        """The fp32 model just written, rewritten at `options.precision` by ONNX Runtime's own tools
        (quantize.py), then run once like any graph. Returns (the written model, its PrecisionFacts)."""
        import onnx_ir as ir



        feeds = calibration_feeds(signature, options.calibration) if options.calibration is not None else []
        calibration = calibration_facts(feeds, options.calibration) if options.calibration is not None else None
        names = {leaf.name: leaf.name for leaf in signature.inputs if leaf.name in kept}  # graph inputs are leaf names
        facts = quantize(out_dir, MODEL_FILE, DATA_FILE, options.precision, feeds, calibration, names)
        model = ir.load(str(out_dir / MODEL_FILE))
        run_once(out_dir / MODEL_FILE, signature, model)
        return model, facts

    def _write(self, model, signature, out_dir: Path, options, chosen: OnnxOptions):
        """Drop unread inputs, save (external data past the threshold), validate, and run the graph once in
        ONNX Runtime: a graph that validates can still fail on every call, and that is the converter's doing.
        Returns (model, unread, tensor bytes, external, file bytes, repair note)."""
        unread = drop_unread_inputs(model, signature, options.keep_unused)
        total = tensor_bytes(model)
        threshold = chosen.external_data_threshold
        external = externalizes(options.external_weights, total) or total > threshold
        if external and options.external_weights == "never":
            raise ExportError(
                f"Backend '{self.name}' | '{signature.name}' | got {total / 2**30:.2f} GiB of tensors with external "
                f"weights 'never', expected at most {threshold / 2**30:.2f} GiB in one protobuf (ONNX's 2 GB limit): "
                "use external weights 'auto' or 'always'", backend=self.name, category="size-limit")
        model_bytes = save(model, out_dir, external)
        repaired = None
        try:
            validate(out_dir / MODEL_FILE, self.name)
        except ExportError as exc:
            if STALE_SHAPE not in str(exc):
                raise
            # The converter's own optional shape hints are wrong, not the graph: drop them and check again.
            # A graph that is still invalid fails here; one that validates is judged by parity like any other.
            cleared = drop_intermediate_shapes(model)
            model_bytes = save(model, out_dir, external)
            validate(out_dir / MODEL_FILE, self.name)
            repaired = (f"jax2onnx wrote intermediate shape annotations that ONNX shape inference contradicts "
                        f"({STALE_SHAPE}); removed all {cleared} intermediate annotations (optional hints; "
                        "interface shapes kept) and the file validates")
        run_once(out_dir / MODEL_FILE, signature, model)
        return model, unread, total, external, model_bytes, repaired

    def _gpu_status_impl(self) -> Availability:
        import onnxruntime as ort

        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            return Availability(False, f"ONNX Runtime {ort.__version__} has no CUDAExecutionProvider "
                                       f"({', '.join(providers)}): install onnxruntime-gpu ('multiexport[gpu]')")
        return Availability(True, f"ONNX Runtime {ort.__version__} with CUDAExecutionProvider")

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        import onnxruntime as ort

        session_options = runner_session_options(ort, options.thread_count)
        providers = ["CPUExecutionProvider"]
        if options.device == "gpu":
            available = ort.get_available_providers()
            if "CUDAExecutionProvider" not in available:
                raise RunError(f"Device 'gpu' | ONNX Runtime {ort.__version__} has providers {', '.join(available)}, "
                               "expected CUDAExecutionProvider (install onnxruntime-gpu)", category="no-gpu")
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        model = manifest.path(directory, "model")
        if "external_data" in manifest.files:
            manifest.path(directory, "external_data")  # inside the artifact, like every listed file
        try:
            session = ort.InferenceSession(str(model), session_options, providers=providers)
        except Exception as exc:
            raise session_error(exc, manifest, directory) from exc
        if options.device == "gpu" and session.get_providers()[0] != "CUDAExecutionProvider":
            # ORT falls back to CPU when the CUDA libraries fail to load; never time that as "gpu".
            raise RunError(f"Device 'gpu' | session runs on {', '.join(session.get_providers())}, "
                           "expected CUDAExecutionProvider (see ONNX Runtime's log for the CUDA load failure)",
                           category="no-gpu")
        want_in = [leaf.param for leaf in manifest.inputs if leaf.param is not None]
        want_out = [leaf.param for leaf in manifest.outputs]
        got_in = [i.name for i in session.get_inputs()]
        got_out = [o.name for o in session.get_outputs()]
        if got_in != want_in or got_out != want_out:
            raise ArtifactError(f"Artifact '{directory}' | {MODEL_FILE} has inputs {got_in} and outputs {got_out}, "
                                f"manifest expects {want_in} and {want_out}")
        return OnnxRunner(manifest, directory, options, session)

    def _intermediates_impl(self, request: IntermediatesRequest) -> Intermediates:
        """The shipped graph with every mapped tensor as an output, run by ONNX Runtime (intermediates.py)."""
        return onnx_intermediates(request)

    def _reduced_artifact_impl(self, request: IntermediatesRequest, site: Site, operands: Sequence[Site],
                               op_module: bytes, out_dir: Path) -> str:
        """The shipped graph cut to the op (intermediates.py)."""
        return reduced_onnx(request, site, operands, out_dir)


BACKEND = OnnxBackend
