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
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from multiexport.errors import ArtifactError, ExportError, RunError, leaf_message
from multiexport.export import Backend, FormatResult, Manifest, Option, RunOptions, Runner
from multiexport.export.options import usable_cpus
from multiexport.versions import dist_version

from .runner import (
    PERFORMANCE_HINT,
    OpenVINORunner,
    check_ports,
    classify_text,
    compiled,
    config,
    dtype_name,
    import_openvino,
    properties,
    telemetry_state,
)

WIDE = ("int64", "uint64", "float64", "complex128")
CACHE_MEASURE_LIMIT_BYTES = 256 << 20  # past this the cache measurement (three compiles) is skipped


class OpenVINOBackend(Backend):
    name = "openvino"
    summary = "OpenVINO CPU over the ONNX file (jax2onnx), inputs named by leaf"
    requires = ("openvino",)  # the ONNX stage checks its own (onnx, jax2onnx)
    extra = "openvino"
    builds_on = "onnx"
    color = "#17becf"
    order = 60
    runtime_modules = ("openvino",)
    options = (
        Option("cache_dir", "", str, "OpenVINO's compiled-model cache directory (CACHE_DIR) on the machine that loads "
               "the artifact; empty: no cache (every load compiles)"),
        Option("measure_cache", True, bool, "at export, time compile_model without a cache and with a warm one "
               "(recorded in format.compile_cache)"),
        Option("allow_64bit", False, bool, "export int64/float64 leaves anyway: OpenVINO's CPU plugin computes them "
               "in 32 bits, so values past int32 or float32 precision come out silently wrong"),
    )

    def _export_impl(self, fn, signature, out_dir: Path, options, resolved, frontend) -> FormatResult:
        ov = import_openvino()

        front = frontend.manifest
        taken = [leaf for leaf in front.inputs if leaf.param is not None]
        wide = [(kind, leaf) for kind, leaves in (("Input", taken), ("Output", front.outputs)) for leaf in leaves
                if leaf.dtype in WIDE]
        warnings = []
        if wide and not resolved["allow_64bit"]:
            kind, leaf = wide[0]
            raise ExportError(f"Backend '{self.name}' | " + leaf_message(
                kind, leaf.name, leaf.dtype, "at most 32-bit element types") + ": OpenVINO's CPU plugin computes "
                "int64 in int32 and float64 in float32 without an error (measured: (2^40+3)*2 gives 6, (1+1e-12)*2 "
                "gives 2.0); set openvino.allow_64bit to export anyway", backend=self.name, category="unsupported-dtype")
        if wide:
            warnings.append(f"64-bit leaves ({', '.join(leaf.name for _, leaf in wide)}): OpenVINO's CPU plugin computes "
                            "them in 32 bits, so values past int32 / float32 precision are silently wrong")
        files = {"model": front.files["model"]}
        if "external_data" in front.files:
            files["external_data"] = front.files["external_data"]
        for name in files.values():
            _place(frontend.directory / name, out_dir / name)
        core = ov.Core()
        model = core.read_model(str(out_dir / files["model"]))  # the frontend's conversion: fails here if it cannot
        names = {leaf.param: leaf.name for leaf in (*taken, *front.outputs)}
        declared = {}
        for port in (*model.inputs, *model.outputs):
            for n in port.get_names():
                if n in names:
                    declared[names[n]] = dtype_name(port.get_element_type())
        cache = (_measure_cache(out_dir / files["model"]) if resolved["measure_cache"] and
                 sum((out_dir / f).stat().st_size for f in files.values()) <= CACHE_MEASURE_LIMIT_BYTES else None)
        version = ov.get_version()
        # the ONNX stage's own notes, less the signature's (the core adds those) and ONNX Runtime's
        own = [w for w in front.warnings if w not in signature.warnings and "ONNX Runtime" not in w]
        cpu = _cpu_facts(core)
        return FormatResult(
            files=files, used=[leaf.used for leaf in front.inputs], params=[leaf.param for leaf in front.inputs],
            output_params=[leaf.param for leaf in front.outputs],
            versions={"openvino": version, "openvino_cpu_plugin": cpu["cpu_plugin"],
                      **{k: v for k, v in front.versions.items() if k in ("jax2onnx", "onnx", "onnx_opset",
                                                                         "onnx_ir_version")}},
            requires={"onnx_opset": front.requires.get("onnx_opset"), "onnx_ir_version": front.requires.get("onnx_ir_version"),
                      "openvino_checked": dist_version("openvino"),
                      "note": f"OpenVINO with an ONNX frontend for opset {front.requires.get('onnx_opset')} "
                              f"(checked with OpenVINO {dist_version('openvino')}), on its CPU plugin"},
            format={
                "model_source": "the ONNX stage's model.onnx as written by jax2onnx, unchanged (read by OpenVINO's "
                                "ONNX frontend at load)",
                "why_not_ir": "measured: read_model of the ONNX as fast as of the IR, IR larger, outputs bit-identical; "
                              "ov.save_model compresses weights to float16 by default",
                "ir_command": "ov.save_model(ov.Core().read_model('model.onnx'), 'model.xml', compress_to_fp16=False)",
                "device": "CPU",
                "compile_config": {**config(0), "INFERENCE_NUM_THREADS": "the runner's threads (read back in describe)",
                                   "CACHE_DIR": resolved["cache_dir"] or None},
                "precision": "INFERENCE_PRECISION_HINT=f32, read back after compile_model; another precision is refused",
                "performance_hint": f"{PERFORMANCE_HINT}: multiexport times one synchronous request (THROUGHPUT adds "
                                    "streams that only pay with concurrent requests)",
                "input_shapes": {names.get(n, n): str(p.get_partial_shape()) for p in model.inputs for n in
                                 sorted(p.get_names())[:1]},
                "compile_cache": cache,
                "cpu": cpu,
                "onnx_opset": front.format.get("opset"),
            },
            warnings=[*warnings, *own], weights=dict(front.weights), declared=declared, platforms=["cpu"],
        )

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
        try:
            core, model, cm, seconds = compiled(model_path, options.thread_count, cache_dir)
        except RuntimeError as exc:
            known = classify_text(str(exc))
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
                 "device_name": _cpu_facts(core)["name"],
                 "telemetry": telemetry_state()}
        return OpenVINORunner(manifest, directory, options, core, cm, facts)


def _place(source: Path, target: Path) -> None:
    """The stage's file at `target`: a hard link where the filesystem allows (no copy of large weights)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


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
