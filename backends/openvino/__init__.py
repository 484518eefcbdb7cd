"""OpenVINO: the ONNX stage's model.onnx, read by OpenVINO's ONNX frontend and run by its CPU plugin.

Built on the ONNX backend's export (`builds_on`): the core writes that stage into a temporary directory
and this backend ships its `model.onnx` (and `model.onnx.data`) as they are. OpenVINO reads ONNX
natively and keeps the graph's input and output names, which are the leaf names (`foo.baz`,
`out.logits`), and a symbolic batch stays `?`. The file is not converted to OpenVINO IR, because IR
bought nothing measurable here and adds a trap: `read_model` of the ONNX took 1.7-4.2 ms against
2.1-5.6 ms for the IR (mlp_dynamic, transformer, lm_small_baked), the IR was larger (653 KB vs 558 KB
for the LM), the outputs were bit-identical, and `ov.save_model` compresses weights to float16 unless
told not to (error vs ONNX Runtime 2.3e-6 -> 2.95e-3 on the LM). Shipping the ONNX file also means
OpenVINO and ONNX Runtime run the very same bytes; `format.ir_command` gives the conversion for a
deployer who wants IR.

The CPU plugin is compiled for one synchronous request (PERFORMANCE_HINT=LATENCY, NUM_STREAMS=1,
INFERENCE_NUM_THREADS = the runner's threads) with INFERENCE_PRECISION_HINT=f32, read back after
compiling: on CPUs with native bf16 (AVX512_BF16, AMX) OpenVINO would otherwise lower f32 math to bf16,
so a compiled model that reports another precision is refused. OpenVINO's CPU plugin computes int64 in
int32 and float64 in float32 without a word (measured: (2^40+3)*2 gives 6, (1+1e-12)*2 gives 2.0), so
64-bit leaves are refused at export (`unsupported-dtype`) unless the `allow_64bit` option accepts that.
Reduced precisions are OpenVINO IR: fp16 by `ov.save_model`, int8 by NNCF (int8.py, the extra openvino-int8).
"""

from __future__ import annotations

import tempfile
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
    export_stage,
    parse_dtype,
    place_stage_file,
    present,
    usable_cpus,
)

from .describe import (  # noqa: F401  (WIDE, ONNX_ROUTES: re-exported, they were defined here)
    ONNX_ROUTES,
    WIDE,
    OpenVINOOptions,
    declared_of,
    facts_of,
    requires_of,
    stage_warnings,
    versions_of,
    wide_leaves,
)
from .facts import OpenVINOFacts
from .int8 import nncf_missing, quantize
from .intermediates import openvino_intermediates
from .native import OPENVINO_PROPERTIES, OpenVINOConsumer, openvino_section
from .probe import compile_probe, files_bytes
from .runner import (
    OpenVINORunner,
    check_ports,
    classify_text,
    compiled,
    config,
    import_openvino,
    properties,
    telemetry_state,
    write_ir,
)

CACHE_MEASURE_LIMIT_BYTES = 256 << 20  # past this the cache measurement (three compiles) is skipped


