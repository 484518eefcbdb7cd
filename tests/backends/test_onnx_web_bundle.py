"""The browser bundle (`multiexport native DIR --bundle OUT` on an onnx-web artifact): a static folder copied
elsewhere and served by a plain stdlib http.server runs in headless Chromium, every output leaf matching jax.jit;
with the COOP/COEP headers on wasm threads, without them on one thread (the documented fallback); a tampered
artifact is refused with nothing written. Real Chromium and the npm-installed runtime; skipped without them."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import shutil
import threading

import numpy as np
import pytest

from multiexport import examples
from multiexport.backends.onnx_web import OnnxWebBackend
from multiexport.backends.onnx_web.browser import launch
from multiexport.backends.onnx_web.page import from_js
from multiexport.backends.onnx_web.server import ISOLATION_HEADERS
from multiexport.errors import ArtifactError
from multiexport.native.bundle import bundle

from ..conftest import assert_matches_jit, run_cli
from .test_onnx_web import export, needs_browser


class Isolated(http.server.SimpleHTTPRequestHandler):
    """A plain static server plus the two headers cross-origin isolation needs (what a deployer's host sets)."""

    def end_headers(self):
        for key, value in ISOLATION_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, *args):
        pass


class Plain(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def open_copy(folder, handler) -> dict:
    """Serve `folder` with `handler` on loopback, open index.html in headless Chromium, return window.mxBundle."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    browser = launch()
    try:
        browser.page.set_default_timeout(120_000)
        browser.page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        browser.page.wait_for_function("() => window.mxBundle && window.mxBundle.done")
        return browser.page.evaluate("() => window.mxBundle")
    finally:
        browser.close()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def transformer_bundle(tmp_path_factory):
    """The transformer's onnx-web artifact, bundled by the CLI, then copied elsewhere (the artifact removed)."""
    root = tmp_path_factory.mktemp("bundle")
    target = examples.transformer()
    sig, artifact = export(target, root / "artifact")
    proc = run_cli("native", artifact.directory, "--bundle", root / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "host it with any static server and open index.html" in proc.stdout
    copy = root / "elsewhere" / "site"
    shutil.copytree(root / "out", copy)
    shutil.rmtree(root / "out")
    shutil.rmtree(artifact.directory)  # the copy needs nothing of the artifact or the repository
    return target, sig, copy


def outputs_of(result) -> dict[str, np.ndarray]:
    return {o["leaf"]: from_js(o["type"], o["dims"], base64.b64decode(o["b64"])) for o in result["outputs"]}


@needs_browser
def test_a_copied_bundle_served_with_the_headers_runs_with_threads_and_matches_jax_jit(transformer_bundle):
    target, sig, copy = transformer_bundle
    record = json.loads((copy / "bundle.json").read_text())
    assert record["kind"] == "static" and record["proof"]["cross_origin_isolated"] is True
    assert sorted(p.name for p in (copy / "ort").iterdir()) == sorted(
        ["ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"])
    result = open_copy(copy, Isolated)
    assert result["error"] is None, result["error"]
    assert result["info"]["crossOriginIsolated"] is True and result["info"]["threads"] > 1 or \
        result["info"]["hardwareConcurrency"] == 1
    assert_matches_jit(target, sig, outputs_of(result), sig.example_feed(), "onnx-web bundle")


@needs_browser
def test_without_the_headers_the_bundle_falls_back_to_one_thread_with_the_same_numbers(transformer_bundle):
    target, sig, copy = transformer_bundle
    result = open_copy(copy, Plain)
    assert result["error"] is None, result["error"]
    assert result["info"]["crossOriginIsolated"] is False and result["info"]["threads"] == 1
    assert_matches_jit(target, sig, outputs_of(result), sig.example_feed(), "onnx-web bundle, one thread")


@needs_browser
def test_a_tampered_artifact_is_refused_and_nothing_is_written(tmp_path):
    _, artifact = export(examples.seed(), tmp_path / "a")
    model = artifact.directory / "model.onnx"
    model.write_bytes(model.read_bytes().replace(b"foo.baz", b"foo.bay"))  # same size, other bytes
    with pytest.raises(ArtifactError, match="Artifact file 'model.onnx' | differs from the manifest's inventory"):
        bundle(artifact.directory, tmp_path / "out")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["a"]


def test_the_webgpu_bundle_takes_the_webgpu_runtime_files():
    from multiexport.backends.onnx_web.bundle import RUNTIME_FILES

    assert OnnxWebBackend.static_bundle  # the core's bundler finds the hook by this name
    assert RUNTIME_FILES["webgpu"][0] == "ort.webgpu.min.mjs" and RUNTIME_FILES["wasm"][0] == "ort.wasm.min.mjs"
