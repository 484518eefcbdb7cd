"""LiteRT (TFLite): the SavedModel stage converted by TensorFlow's TFLite converter, run by ai_edge_litert.

Built on the SavedModel backend's export (`builds_on`): the core writes that stage into a temporary
directory and this backend converts its `serving_default` signature with
`tf.lite.TFLiteConverter.from_saved_model(dir, signature_keys=["serving_default"])` into
`model.tflite`. The signature's keys are the leaves' aliases, in and out (`foo_baz`, `out_logits`), so a
LiteRT caller finds every tensor by name through the signature; the raw tensor order is neither leaf
order nor sorted. Leaves the SavedModel dropped are not signature inputs; a symbolic batch stays a -1
in `shape_signature` and is resized by the interpreter.

Only TFLite builtin ops are allowed (`target_spec.supported_ops = [TFLITE_BUILTINS]`, stated in the
manifest): an op that is not a builtin fails the export as `unsupported-op` naming it. The
`select_tf_ops` option converts with SELECT_TF_OPS too, and says so; the ai_edge_litert interpreter
cannot run such (flex) ops, so the load check then refuses the artifact unless none were needed.

The SavedModel stage writes its module for the StableHLO the installed TensorFlow reads and checks it
with TensorFlow's reader, which is the converter's too: skew between the producing JAX and this
TensorFlow therefore fails in that stage (`version-skew`), and the pre-check here (every XlaCallModule
module read by the converter's StableHLO reader) catches a SavedModel not written for it, naming the
module's StableHLO version (its bytecode header) and the converter's. The interpreter runs on the CPU
with XNNPACK as the default delegate and `num_threads` always passed (LiteRT's default is 1).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from multiexport.sdk import (
    ArtifactError,
    Backend,
    BackendFacts,
    ExportError,
    ExportJob,
    FormatResult,
    Intermediates,
    IntermediatesRequest,
    Manifest,
    PrecisionFacts,
    Presentation,
    RunError,
    RunOptions,
    Runner,
    calibration_facts,
    calibration_feeds,
    embedded,
    present,
)

from . import convert as converting
from .convert import (
    MODEL_FILE,
    NEEDS_CUSTOM_OPS,
    NEEDS_FLEX_OPS,
    PRECISION_CALLS,
    ConversionFailed,
    check_modules,
    convert,
    converter_stablehlo,
    model_metadata,
    op_names,
    precision_ops,
    requantization_gap,
)
from .describe import (
    LiteRTOptions,
    facts_of,
    requires_of,
    signature_tensors,
    versions_of,
    warnings_of,
)
from .facts import LiteRTFacts
from .intermediates import litert_intermediates
from .native import LiteConsumer, litert_section
from .runner import FLEX, LiteRTRunner, allocate_in_child, open_interpreter, signature_of

# Leaf dtypes TFLite builtins have no general kernels for: a legalization failure with one of these
# leaves is a dtype gap (bf16/f16 matmuls, f64 arithmetic, float8 casts, uint8 adds), not a missing op.
NARROW = ("bfloat16", "float16", "float64", "uint8", "uint16", "uint64", "int4", "uint4", "complex")
_ILLEGAL = re.compile(r"failed to legalize operation '([\w.]+)' that was explicitly marked illegal")
_VHLO = re.compile(r"'vhlo\.(\w+?)_v\d+' op is not part of the vhlo support yet")
_UNREGISTERED = re.compile(r"unregistered operation '([\w.]+)'")
_SKEW = ("'tf.XlaCallModule' op is neither a custom op nor a flex op", "failed to deserialize portable artifact")


class LiteRTBackend(Backend):
    spec = BackendFacts(
        name="litert",
        requires=("ai_edge_litert", "tensorflow"),  # TensorFlow: the converter
        extra="litert",
        distributions=("ai-edge-litert", "tensorflow-cpu", "tensorflow"),  # TensorFlow converts
        builds_on="savedmodel",
        weight_storage=("embedded",),  # a .tflite keeps its tensors in its own flatbuffer
        runtime_modules=("ai_edge_litert.interpreter",),
        facts_type=LiteRTFacts,
        options_type=LiteRTOptions,
        precisions=("fp32", "fp16", "int8-dynamic", "int8"),
        export_memory=(2.0, 1.35), runner_memory=(2.5, 0.25),  # measured peaks, docs/large-models.md "Memory"
        export_cost=0.9,  # median export seconds over the compare_time zoo (benchmarks/README.md)
        needs_target=False, export_modules=("tensorflow",),  # its converter is TensorFlow Lite's
    )
    presentation = Presentation(
        summary="LiteRT .tflite (TFLite converter from the SavedModel), TFLite builtins only, run by ai_edge_litert",
        color="#e377c2", order=50)

    def native_consumer(self):
        """lite_run on LiteRT's C API (`native.LiteConsumer`)."""

        return LiteConsumer()

    def _intermediates_impl(self, request: IntermediatesRequest) -> Intermediates:
        """The shipped model.tflite run with every tensor kept, tensors paired with sites by the converter's names
        (`intermediates.litert_intermediates`)."""
        return litert_intermediates(request)

    def _export_impl(self, job: ExportJob[LiteRTOptions]) -> FormatResult:
        import tensorflow as tf

        signature, options, out_dir = job.signature, job.options, job.out_dir
        stage = present(job.stage, "handed by the driver: litert builds on savedmodel")
        front = {leaf.name: leaf for leaf in stage.manifest.inputs}
        samples, calibration = self._samples(signature, options, front)
        try:
            stablehlo = check_modules(stage.directory)
            weights = int(signature.weights.get("baked_bytes", 0)) + int(signature.weights.get("input_bytes", 0))
            blob, ops = convert(stage.directory, job.backend_options.select_tf_ops, options.precision, samples,
                                buffer_offsets=weights > converting.OFFSET_BYTES, out=out_dir / MODEL_FILE)
        except ConversionFailed as exc:  # classify() names a dtype gap by the leaves' dtypes
            exc.leaf_dtypes = sorted({leaf.dtype for leaf in (*signature.inputs, *signature.outputs)})
            raise
        # XNNPACK's partitions, counted in a child process (runner.allocate_in_child), which a reduced model's
        # check reads too: one child prepares the model for both
        partitions = (self._check_prepares(out_dir / MODEL_FILE, blob, options.precision)
                      if options.precision != "fp32" else allocate_in_child(str(out_dir / MODEL_FILE))[0])
        meta, used_ops = model_metadata(blob), op_names(blob)
        params: Any = [front[leaf.name].param for leaf in signature.inputs]  # the SavedModel's keys (aliases)
        output_params: Any = [leaf.alias for leaf in signature.outputs]
        # no XNNPACK in this process: its packed copy of the weights would sit beside the target's (describe.py)
        tensors = signature_tensors(str(out_dir / MODEL_FILE), signature, params, output_params, stablehlo)
        flex = [op for op in used_ops if op.startswith("custom:Flex")]
        model = (len(blob), meta, partitions)
        return FormatResult(
            files={"model": MODEL_FILE}, used=[front[leaf.name].used for leaf in signature.inputs], params=params,
            output_params=output_params, versions=versions_of(tf, stablehlo, stage.manifest, meta),
            requires=requires_of(meta, ops, flex),
            format=facts_of(tf, job.backend_options, ops, used_ops, flex, tensors, stablehlo, stage.manifest, model),
            warnings=warnings_of(signature, flex, options.external_weights), weights=embedded(signature),
            declared={name: t["dtype"] for role in tensors.values() for name, t in role.items()}, platforms=["cpu"],
            native=litert_section(signature.inputs, params, signature.outputs, output_params, model=MODEL_FILE),
            precision=self._precision(options, blob, calibration, tf.__version__),
        )

    def _check_prepares(self, path: Path, blob: bytes, precision: str) -> int | None:
        """A reduced model whose kernels cannot be prepared is refused before this process opens it: one whose
        int8 ADD/SUB LiteRT would abort on names the op and the range calibration gave it (unsupported-precision);
        any other native crash preparing it, found in a child process, is `crashed` here, not this process's end.
        Returns the XNNPACK partitions that child counted (`allocate_in_child`)."""

        gap = requantization_gap(blob)
        if gap:
            raise ExportError(f"Backend '{self.name}' | no {precision} artifact: {gap}. The calibration met float32's "
                              "extremes (an attention mask's finfo(float32).min bias, a clamp to float32's max): a "
                              "finite bias such as -1e9 quantizes", backend=self.name, category="unsupported-precision")
        partitions, died = allocate_in_child(str(path))
        if died:
            raise ExportError(f"Backend '{self.name}' | LiteRT's interpreter died by {died} preparing the {precision} "
                              "model (native code in a kernel's Prepare, seen in a child process): no such artifact",
                              backend=self.name, category="crashed")
        return partitions

    def _samples(self, signature, options, front):
        """(the int8 calibration feeds keyed by the signature's input names, leaves the SavedModel dropped left
        out; their CalibrationFacts), or (None, None) for the other precisions."""
        if options.calibration is None:
            return None, None

        feeds = calibration_feeds(signature, options.calibration)
        taken = [leaf.name for leaf in signature.inputs if front[leaf.name].param is not None]
        samples = [{front[name].param: feed[name] for name in taken} for feed in feeds]
        return samples, calibration_facts(feeds, options.calibration, taken)

    def _precision(self, options, blob: bytes, calibration, tf_version: str):
        """The PrecisionFacts of a reduced-precision conversion (None at fp32)."""
        if options.precision == "fp32":
            return None


        reduced, kept = precision_ops(blob)
        notes = {"fp16": "float16 weights; the CPU (XNNPACK) dequantizes them to float32 at load and computes in "
                         "float32 unless the device has float16 arithmetic",
                 "int8-dynamic": "int8 weights; activations quantized on the fly where the kernel supports it, "
                                 "float32 elsewhere",
                 "int8": "ops without an int8 kernel stay float32 (TFLITE_BUILTINS, not TFLITE_BUILTINS_INT8 only), "
                         "so the model converts whatever its ops"}
        return PrecisionFacts(precision=options.precision,
                              method=f"tf.lite.TFLiteConverter.from_saved_model(...); {PRECISION_CALLS[options.precision]}",
                              toolchain=f"tensorflow {tf_version} (TFLite converter)", calibration=calibration,
                              quantized_ops=reduced, float_ops=kept, io="float32 inputs and outputs, as the leaves declare",
                              notes=[notes[options.precision]],
                              # fp16 and dynamic range reduce the stored weights; the CPU computes in float32
                              weights_only=options.precision in ("fp16", "int8-dynamic"))

    def classify(self, exc: BaseException, stage: str) -> tuple[str, str] | None:
        if isinstance(exc, ConversionFailed):
            return _classify_conversion(exc)
        if isinstance(exc, RunError) and exc.category != RunError.default_category:
            return None  # the runner already named it (flex ops, a kernel that cannot prepare)
        text = " ".join(str(exc).split())
        if any(s in text for s in _SKEW):

            return ("version-skew", f"the TFLite converter (StableHLO {converter_stablehlo()}) cannot read the "
                    f"SavedModel's module: {text[:600]}")
        if FLEX in text:
            return ("unsupported-op", "the converted model needs TensorFlow (flex) ops, and the ai_edge_litert "
                    f"interpreter cannot run flex ops (SELECT_TF_OPS was enabled): {text[:600]}")
        return None

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        if options.device != "cpu":
            raise RunError(f"Device '{options.device}' | the ai_edge_litert interpreter runs on the CPU here "
                           "(its GPU accelerator is WebGPU/OpenCL, not CUDA)", category="no-gpu")
        model = manifest.path(directory, "model")
        try:
            interpreter = open_interpreter(str(model), options.thread_count)
        except (RuntimeError, ValueError) as exc:
            raise ArtifactError(f"Artifact '{directory}' | LiteRT cannot load {manifest.files['model']}: "
                                f"{' '.join(str(exc).split())[:800]}") from exc
        sig = signature_of(interpreter)
        want_in = sorted(str(leaf.param) for leaf in manifest.inputs if leaf.param is not None)
        want_out = sorted(str(leaf.param) for leaf in manifest.outputs)
        if sig is None or sorted(sig["inputs"]) != want_in or sorted(sig["outputs"]) != want_out:
            got = "no serving_default signature" if sig is None else f"inputs {sorted(sig['inputs'])} and outputs " \
                                                                      f"{sorted(sig['outputs'])}"
            raise ArtifactError(f"Artifact '{directory}' | {manifest.files['model']} has {got}, manifest expects "
                                f"{want_in} and {want_out}")
        return LiteRTRunner(manifest, directory, options, interpreter, sig)


