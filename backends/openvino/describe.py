"""OpenVINO's options, and what its export reports once the model is placed: versions, requirements, the leaves'
declared dtypes, the stage's notes kept, and the format facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from multiexport.sdk import ExportError, Manifest, Signature, dist_version, leaf_message, option

from .facts import OpenVINOFacts
from .runner import PERFORMANCE_HINT, config, dtype_name

WIDE = ("int64", "uint64", "float64", "complex128")
ONNX_ROUTES = ("auto", "jax2onnx", "stablehlo")  # the ONNX backend's `route` values


@dataclass(frozen=True)
class OpenVINOOptions:
    """OpenVINO's options (`--backend-option openvino.NAME=VALUE`).

    cache_dir: the compiled-model cache directory trusted loads use; empty: none.
    measure_cache: time compile_model without and with a warm cache at export.
    onnx_route: which ONNX route writes the file OpenVINO reads.
    allow_64bit: export int64/float64 leaves anyway (computed in 32 bits).
    """

    cache_dir: str = option("", "OpenVINO's compiled-model cache directory (CACHE_DIR) on the machine that loads "
                            "the artifact, used by loads that trust it (--trust-artifact; an untrusted load ignores it "
                            "and says so); empty: no cache (every load compiles)")
    measure_cache: bool = option(True, "at export, time compile_model without a cache and with a warm one "
                                 "(recorded in format.compile_cache)")
    onnx_route: str = option("auto", "which route writes the ONNX file OpenVINO reads: the ONNX stage's "
                             "(jax2onnx, or multiexport's StableHLO converter when jax2onnx fails), jax2onnx or "
                             "stablehlo only; auto also retries with stablehlo when OpenVINO cannot read, compile or "
                             "run jax2onnx's file", choices=ONNX_ROUTES)
    allow_64bit: bool = option(False, "export int64/float64 leaves anyway: OpenVINO's CPU plugin computes them in 32 "
                               "bits, so values past int32 or float32 precision come out silently wrong")


def wide_leaves(backend: str, front: Manifest, allowed: bool) -> list[str]:
    """Warnings for the stage's 64-bit leaves when `allowed` (openvino.allow_64bit); else the first one refused."""
    taken = [leaf for leaf in front.inputs if leaf.param is not None]
    wide = [(kind, leaf) for kind, leaves in (("Input", taken), ("Output", front.outputs)) for leaf in leaves
            if leaf.dtype in WIDE]
    if wide and not allowed:
        kind, leaf = wide[0]
        raise ExportError(f"Backend '{backend}' | " + leaf_message(
            kind, leaf.name, leaf.dtype, "at most 32-bit element types") + ": OpenVINO's CPU plugin computes "
            "int64 in int32 and float64 in float32 without an error (measured: (2^40+3)*2 gives 6, (1+1e-12)*2 "
            "gives 2.0); set openvino.allow_64bit to export anyway", backend=backend, category="unsupported-dtype")
    if wide:
        return [f"64-bit leaves ({', '.join(leaf.name for _, leaf in wide)}): OpenVINO's CPU plugin computes "
                "them in 32 bits, so values past int32 / float32 precision are silently wrong"]
    return []


def declared_of(model: Any, names: dict[Any, str]) -> dict[str, str]:
    """Leaf name -> the element type the read model's port declares (ports named by the leaves' params)."""
    declared = {}
    for port in (*model.inputs, *model.outputs):
        for n in port.get_names():
            if n in names:
                declared[names[n]] = dtype_name(port.get_element_type())
    return declared


def stage_warnings(front: Manifest, signature: Signature) -> list[str]:
    """The ONNX stage's own notes, less the signature's (the core adds those) and ONNX Runtime's; which route
    made the file, and why, stays."""
    return [w for w in front.warnings if w not in signature.warnings and
            ("ONNX Runtime" not in w or w.startswith("route "))]


def versions_of(version: str, cpu: dict[str, Any], front: Manifest) -> dict[str, str]:
    """OpenVINO's and its CPU plugin's versions, with the ONNX stage's converter versions."""
    return {"openvino": version, "openvino_cpu_plugin": cpu["cpu_plugin"],
            **{k: v for k, v in front.versions.items() if k in ("jax2onnx", "onnx", "onnx_opset", "onnx_ir_version")}}


def requires_of(front: Manifest) -> dict[str, Any]:
    """What an OpenVINO consumer needs: an ONNX frontend for the stage's opset."""
    return {"onnx_opset": front.requires.get("onnx_opset"), "onnx_ir_version": front.requires.get("onnx_ir_version"),
            "openvino_checked": dist_version("openvino"),
            "note": f"OpenVINO with an ONNX frontend for opset {front.requires.get('onnx_opset')} "
                    f"(checked with OpenVINO {dist_version('openvino')}), on its CPU plugin"}


def facts_of(front: Manifest, chosen: OpenVINOOptions, model: Any, names: dict[Any, str],
             cache: dict[str, Any] | None, cpu: dict[str, Any], export_check: str) -> OpenVINOFacts:
    """The format facts: where the model came from, how it is compiled, its input shapes and the CPU."""
    return OpenVINOFacts(
        model_source=f"the ONNX stage's model.onnx as written by route {front.format.get('route')}, "
                     "unchanged (read by OpenVINO's ONNX frontend at load)",
        onnx_route=cast(str | None, front.format.get("route")), onnx_route_requested=chosen.onnx_route,
        why_not_ir="measured: read_model of the ONNX as fast as of the IR, IR larger, outputs bit-identical; "
                   "ov.save_model compresses weights to float16 by default",
        ir_command="ov.save_model(ov.Core().read_model('model.onnx'), 'model.xml', compress_to_fp16=False)",
        device="CPU",
        compile_config={**config(0), "INFERENCE_NUM_THREADS": "the runner's threads (read back in describe)",
                        "CACHE_DIR": chosen.cache_dir or None},
        precision="INFERENCE_PRECISION_HINT=f32, read back after compile_model; another precision is refused",
        performance_hint=f"{PERFORMANCE_HINT}: multiexport times one synchronous request (THROUGHPUT adds "
                         "streams that only pay with concurrent requests)",
        input_shapes={names.get(n, n): str(p.get_partial_shape()) for p in model.inputs for n in
                      sorted(p.get_names())[:1]},
        compile_cache=cache,
        cpu=cpu,
        onnx_opset=cast(int | None, front.format.get("opset")),
        export_check=export_check,
    )