class OpenVINOBackend(Backend):
    spec = BackendFacts(
        name="openvino",
        requires=("openvino",),  # the ONNX stage checks its own (onnx, jax2onnx)
        extra="openvino",
        distributions=("openvino",),
        builds_on="onnx",
        runtime_modules=("openvino",),
        facts_type=OpenVINOFacts,
        options_type=OpenVINOOptions,
        precisions=("fp32", "fp16", "int8"),  # int8 with the optional extra openvino-int8 (NNCF): check_precision
        precision_gaps={"int8-dynamic": "OpenVINO's int8 without calibration is NNCF's weight compression "
                                        "(nncf.compress_weights: int8 weights, float activations), not activations "
                                        "quantized per call; openvino@int8 (calibrated) and onnx@int8-dynamic are"},
        export_memory=(1.5, 1.25), runner_memory=(2.0, 0.25),  # measured peaks, docs/large-models.md "Memory"
        export_cost=0.6,  # median export seconds over the compare_time zoo (benchmarks/README.md)
        needs_target=False, export_modules=("openvino",),
    )
    presentation = Presentation(summary="OpenVINO CPU over the ONNX file (either ONNX route), inputs named by leaf",
                                color="#17becf", order=60)

    def check_precision(self, precision: str) -> None:
        """As every backend's, and int8 is unsupported-precision where nncf (the extra openvino-int8) is absent."""
        super().check_precision(precision)

        missing = nncf_missing() if precision == "int8" else None
        if missing:
            raise ExportError(f"Backend '{self.name}' | has no int8 artifact: {missing}", backend=self.name,
                              category="unsupported-precision")

    def native_consumer(self):
        """ov_run on OpenVINO's C API (`native.OpenVINOConsumer`)."""

        return OpenVINOConsumer()

    def _export_impl(self, job: ExportJob[OpenVINOOptions]) -> FormatResult:
        ov = import_openvino()
        signature, options, out_dir, chosen = job.signature, job.options, job.out_dir, job.backend_options
        front = present(job.stage, "handed by the driver: openvino builds on onnx").manifest
        warnings = wide_leaves(self.name, front, chosen.allow_64bit)
        files, model, retried = self._place_and_probe(job)
        if retried is not None:
            front, note = retried
            warnings.append(note)
        precision = None
        if options.precision == "fp16":
            files, model, precision = _compress(ov, model, out_dir, files)
        elif options.precision == "int8":
            files, model, precision = quantize(ov, model, out_dir, files, front, options, signature, self.name)
        taken = [leaf for leaf in front.inputs if leaf.param is not None]
        names = {leaf.param: leaf.name for leaf in (*taken, *front.outputs)}
        size = files_bytes(out_dir, files)
        cache = (_measure_cache(out_dir / files["model"]) if chosen.measure_cache and
                 size <= CACHE_MEASURE_LIMIT_BYTES else None)
        cpu = _cpu_facts(ov.Core())
        ports: Any = [leaf.param for leaf in front.inputs]  # the stage's input names (None: not taken)
        outputs: Any = [leaf.param for leaf in front.outputs]
        return FormatResult(
            files=files, used=[leaf.used for leaf in front.inputs], params=ports, output_params=outputs,
            versions=versions_of(ov.get_version(), cpu, front), requires=requires_of(front),
            format=facts_of(front, chosen, model, names, cache, cpu, compile_probe(size)[1]),
            warnings=[*warnings, *stage_warnings(front, signature)], weights=dict(front.weights),
            declared=declared_of(model, names), platforms=["cpu"],
            native=openvino_section(front.inputs, ports, front.outputs, outputs, model=files["model"],
                                    properties=OPENVINO_PROPERTIES),
            precision=precision,
        )

    def stage_options(self, chosen: OpenVINOOptions) -> dict[str, Any]:
        """The ONNX stage's route: the one asked for (openvino.onnx_route), or the stage's default for auto."""
        return {} if chosen.onnx_route == "auto" else {"route": chosen.onnx_route}

    def _place_and_probe(self, job: ExportJob[OpenVINOOptions]) -> tuple[dict[str, str], Any, Any]:
        """Place the stage's files and compile and run them once. When OpenVINO cannot take jax2onnx's file and
        the route is auto, the stage is exported again through the StableHLO route and that file is placed.
        Returns (files, the read model, the retried stage with a note, or None)."""
        frontend, out_dir, signature = present(job.stage, "the ONNX stage"), job.out_dir, job.signature
        try:
            return (*self._place(frontend, out_dir, signature), None)
        except Exception as exc:
            route = frontend.manifest.format.get("route")
            if job.backend_options.onnx_route != "auto" or route != "jax2onnx":
                raise self._probe_error(exc, out_dir / frontend.manifest.files["model"]) from exc
            first = self._probe_error(exc, out_dir / frontend.manifest.files["model"])

        for name in ("model.onnx", "model.onnx.data"):
            (out_dir / name).unlink(missing_ok=True)
        with export_stage(self, job.fn, signature, job.options, out_dir.parent, {"route": "stablehlo"}) as second:
            second = present(second, "OpenVINO builds on the ONNX stage: there is always one")
            try:
                files, model = self._place(second, out_dir, signature)
            except Exception as exc:
                raise ExportError(f"{first} (the StableHLO route's file failed too: "
                                  f"{self._probe_error(exc, out_dir / second.manifest.files['model'])})",
                                  backend=self.name, category=first.category) from exc
            note = (f"ONNX route stablehlo: OpenVINO could not take the jax2onnx file: "
                    f"{str(first).replace(f'Backend {self.name!r} | ', '')}")
            return files, model, (second.manifest, note)

    def _place(self, stage, out_dir: Path, signature):
        ov = import_openvino()
        front = stage.manifest
        files = {"model": front.files["model"]}
        if "external_data" in front.files:
            files["external_data"] = front.files["external_data"]
        for name in files.values():
            place_stage_file(stage.directory / name, out_dir / name)
        unsigned = unsigned_node(out_dir / files["model"])
        if unsigned:
            raise ExportError(f"Backend '{self.name}' | node {unsigned} computes in unsigned 32/64-bit integers, which "
                              "OpenVINO's CPU plugin computes in signed 32 bits without an error (measured: uint32 "
                              "1 + 4000000000 gives -2147483648; jax.random's threefry on the StableHLO route's graph "
                              "came out wrong by up to 5.6)", backend=self.name, category="unsupported-dtype")
        core = ov.Core()
        model = core.read_model(str(out_dir / files["model"]))  # the frontend's conversion: fails here if it cannot
        if not compile_probe(files_bytes(out_dir, files))[0]:
            return files, model  # probe.py: past its limit the compile is the runner's
        compiled_model = core.compile_model(model, "CPU", config(1))
        feed = _probe_feed(front, signature)
        if feed is not None:  # a file that compiles can still fail on every call
            compiled_model.create_infer_request().infer(feed)
        return files, model

    def _probe_error(self, exc: BaseException, model_path: Path) -> ExportError:
        if isinstance(exc, ExportError):
            return exc
        known = classify_text(str(exc), model_path)
        if known:
            return ExportError(f"Backend '{self.name}' | {known[1]}", backend=self.name, category=known[0])
        return ExportError(f"Backend '{self.name}' | OpenVINO cannot compile and run the ONNX file once: "
                           f"{' '.join(str(exc).split())[:800]}", backend=self.name, category="invalid-model")

    def classify(self, exc: BaseException, stage: str) -> tuple[str, str] | None:
        return classify_text(str(exc))

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        ov = import_openvino()

        if options.device != "cpu":
            raise RunError(f"Device '{options.device}' | multiexport runs OpenVINO on its CPU plugin (its GPU plugin is "
                           "for Intel GPUs)", category="no-gpu")
        model_path = manifest.path(directory, "model")
        if "external_data" in manifest.files:
            manifest.path(directory, "external_data")  # inside the artifact, like every listed file
        cache_dir = str(manifest.options.get("cache_dir") or "")
        ignored_cache = None
        if cache_dir and not options.trust_artifact:
            # The manifest names a directory OpenVINO would write its blobs into: from someone else's artifact,
            # that is a write anywhere they chose. Only an artifact trusted like the caller's own code gets it.
            ignored_cache, cache_dir = cache_dir, ""
        try:
            core, model, cm, seconds = compiled(model_path, options.thread_count, cache_dir)
        except RuntimeError as exc:
            known = classify_text(str(exc), model_path)
            if known:
                raise RunError(f"Artifact '{directory}' | {known[1]}", backend=self.name, category=known[0]) from exc
            raise ArtifactError(f"Artifact '{directory}' | OpenVINO cannot load {manifest.files['model']}: "
                                f"{' '.join(str(exc).split())[:800]}") from exc
        check_ports(model, manifest, directory)
        props = properties(cm)
        if props["inference_precision"] != "f32":
            raise RunError(f"Artifact '{directory}' | asked OpenVINO for INFERENCE_PRECISION_HINT=f32, the compiled model "
                           f"reports {props['inference_precision']}: its results would not be the function's float32",
                           backend=self.name, category="unsupported-dtype")
        facts = {"openvino": ov.get_version(), **props, "inference_num_threads_requested": options.thread_count,
                 "compile_s": round(seconds, 4), "cache_dir": cache_dir or None,
                 **({"cache_dir_ignored": f"{ignored_cache} (the manifest's cache_dir is used only with "
                                          "--trust-artifact: a directory an artifact names is written into)"}
                    if ignored_cache else {}),
                 "device_name": _cpu_facts(core)["name"],
                 "telemetry": telemetry_state()}
        return OpenVINORunner(manifest, directory, options, core, cm, facts)

    def _intermediates_impl(self, request: IntermediatesRequest) -> Intermediates:
        """The shipped model with every mapped tensor as an output, run on the CPU (intermediates.py)."""
        return openvino_intermediates(request)


