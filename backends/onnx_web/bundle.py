"""The browser bundle: one static folder (`multiexport native DIR --bundle OUT` on an onnx-web artifact) that any
static server hosts, with nothing fetched from elsewhere.

    OUT/index.html           opens the model, runs the artifact's example inputs, shows every output by leaf name
    OUT/bundle.mjs, page.mjs the page code: page.mjs is the runner's own (window.mx: init, feed, fetch, timed)
    OUT/ort/                 the pinned onnxruntime-web files the artifact's execution provider loads, and no more
    OUT/model/               the artifact as exported (manifest.json, model.onnx, its external data), sha256-checked
    OUT/example_inputs.json  the artifact's example inputs, by graph input name (the leaf names), as raw bytes
    OUT/_headers, serve.py   the cross-origin isolation headers wasm threads need: as a static host's header file,
                             and as a stdlib server (`python3 serve.py`); without them the page runs on one thread

Proof, before OUT appears: the staged folder is served (from its own files only) and opened in headless Chromium,
and the page must run the example inputs to every output leaf the manifest names, with its dtype.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from multiexport.sdk import ArtifactError, Manifest

from .browser import launch
from .page import JS_TYPES, WEB_DIR, runtime_dist, runtime_version
from .server import ISOLATION_HEADERS, PageServer

# What each execution provider's entry module loads (measured: the files the runner's server was asked for).
RUNTIME_FILES = {"wasm": ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"),
                 "webgpu": ("ort.webgpu.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs",
                            "ort-wasm-simd-threaded.asyncify.wasm")}
PAGE_FILES = ("page.mjs", "bundle.mjs")
SERVE_PY = '''#!/usr/bin/env python3
"""Serve this folder on http://127.0.0.1:PORT/ with the headers onnxruntime-web's wasm threads need
(cross-origin isolation). Usage: python3 serve.py [PORT]   (default 8000; stdlib only)"""
import functools
import http.server
import os
import sys

HEADERS = %(headers)r


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".mjs": "text/javascript", ".wasm": "application/wasm"}

    def end_headers(self):
        for key, value in HEADERS.items():
            self.send_header(key, value)
        super().end_headers()


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    here = os.path.dirname(os.path.abspath(__file__))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=here))
    print(f"serving {here} on http://127.0.0.1:{port}/index.html")
    server.serve_forever()
'''
PROOF_TIMEOUT_MS = 300_000


def write_bundle(directory: Path, manifest: Manifest, root: Path) -> dict[str, Any]:
    """Write the page, the runtime files and the example inputs into `root`, whose model/ already holds the
    artifact (the core copies and checks it). Returns what bundle.json records about the browser side."""
    dist = runtime_dist()
    if dist is None:
        raise ArtifactError(f"Artifact '{directory}' | onnxruntime-web is not installed here, expected it to copy "
                            f"into the bundle (npm ci --prefix {WEB_DIR})")
    ep = str(manifest.options.get("execution_provider") or "wasm")
    if ep not in RUNTIME_FILES:
        raise ArtifactError(f"Artifact '{directory}' | execution provider {ep!r}, expected one of "
                            f"{', '.join(RUNTIME_FILES)}")
    (root / "ort").mkdir()
    for name in RUNTIME_FILES[ep]:
        shutil.copyfile(dist / name, root / "ort" / name)
    for name in PAGE_FILES:
        shutil.copyfile(WEB_DIR / name, root / name)
    (root / "index.html").write_text((WEB_DIR / "index.html").read_text().replace("__EP__", ep))
    (root / "example_inputs.json").write_text(json.dumps({"inputs": _example_inputs(directory, manifest)}))
    (root / "_headers").write_text("/*\n" + "".join(f"  {k}: {v}\n" for k, v in ISOLATION_HEADERS.items()))
    (root / "serve.py").write_text(SERVE_PY % {"headers": ISOLATION_HEADERS})
    (root / "serve.py").chmod(0o755)
    return {"runtime": f"onnxruntime-web {runtime_version(dist)}", "execution_provider": ep, "open": "index.html",
            "headers": dict(ISOLATION_HEADERS),
            "serve": ("any static server; for wasm threads it must send the headers in _headers (COOP same-origin, "
                      "COEP require-corp), as `python3 serve.py` does; without them the page is not cross-origin "
                      "isolated and onnxruntime-web runs on one thread"),
            "mime": {".mjs": "text/javascript", ".wasm": "application/wasm"}}


def _example_inputs(directory: Path, manifest: Manifest) -> list[dict[str, Any]]:
    """The example inputs the graph takes (leaves with a parameter), keyed by graph input name, as page.mjs's
    feed reads them: type, dims and the raw little-endian bytes in base64."""
    if "example_inputs" not in manifest.files:
        raise ArtifactError(f"Artifact '{directory}' | has no example_inputs.npz, expected the export's example "
                            "inputs for the bundle's self-check")
    with np.load(manifest.path(directory, "example_inputs"), allow_pickle=False) as data:
        feeds = []
        for leaf in manifest.inputs:
            if leaf.param is None:
                continue
            a = np.ascontiguousarray(data[leaf.name])
            feeds.append({"name": str(leaf.param), "type": JS_TYPES[a.dtype.name], "dims": list(a.shape),
                          "b64": base64.b64encode(a.astype(a.dtype.newbyteorder("<")).tobytes()).decode()})
    return feeds


def prove_bundle(root: Path, manifest: Manifest, timeout: float) -> dict[str, Any]:
    """Serve `root`'s own files (nothing else) and open index.html in headless Chromium: the page must run the
    example inputs to every output leaf of the manifest, each of its dtype. Returns what the page reported."""
    files = {"/" + p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}
    with PageServer(files) as origin:
        browser = launch()
        try:
            page = browser.page
            page.set_default_timeout(min(PROOF_TIMEOUT_MS, timeout * 1000))
            page.goto(f"{origin}/index.html")
            page.wait_for_function("() => window.mxBundle && window.mxBundle.done")
            result = page.evaluate("() => window.mxBundle")
        finally:
            browser.close()
    if result.get("error"):
        raise ArtifactError(f"Bundle index.html | the page failed on the example inputs: {result['error'][:600]}")
    got = {o["leaf"]: o["type"] for o in result["outputs"]}
    want = {leaf.name: JS_TYPES.get(leaf.dtype, leaf.dtype) for leaf in manifest.outputs}
    if got != want:
        raise ArtifactError(f"Bundle index.html | the page returned {got}, expected the manifest's output leaves {want}")
    info = result["info"]
    return {"cross_origin_isolated": info.get("crossOriginIsolated"), "threads": info.get("threads"),
            "browser": info.get("userAgent"), "outputs": list(got)}
