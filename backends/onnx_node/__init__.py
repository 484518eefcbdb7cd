"""onnx-node: the ONNX stage's model.onnx run by onnxruntime-node in a Node.js process (a Node.js server's runtime).

Built on the ONNX backend's export (`builds_on`): the artifact ships that stage's model.onnx (and model.onnx.data)
unchanged, so ONNX Runtime from Python, from C, in a page and in Node run the very same bytes. The runner
(runner.py) starts `node runner.cjs` with onnxruntime-node from the project's npm lock (backends/onnx_web/web,
installed by `npm ci`: the package carries its CPU binding; its install-time download of CUDA providers is
skipped by that folder's .npmrc), creates a session on the file and moves tensors in and out by the graph's
names, which are the leaf names. Latency is timed inside Node (process.hrtime), what a Node.js server pays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiexport.sdk import (
    Availability,
    Backend,
    FormatResult,
    Manifest,
    RunError,
    RunOptions,
    Runner,
    check_session_inputs,
    check_stage_dtypes,
    place_stage_file,
)

from .facts import OnnxNodeFacts
from .process import (
    JS_TYPES,
    MODULES_ENV,
    NODE_ENV,
    NODE_MODULES,
    NodeError,
    modules_dir,
    node_path,
    open_session,
    runtime_version as _runtime_version,
)
from .runner import OnnxNodeRunner, node_error


class OnnxNodeBackend(Backend):
    name = "onnx-node"
    summary = "ONNX Runtime for Node.js (onnxruntime-node, CPU) over the ONNX file in a node process, inputs named by leaf"
    builds_on = "onnx"
    extra = "onnx"  # the Python side writes the ONNX stage; node and onnxruntime-node come from apt and npm
    distributions = ("onnx", "jax2onnx")
    opt_in = True  # needs node and the npm install: run when named (compare --deploy node names it)
    color = "#bcbd22"
    order = 66
    facts_type = OnnxNodeFacts

    def available(self) -> Availability:
        """node and the npm-installed onnxruntime-node, each named with what installs it."""
        if node_path() is None:
            return Availability(False, f"no node executable found (apt-get install nodejs, or set ${NODE_ENV})")
        if modules_dir() is None:
            return Availability(False, f"onnxruntime-node not installed (npm ci --prefix {NODE_MODULES.parent}, or "
                                       f"set ${MODULES_ENV})")
        return Availability(True)

    def _export_impl(self, *call: Any) -> FormatResult:
        """Either contract's call: (fn, signature, out_dir, options, resolved, frontend), or one ExportJob."""
        if len(call) == 1:
            job = call[0]
            return self._export_files(Path(job.out_dir), job.stage)
        _fn, _signature, out_dir, _options, _resolved, frontend = call
        return self._export_files(Path(out_dir), frontend)

    def _export_files(self, out_dir: Path, frontend) -> FormatResult:
        """Place the ONNX stage's files in `out_dir`, check the dtypes Node can take, and say what was made."""
        front = frontend.manifest
        check_stage_dtypes(self.name, front, tuple(JS_TYPES), "onnxruntime-node")
        files = {"model": front.files["model"]}
        if "external_data" in front.files:
            files["external_data"] = front.files["external_data"]
        for name in files.values():
            place_stage_file(frontend.directory / name, out_dir / name)
        modules = modules_dir()
        version = _runtime_version(modules) if modules else None
        node = node_path()
        return FormatResult(
            files=files, used=[leaf.used for leaf in front.inputs], params=[leaf.param for leaf in front.inputs],
            output_params=[leaf.param for leaf in front.outputs],
            versions={"onnxruntime_node": version or "", **{k: v for k, v in front.versions.items()
                                                            if k in ("jax2onnx", "onnx", "onnx_opset", "onnx_ir_version")}},
            requires={"onnx_opset": front.requires.get("onnx_opset"), "onnx_ir_version": front.requires.get("onnx_ir_version"),
                      "onnxruntime_node_checked": version,
                      "note": f"onnxruntime-node with opset {front.requires.get('onnx_opset')} (checked with {version}) "
                              "on Node.js with N-API 6"},
            format=OnnxNodeFacts(
                model_source=f"the ONNX stage's model.onnx as written by route {front.format.get('route')}, unchanged",
                onnx_route=front.format.get("route"), onnx_opset=front.format.get("opset"),
                runtime=f"onnxruntime-node {version}", node=_node_version(node),
                graph_inputs=[str(leaf.param) for leaf in front.inputs if leaf.param is not None],
                graph_outputs=[str(leaf.param) for leaf in front.outputs]),
            weights=dict(front.weights), platforms=["cpu"],
        )

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        if options.device != "cpu":
            raise RunError(f"Device '{options.device}' | onnx-node runs onnxruntime-node's CPU execution provider",
                           backend=self.name, category="no-gpu")
        try:
            session = open_session(manifest.path(directory, "model"), options.thread_count)
        except FileNotFoundError as exc:
            raise RunError(f"Artifact '{directory}' | {exc}", backend=self.name, category="unavailable") from exc
        except NodeError as exc:
            raise node_error(exc, directory, "creating the session") from exc
        check_session_inputs(session, session.info.get("inputNames", []), manifest, directory, "the node session")
        versions = session.info.get("versions") or {}
        facts = {"runtime_version": versions.get("node"), "node": session.info.get("node"),
                 "session_create_ms": session.info.get("createMs")}
        return OnnxNodeRunner(manifest, directory, options, session, facts)


def _node_version(node: str | None) -> str:
    """`node --version` (v20.20.2), or "" when it cannot say."""
    if node is None:
        return ""
    import subprocess

    try:
        return subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


BACKEND = OnnxNodeBackend