def _classify_conversion(exc: ConversionFailed) -> tuple[str, str]:
    text = exc.text
    versions = f"the module is StableHLO {exc.producer or 'of unknown version'}, the converter reads StableHLO {exc.consumer}"
    if exc.kind == "version-skew" or any(s in text for s in _SKEW):
        unknown = sorted(set(_UNREGISTERED.findall(text)))
        detail = f" and has {', '.join(unknown)}, which it does not know" if unknown else ""
        return ("version-skew", f"version skew: {versions}{detail} ({_first(text)}): convert with a TensorFlow whose "
                "StableHLO reads the module, or export from the SavedModel backend with the TensorFlow that converts "
                "(it writes the module for that TensorFlow's StableHLO)")
    flex = sorted({op for code, op in exc.errors if code == NEEDS_FLEX_OPS})
    if flex:
        return ("unsupported-op", f"{', '.join(flex)} is not a TFLite builtin op (ERROR_NEEDS_FLEX_OPS). Converting "
                "with SELECT_TF_OPS (option litert.select_tf_ops) would keep it as a TensorFlow kernel, which the "
                "ai_edge_litert interpreter cannot run (it needs the Flex delegate linked in): not enabled")
    vhlo = _VHLO.search(text)
    if vhlo:
        return ("unsupported-op", f"the TFLite converter has no lowering for stablehlo.{vhlo.group(1)} "
                f"({_first(text)})")
    illegal = sorted(set(_ILLEGAL.findall(text)))
    if illegal:
        narrow = sorted({d for d in exc.leaf_dtypes if d.startswith(NARROW) or d.startswith("float8")})
        if narrow:
            return ("unsupported-dtype", f"TFLite builtins have no {'/'.join(narrow)} kernel for {', '.join(illegal)} "
                    f"(failed to legalize {', '.join(illegal)})")
        return ("unsupported-op", f"TFLite has no builtin kernel for {', '.join(illegal)} with these operand types "
                "(failed to legalize)")
    custom = sorted({op for code, op in exc.errors if code == NEEDS_CUSTOM_OPS})
    if custom:
        return ("unsupported-op", f"{', '.join(custom)} is left as a custom op the LiteRT runtime does not have")
    if re.search(r"\b2 ?GB\b", text):
        return ("size-limit", f"a .tflite flatbuffer holds at most 2 GB: {_first(text)}")
    return ("converter-error", f"the TFLite converter failed: {_first(text)}")


def _first(text: str) -> str:
    """The converter's first MLIR error message, else the text's start."""
    found = re.search(r"error: (.+?)(?:\n|$| \S+:\d+:\d+: note:)", text)
    return " ".join((found.group(1) if found else text).split())[:600]


BACKEND = LiteRTBackend
