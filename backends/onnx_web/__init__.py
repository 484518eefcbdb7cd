"""onnx-web: the ONNX stage's model.onnx run by onnxruntime-web in headless Chromium (the browser as a runner).

Built on the ONNX backend's export (`builds_on`): the artifact ships that stage's model.onnx (and
model.onnx.data) unchanged, so ONNX Runtime on the CPU and ONNX Runtime Web in the page run the very same
bytes. The runner (runner.py) starts a loopback server with the page, the pinned runtime (web/, installed by
`npm ci`) and the model, opens it in the system's Chromium through Playwright, and moves tensors in and out by
the graph's names, which are the leaf names. Measured here with onnxruntime-web 1.31.1 on its wasm EP: int64
(as BigInt64Array), float64 (Add and MatMul at full precision), float16 and bool all run; a 32-bit wasm heap
caps the model, its copy and the activations at 4 GiB. WebGPU is the `execution_provider` option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiexport.sdk import (
    Availability,
    Backend,
    ExportError,
    FormatResult,
    Manifest,
    Option,
    RunError,
    RunOptions,
    Runner,
    check_session_inputs,
    check_stage_dtypes,
    place_stage_file,
)

from .browser import CHROMIUM_ENV, chromium_path
from .bundle import prove_bundle, write_bundle
from .facts import OnnxWebFacts
from .page import JS_TYPES, WEB_DIR, open_session, runtime_dist, runtime_version, webgpu_probe
from .runner import OnnxWebRunner, page_error

EXECUTION_PROVIDERS = {"wasm": "WebAssembly with SIMD and threads (threads need the page cross-origin isolated, "
                               "which the runner's server makes it)",
                       "webgpu": "WebGPU (navigator.gpu with an adapter: a GPU, or a software one)"}
WASM_MEMORY_LIMIT = 4 << 30  # wasm32's address space: the model's bytes are fetched, then copied into it
DTYPES = {"int64": "BigInt64Array (no conversion: the raw little-endian bytes)", "uint64": "BigUint64Array",
          "float16": "16-bit words (Uint16Array)", "bool": "Uint8Array of 0/1", "float64": "Float64Array",
          "float32": "Float32Array", "int32": "Int32Array", "uint32": "Uint32Array", "int16": "Int16Array",
          "uint16": "Uint16Array", "int8": "Int8Array", "uint8": "Uint8Array"}


class OnnxWebBackend(Backend):
    name = "onnx-web"
    summary = "ONNX Runtime Web (wasm, or WebGPU) over the ONNX file in headless Chromium, inputs named by leaf"
    requires = ("playwright",)
    extra = "web"
    distributions = ("playwright",)
    builds_on = "onnx"
    opt_in = True  # every load starts Chromium (5-8 s): out of `--backends all`, run when named
    color = "#8c564b"
    order = 65
    runtime_modules = ("playwright.sync_api",)
    facts_type = OnnxWebFacts
    options = (
        Option("execution_provider", "wasm", str, "onnxruntime-web's execution provider in the page: wasm (SIMD, "
               "threads) or webgpu (needs a WebGPU adapter in headless Chromium: refused at export when none)",
               choices=tuple(EXECUTION_PROVIDERS)),
    )

    def available(self) -> Availability:
        """Playwright, a Chromium and the npm-installed runtime, each named with what installs it."""

        status = super().available()
        if not status.ok:
            return status
        if chromium_path() is None:
            return Availability(False, f"no Chromium found (apt-get install chromium, or set ${CHROMIUM_ENV})")
        if runtime_dist() is None:
            return Availability(False, f"onnxruntime-web not installed (npm ci --prefix {WEB_DIR})")
        return Availability(True)

    def _export_impl(self, *call: Any) -> FormatResult:
        """Either contract's call: (fn, signature, out_dir, options, resolved, frontend), or one ExportJob
        (architecture 3's `multiexport.sdk`), whose backend options are the resolved mapping."""
        if len(call) == 1:
            job = call[0]
            return self._export_files(Path(job.out_dir), dict(job.backend_options), job.stage)
        _fn, _signature, out_dir, _options, resolved, frontend = call
        return self._export_files(Path(out_dir), resolved, frontend)

    def _export_files(self, out_dir: Path, resolved: dict[str, Any], frontend) -> FormatResult:
        """Place the ONNX stage's files in `out_dir`, check what the page can take, and say what was made."""

        front = frontend.manifest
        check_stage_dtypes(self.name, front, tuple(JS_TYPES), "onnxruntime-web")
        files = {"model": front.files["model"]}
        if "external_data" in front.files:
            files["external_data"] = front.files["external_data"]
        for name in files.values():
            place_stage_file(frontend.directory / name, out_dir / name)
        size = sum((out_dir / name).stat().st_size for name in files.values())
        if size >= WASM_MEMORY_LIMIT:
            raise ExportError(f"Backend '{self.name}' | the model's files are {size / 2**30:.2f} GiB, over wasm32's "
                              f"{WASM_MEMORY_LIMIT / 2**30:.0f} GiB address space that holds the model, its copy and "
                              "the activations in the page", backend=self.name, category="size-limit")
        warnings = []
        if size >= WASM_MEMORY_LIMIT // 4:
            warnings.append(f"the model's files are {size / 2**30:.2f} GiB: the page holds them twice (the fetched "
                            "bytes and the session's copy) in a 4 GiB wasm heap; a larger model fails with a size-limit row")
        ep = resolved["execution_provider"]
        probe = _probe_webgpu()  # recorded either way: the report says whether a WebGPU row was possible here
        if ep == "webgpu":
            if not probe["ok"]:
                raise ExportError(f"Backend '{self.name}' | no WebGPU in headless Chromium here: {probe['reason']}",
                                  backend=self.name, category="no-gpu")
            if "swiftshader" in probe["reason"].lower():
                warnings.append(f"WebGPU {probe['reason']}: SwiftShader is a software adapter on the CPU, so these "
                                "figures are not a GPU's")
        dist = runtime_dist()
        version = runtime_version(dist) if dist else None
        graph_in = [str(leaf.param) for leaf in front.inputs if leaf.param is not None]
        return FormatResult(
            files=files, used=[leaf.used for leaf in front.inputs], params=[leaf.param for leaf in front.inputs],
            output_params=[leaf.param for leaf in front.outputs],
            versions={"onnxruntime_web": version or "", **{k: v for k, v in front.versions.items()
                                                           if k in ("jax2onnx", "onnx", "onnx_opset", "onnx_ir_version")}},
            requires={"onnx_opset": front.requires.get("onnx_opset"), "onnx_ir_version": front.requires.get("onnx_ir_version"),
                      "onnxruntime_web_checked": version,
                      "note": f"onnxruntime-web with opset {front.requires.get('onnx_opset')} (checked with "
                              f"{version}) in a browser with WebAssembly SIMD; threads need cross-origin isolation "
                              "(COOP same-origin, COEP require-corp)"},
            format=OnnxWebFacts(
                model_source=f"the ONNX stage's model.onnx as written by route {front.format.get('route')}, unchanged",
                onnx_route=front.format.get("route"), onnx_opset=front.format.get("opset"),
                runtime=f"onnxruntime-web {version}", execution_providers=dict(EXECUTION_PROVIDERS),
                graph_inputs=graph_in, graph_outputs=[str(leaf.param) for leaf in front.outputs],
                model_bytes=size, wasm_memory_limit_bytes=WASM_MEMORY_LIMIT,
                dtypes={leaf.name: DTYPES[leaf.dtype] for leaf in (*front.inputs, *front.outputs)
                        if leaf.dtype in DTYPES}, webgpu=probe),
            warnings=warnings, weights=dict(front.weights), platforms=["cpu"],
        )

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        if options.device != "cpu":
            raise RunError(f"Device '{options.device}' | onnx-web runs in headless Chromium on this machine (WebGPU is "
                           "its execution_provider option)", backend=self.name, category="no-gpu")
        files = {manifest.files[role]: manifest.path(directory, role) for role in ("model", "external_data")
                 if role in manifest.files}
        ep = str(manifest.options.get("execution_provider") or "wasm")
        try:
            session = open_session(files, manifest.files["model"], options.thread_count, ep)
        except FileNotFoundError as exc:
            raise RunError(f"Artifact '{directory}' | {exc}", backend=self.name, category="unavailable") from exc
        except Exception as exc:
            raise page_error(exc, directory, "creating the session") from exc
        check_session_inputs(session, session.info.get("inputNames", []), manifest, directory, "the page's session")
        dist = runtime_dist()
        facts: dict[str, Any] = {"runtime_version": runtime_version(dist) if dist else None,
                                 "browser": session.browser.version, "chromium": session.browser.executable,
                                 "session_create_ms": session.info.get("createMs"),
                                 "hardware_concurrency": session.info.get("hardwareConcurrency")}
        return OnnxWebRunner(manifest, directory, options, session, facts)

    def static_bundle(self, directory: Path, manifest: Manifest, root: Path, timeout: float) -> dict[str, Any]:
        """`multiexport native DIR --bundle OUT`: the page, the pinned runtime files and the example inputs beside
        the artifact (root/model/, copied by the core), proven by opening it in headless Chromium; returns what
        bundle.json records (bundle.py)."""
        record = write_bundle(directory, manifest, root)
        proof = prove_bundle(root, manifest, timeout)
        how = ("host it with any static server and open index.html (its serve.py sends the COOP/COEP headers wasm "
               "threads need; without them the page runs on one thread)")
        return {**record, "proof": proof, "how": how}


_PROBED: list[dict[str, Any]] = []  # the probe's answer in this process: the browser and machine do not change


def _probe_webgpu() -> dict[str, Any]:
    """Whether headless Chromium here offers a WebGPU adapter ({"ok", "reason"}), probed once per process (a
    launch costs seconds, and an export worker exports many cases); a probe that cannot launch the browser is an
    answer too (its reason), not a failed export: the wasm row does not need WebGPU."""
    if not _PROBED:
        try:
            _PROBED.append(webgpu_probe())
        except Exception as exc:  # noqa: BLE001  (one line in the facts; the load check that follows says the rest)
            return {"ok": False, "reason": f"the WebGPU probe could not run: {' '.join(str(exc).split())[:300]}"}
    return dict(_PROBED[0])


BACKEND = OnnxWebBackend