def unsigned_node(model_path: Path) -> str | None:
    """`'name' (Op)` of the first node (subgraphs included) that writes a uint32/uint64 tensor, else None."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(model_path), load_external_data=False))
    wide = (onnx.TensorProto.UINT32, onnx.TensorProto.UINT64)

    def walk(graph) -> str | None:
        typed = {v.name for v in (*graph.input, *graph.value_info, *graph.output)
                 if v.type.tensor_type.elem_type in wide}
        typed |= {t.name for t in graph.initializer if t.data_type in wide}
        for node in graph.node:
            if any(o in typed for o in node.output) or (node.op_type == "Cast" and any(
                    a.name == "to" and a.i in wide for a in node.attribute)):
                return f"'{node.name}' ({node.op_type})"
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    found = walk(a.g)
                    if found:
                        return found
        return None

    return walk(model.graph)


def _probe_feed(front: Manifest, signature) -> dict[str, Any] | None:
    """Port name -> the example value (zeros at the leaf's shape, symbolic dims at 2, when none fits); None
    when a leaf's dtype has no plain numpy form OpenVINO's dict path takes (bfloat16, float8)."""
    import numpy as np


    examples = signature.example_feed()
    feed: dict[str, Any] = {}
    for leaf in front.inputs:
        if leaf.param is None:
            continue
        shape = tuple(d if isinstance(d, int) else 2 for d in leaf.shape)
        example = examples.get(leaf.name)
        if leaf.dtype == "bfloat16" or leaf.dtype.startswith("float8"):
            return None
        fits = example is not None and tuple(np.shape(example)) == shape
        feed[str(leaf.param)] = np.asarray(example) if fits else np.zeros(shape, parse_dtype(leaf.dtype))
    return feed



def _cpu_facts(core) -> dict[str, Any]:
    def get(key):
        try:
            return core.get_property("CPU", key)
        except RuntimeError:
            return None

    return {"name": get("FULL_DEVICE_NAME"), "capabilities": list(get("OPTIMIZATION_CAPABILITIES") or []),
            "cpu_plugin": str(core.get_versions("CPU")["CPU"].build_number)}


def _measure_cache(model_path: Path) -> dict[str, Any]:
    """Seconds of read_model + compile_model without a cache, filling one, and from it warm (fresh Cores)."""
    threads = usable_cpus()
    with tempfile.TemporaryDirectory(prefix="multiexport-ov-cache-") as cache:
        _, _, _, none_s = compiled(model_path, threads)
        _, _, _, fill_s = compiled(model_path, threads, cache)
        _, _, cm, warm_s = compiled(model_path, threads, cache)
        warm = bool(cm.get_property("LOADED_FROM_CACHE"))
        blob = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file())
    return {"compile_s_no_cache": round(none_s, 4), "compile_s_filling_cache": round(fill_s, 4),
            "compile_s_warm_cache": round(warm_s, 4), "loaded_from_cache": warm, "cache_bytes": blob,
            "threads": threads,
            "how": "fresh ov.Core each, read_model + compile_model of model.onnx with the runner's config"}


BACKEND = OpenVINOBackend


def _compress(ov, model, out_dir: Path, files: dict[str, str]):
    """The fp16 artifact: OpenVINO's own IR written with its weights compressed to float16 (`ov.save_model`'s
    documented compression), in place of the ONNX file. Returns (files, the IR read back, PrecisionFacts)."""
    from collections import Counter


    model = write_ir(ov, model, out_dir, list(files.values()), compress_to_fp16=True)
    half: Counter[str] = Counter()
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Convert" and op.input_value(0).get_element_type() == ov.Type.f16:
            for target in op.output(0).get_target_inputs():
                if target.get_node().get_type_name() not in ("ShapeOf", "Reshape"):  # shape glue, not arithmetic
                    half[target.get_node().get_type_name()] += 1
    facts = PrecisionFacts(
        precision="fp16", method="ov.save_model(ov.Core().read_model('model.onnx'), 'model.xml', compress_to_fp16=True)",
        toolchain=f"openvino {ov.get_version()}", quantized_ops=dict(sorted(half.items())),
        io="float32 inputs and outputs, as the leaves declare",
        notes=["float16 weights in model.bin, decompressed to float32 when the CPU plugin compiles the model: the "
               "math stays f32 (INFERENCE_PRECISION_HINT=f32, as every OpenVINO artifact multiexport writes), so the "
               "gain is size, not speed, on a CPU"], weights_only=True)
    return {"model": "model.xml", "ir_weights": "model.bin"}, model, facts
