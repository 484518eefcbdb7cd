"""The page as plain functions: serve an ONNX model and the pinned runtime, open it in headless Chromium,
move tensors in and out by name, and time session.run inside the page.

Nothing here knows the manifest or the Runner contract (runner.py does), so the same session serves the
runner, the WebGPU probe and a deployer's own checks. The runtime comes from `npm ci` in web/ (the
package-lock pins onnxruntime-web); nothing is fetched at run time: the server only has local files.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .browser import Browser, launch
from .server import PageServer

WEB_DIR = Path(__file__).resolve().parent / "web"
DIST_ENV = "MULTIEXPORT_ORT_WEB_DIST"  # an onnxruntime-web dist folder elsewhere (an image's own npm install)
PAGE_FILES = ("page.html", "page.mjs")
RUNTIME_SUFFIXES = (".mjs", ".js", ".wasm")
LOAD_TIMEOUT_MS = 300_000  # session creation of a large model in wasm takes its time; a hang still ends


def runtime_dist() -> Path | None:
    """onnxruntime-web's dist folder (from $MULTIEXPORT_ORT_WEB_DIST or web/node_modules); None: not installed."""
    given = os.environ.get(DIST_ENV)
    dist = Path(given) if given else WEB_DIR / "node_modules" / "onnxruntime-web" / "dist"
    return dist if (dist / "ort.wasm.min.mjs").is_file() else None


def runtime_version(dist: Path) -> str | None:
    """The installed onnxruntime-web's version, from its package.json beside dist/."""
    try:
        return str(json.loads((dist.parent / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def routes(model_files: Mapping[str, Path], dist: Path) -> dict[str, Path]:
    """URL path -> file: the page, the runtime's dist files, and the model's files under /model/."""
    table = {f"/{name}": WEB_DIR / name for name in PAGE_FILES}
    table.update({f"/ort/{p.name}": p for p in sorted(dist.iterdir()) if p.suffix in RUNTIME_SUFFIXES})
    table.update({f"/model/{name}": path for name, path in model_files.items()})
    return table


@dataclass
class PageSession:
    """An onnxruntime-web session in a headless Chromium page, with its server; `close` stops both.

    browser: the launched browser. server: the loopback server. origin: its http://127.0.0.1:<port>.
    info: what the page reported at init (input/output names, crossOriginIsolated, threads, versions).
    ep: the execution provider ("wasm" or "webgpu").
    """

    browser: Browser
    server: PageServer
    origin: str
    info: dict[str, Any]
    ep: str
    _next: int = field(default=0)

    def feed(self, tensors: Sequence[tuple[str, np.ndarray]]) -> int:
        """Move named arrays into the page as ort.Tensors; returns the feed's id (they stay until `drop`)."""
        self._next += 1
        payload = [{"name": name, "type": js_type(a), "dims": list(a.shape),
                    "b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()} for name, a in tensors]
        self.browser.page.evaluate("([id, xs]) => window.mx.feed(id, xs)", [self._next, payload])
        return self._next

    def drop(self, feed_id: int) -> None:
        self.browser.page.evaluate("id => window.mx.drop(id)", feed_id)

    def run(self, feed_id: int) -> float:
        """One session.run on a resident feed (outputs stay in the page); returns its page-side milliseconds."""
        return float(self.browser.page.evaluate("id => window.mx.run(id)", feed_id))

    def fetch(self, feed_id: int) -> list[tuple[str, np.ndarray]]:
        """One session.run, its outputs brought back as (name, array) in the session's output order."""
        outputs = self.browser.page.evaluate("id => window.mx.fetch(id)", feed_id)
        return [(o["name"], from_js(o["type"], o["dims"], base64.b64decode(o["b64"]))) for o in outputs]

    def timed(self, feed_id: int, warmup: int, min_calls: int, max_calls: int, seconds: float) -> np.ndarray:
        """Calls timed inside the page by performance.now(), back to back: nanoseconds per call."""
        ms = self.browser.page.evaluate("([id, w, lo, hi, s]) => window.mx.timed(id, w, {min: lo, max: hi}, s)",
                                        [feed_id, warmup, min_calls, max_calls, seconds])
        return np.round(np.asarray(ms, dtype=np.float64) * 1e6).astype(np.int64)

    def page_ms(self) -> list[float]:
        """The page-side milliseconds of every `run`/`fetch` since the last call (the calls Python timed too)."""
        return [float(x) for x in self.browser.page.evaluate("() => window.mx.takePageMs()")]

    def close(self) -> None:
        self.browser.close()
        self.server.stop()


def open_session(model_files: Mapping[str, Path], model: str, threads: int, ep: str = "wasm") -> PageSession:
    """Serve `model_files` (name -> path; `model` is the .onnx one) with the runtime, open the page in headless
    Chromium and create the session. Raises RuntimeError with the page's own message when the runtime refuses."""
    dist = runtime_dist()
    if dist is None:
        raise FileNotFoundError(f"onnxruntime-web is not installed: npm ci --prefix {WEB_DIR}")
    server = PageServer(routes(model_files, dist))
    origin = server.start()
    try:
        browser = launch(webgpu=ep == "webgpu")
    except Exception:
        server.stop()
        raise
    try:
        page = browser.page
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        page.goto(f"{origin}/page.html?ep={ep}")
        page.wait_for_function("() => window.mx && window.mx.ready")
        external = [{"path": name, "data": f"/model/{name}"} for name in model_files if name != model]
        info = page.evaluate("o => window.mx.init(o)", {"model": f"/model/{model}", "threads": threads,
                                                        "externalData": external or None})
    except Exception:
        browser.close()
        server.stop()
        raise
    return PageSession(browser, server, origin, dict(info), ep)


def webgpu_probe() -> dict[str, Any]:
    """{"ok", "reason"}: whether headless Chromium here offers a WebGPU adapter (launched with WebGPU's flags)."""
    dist = runtime_dist()
    if dist is None:
        return {"ok": False, "reason": f"onnxruntime-web is not installed: npm ci --prefix {WEB_DIR}"}
    with PageServer(routes({}, dist)) as origin:
        browser = launch(webgpu=True)
        try:
            browser.page.goto(f"{origin}/page.html?ep=wasm")
            browser.page.wait_for_function("() => window.mx && window.mx.ready")
            return dict(browser.page.evaluate("() => window.mx.webgpuProbe()"))
        finally:
            browser.close()


# numpy dtype name -> onnxruntime-web's tensor type name (the same words except bool)
JS_TYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "int8": "int8", "uint8": "uint8",
            "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32", "int64": "int64",
            "uint64": "uint64", "bool": "bool"}


def js_type(a: np.ndarray) -> str:
    name = a.dtype.name
    if name not in JS_TYPES:
        raise TypeError(f"onnxruntime-web has no tensor type for {name}")
    return JS_TYPES[name]


def from_js(kind: str, dims: Sequence[int], raw: bytes) -> np.ndarray:
    """The page's tensor bytes as a numpy array of its ONNX type and shape."""
    dtype = np.dtype("bool") if kind == "bool" else np.dtype(kind)
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(dims)).copy()
