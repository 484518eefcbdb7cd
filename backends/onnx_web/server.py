"""A loopback HTTP server for the page: the artifact's model files and the runtime's dist files, nothing else.

It serves a fixed table of URL path -> file (built by the runner from the manifest and the pinned runtime's
dist folder), so no request can reach another file on the machine, and it binds 127.0.0.1 on a port the
kernel picks. Every response carries the cross-origin isolation headers (COOP same-origin, COEP
require-corp): without them the page has no SharedArrayBuffer, so onnxruntime-web's wasm backend runs on one
thread, and performance.now() is coarsened to 100 us instead of 5 us.
"""

from __future__ import annotations

import mimetypes
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
                     "Cross-Origin-Resource-Policy": "same-origin"}
TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html",
         ".json": "application/json", ".onnx": "application/octet-stream", ".data": "application/octet-stream"}


@dataclass
class PageServer:
    """Serves `routes` (URL path -> file on disk) on 127.0.0.1 until `stop`; usable as a context manager.

    routes: every URL the page may fetch and the file behind it; any other path is a 404.
    served: the paths requested so far, in order (the tests read it: nothing fetched outside the table).
    """

    routes: dict[str, Path]
    served: list[str] = field(default_factory=list)

    def start(self) -> str:
        """Start serving in a daemon thread; returns the origin, `http://127.0.0.1:<port>`."""
        routes, served = dict(self.routes), self.served

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (the http.server API)
                path = urlsplit(self.path).path
                file = routes.get(path)
                served.append(path)
                if file is None or not file.is_file():
                    self.send_error(404)
                    return
                body = file.read_bytes()
                self.send_response(200)
                kind = TYPES.get(file.suffix) or mimetypes.guess_type(file.name)[0] or "application/octet-stream"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                for key, value in ISOLATION_HEADERS.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # the runner's worker keeps its stderr for real errors
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="onnx-web-server", daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        httpd = getattr(self, "_httpd", None)
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            del self._httpd

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
