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

from multiexport.sdk import (
    ArtifactError,
    Availability,
    Backend,
    ExportError,
    ExportSetup,
    FormatResult,
    Manifest,
    Option,
    RunError,
    RunOptions,
    Runner,
    calibration_facts,
    calibration_feeds,
    dist_version,
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
from .facts import OnnxFacts
from .native import ONNX_SESSION_OPTIONS, OrtConsumer, onnx_section
from .quantize import quantize
from .routes import ROUTES, route_failure, run_once, stablehlo_model
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

# Opset 21 (ONNX 1.16, March 2024) is the newest opset ONNX released with IR version 10, the IR
# version jax2onnx writes whatever the opset (its "ORT-safe" choice): the pair stays consistent and
# older deployed runtimes accept it, and it still has Gelu (20) and LayerNormalization (17).
OPSET = 21
# Protobuf cannot serialize a message of 2 GiB or more: past this many bytes of tensors they go to
# model.onnx.data (64 MiB of headroom for the graph itself).
EXTERNAL_DATA_THRESHOLD_BYTES = 2**31 - 2**26


class OnnxBackend(Backend):
    name = "onnx"
    summary = "ONNX (jax2onnx, or multiexport's StableHLO converter) run by ONNX Runtime, inputs named by leaf"
    requires = ("onnx", "onnx_ir", "onnxruntime", "jax2onnx")
    extra = "onnx"
    distributions = ("onnx", "onnx-ir", "onnxruntime", "jax2onnx")
    color = "#2ca02c"
    order = 30
    runtime_modules = ("onnxruntime",)
    facts_type = OnnxFacts
    precisions = ("fp32", "fp16", "int8-dynamic", "int8")
    options = (
        Option("route", "auto", str, "which converter writes the graph: jax2onnx (from the jaxpr), stablehlo "
               "(multiexport's own, from the exported StableHLO module), or auto (jax2onnx, and stablehlo when "
               "jax2onnx fails to convert or its graph fails to validate or run once)", choices=ROUTES),
        Option("opset", OPSET, int, "ONNX opset to target (jax2onnx writes IR version 10 whatever the opset)",
               minimum=17),
        Option("external_data_threshold", EXTERNAL_DATA_THRESHOLD_BYTES, int,
               "bytes of tensors past which they always go to model.onnx.data (protobuf cannot hold 2 GiB)", minimum=0),
    )

    def native_consumer(self):
        """ort_run on ONNX Runtime's C API (`native.OrtConsumer`)."""

        return OrtConsumer()

    def _export_impl(self, fn, signature, out_dir: Path, options, resolved, frontend) -> FormatResult:
        t0 = time.perf_counter()
        route = resolved["route"]
        first_use = first_use_in_process = 0.0
        notes: list[str] = []
        made = None
        if route in ("auto", "jax2onnx"):
            try:
                first_use, first_use_in_process = jax2onnx_first_use(signature.flat_function(fn),
                                                                     list(signature.specs))
                model = convert(fn, signature, resolved["opset"], double=signature.x64)
                check_no_random_ops(model, signature)
                made = self._write(model, signature, out_dir, options, resolved)
                used_route = "jax2onnx"
            except ExportError as exc:
                if route == "jax2onnx" or exc.category in _NO_SECOND_ROUTE:
                    raise
                first_failure = exc
                _clear(out_dir)
        if made is None:
            try:
                model = stablehlo_model(fn, signature, resolved["opset"])
                made = self._write(model, signature, out_dir, options, resolved)
            except ExportError as exc:
                if route == "stablehlo":
                    raise
                raise route_failure(first_failure, exc) from first_failure
            used_route = "stablehlo"
            if route == "auto":
                notes.append(f"route stablehlo (multiexport's StableHLO -> ONNX converter): jax2onnx's graph was not "
                             f"used: {describe(first_failure)}")
            else:
                notes.append("route stablehlo (multiexport's StableHLO -> ONNX converter), as asked (onnx.route)")
        model, unread, total, external, model_bytes, repaired = made
        kept = {v.name for v in model.graph.inputs}
        precision = None
        if options.precision != "fp32":
            model, precision = self._reduce(signature, out_dir, options, kept)
            total, external, model_bytes = tensor_bytes(model), False, (out_dir / MODEL_FILE).stat().st_size
        used = [options.keep_unused or leaf.name not in unread for leaf in signature.inputs]
        params = [leaf.name if leaf.name in kept else None for leaf in signature.inputs]
        warnings = [*notes, *([repaired] if repaired else [])]
        if unread and options.keep_unused:
            warnings.append(f"keep_unused: the graph takes but never reads {', '.join(unread)}")
        if any(leaf.dtype == "bfloat16" for leaf in (*signature.inputs, *signature.outputs)):
            warnings.append("bfloat16 leaves: ONNX Runtime's CPU provider has no bfloat16 kernel for most ops "
                            "(Gemm, Einsum, ...), so this artifact may load only on a provider that has them")
        weights = ({"storage": "external", "file": DATA_FILE, "file_format": "ONNX external data",
                    "external_bytes": (out_dir / DATA_FILE).stat().st_size, "embedded_bytes": 0}
                   if external else embedded(signature))
        opset, ir_version = model.opset_imports[""], model.ir_version
        return FormatResult(
            files={"model": MODEL_FILE, **({"external_data": DATA_FILE} if external else {})},
            used=used, params=params, output_params=[o.name for o in signature.outputs],
            versions={**{d: dist_version(d) for d in ("jax2onnx", "onnx", "onnx-ir", "onnxruntime")
                         if d != "jax2onnx" or used_route == "jax2onnx"},
                      "onnx_opset": str(opset), "onnx_ir_version": str(ir_version)},
            requires={"onnx_opset": opset, "onnx_ir_version": ir_version,
                      "note": f"an ONNX runtime that implements opset {opset} (default domain) and reads IR version "
                              f"{ir_version} (ONNX Runtime 1.16 or newer)"},
            format=OnnxFacts(
                weights=("initializers of 1 KiB or more in model.onnx.data (ONNX external data, read by path "
                         "relative to model.onnx)" if external else "initializers inside model.onnx"),
                opset=opset, ir_version=ir_version,
                producer=f"{model.producer_name} {model.producer_version}".strip(),
                route=used_route, route_requested=route,
                graph_inputs=[v.name for v in model.graph.inputs],
                graph_outputs=[v.name for v in model.graph.outputs],
                unread_inputs=list(unread),
                model_bytes=model_bytes, tensor_bytes=total, external_data=external,
                double_precision=signature.x64,
                validation="onnx.checker.check_model(full_check=True) + strict shape inference with data propagation",
                repaired=repaired,
                export_seconds=round(time.perf_counter() - t0, 3),
                jax2onnx_first_use_seconds_in_process=round(first_use_in_process, 3),
            ),
            warnings=warnings, weights=weights, declared=declared_dtypes(model),
            platforms=["cpu", "cuda"],  # an ONNX graph names no platform: the provider decides where it runs
            setup=ExportSetup(round(first_use, 3),
                              f"jax2onnx plugin import, {PLUGIN_IMPORT[-1] if PLUGIN_IMPORT else 'all'} (once per process)"),
            native=onnx_section(signature.inputs, params, signature.outputs, [o.name for o in signature.outputs],
                                model=MODEL_FILE, session_options=ONNX_SESSION_OPTIONS),
            precision=precision,
        )

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

    def _write(self, model, signature, out_dir: Path, options, resolved):
        """Drop unread inputs, save (external data past the threshold), validate, and run the graph once in
        ONNX Runtime: a graph that validates can still fail on every call, and that is the converter's doing.
        Returns (model, unread, tensor bytes, external, file bytes, repair note)."""
        unread = drop_unread_inputs(model, signature, options.keep_unused)
        total = tensor_bytes(model)
        threshold = resolved["external_data_threshold"]
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


BACKEND = OnnxBackend
