"""The Node.js side as plain functions: start `node runner.cjs` with onnxruntime-node from the npm lock, create a
session on a model file, move tensors in and out by name, and time session.run in Node.

Nothing here knows the manifest or the Runner contract (runner.py does). The runtime comes from `npm ci` in
backends/onnx_web/web (one lock pins onnxruntime-web and onnxruntime-node); nothing is fetched at run time.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "runner.cjs"
# The npm project that pins onnxruntime-node beside onnxruntime-web (one lock, one `npm ci`).
NODE_MODULES = HERE.parent / "onnx_web" / "web" / "node_modules"
MODULES_ENV = "MULTIEXPORT_ORT_NODE_MODULES"  # a node_modules elsewhere (an image's own npm install)
NODE_ENV = "MULTIEXPORT_NODE"  # a node executable elsewhere

# numpy dtype name -> onnxruntime-node's tensor type name (the same words)
JS_TYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "int8": "int8", "uint8": "uint8",
            "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32", "int64": "int64",
            "uint64": "uint64", "bool": "bool"}


def node_path() -> str | None:
    """The node executable: $MULTIEXPORT_NODE, else `node` on PATH; None: none."""
    given = os.environ.get(NODE_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("node")


def modules_dir() -> Path | None:
    """The node_modules holding onnxruntime-node with its Linux binding; None: not installed."""
    given = os.environ.get(MODULES_ENV)
    root = Path(given) if given else NODE_MODULES
    package = root / "onnxruntime-node"
    return root if (package / "package.json").is_file() and any(package.glob("bin/*/linux/*/*.node")) else None


def runtime_version(root: Path) -> str | None:
    try:
        return str(json.loads((root / "onnxruntime-node" / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


class NodeError(RuntimeError):
    """The Node.js side refused or failed a request (its own message), or the process ended."""


@dataclass
class NodeSession:
    """An onnxruntime-node session in a `node` process; `close` ends it.

    process: the node process. info: what init reported (input/output names, versions, createMs).
    stderr: the file node's stderr goes to (its tail is said when the process dies).
    """

    process: subprocess.Popen
    stderr: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    _next: int = 0

    def request(self, op: str, **fields: Any) -> Any:
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None or self.process.poll() is not None:
            raise NodeError(f"the node process has ended (exit {self.process.returncode})")
        try:
            stdin.write(json.dumps({"op": op, **fields}) + "\n")
            stdin.flush()
            line = stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise NodeError(f"the node process has ended ({exc})") from exc
        if not line:
            self.process.wait(timeout=5)
            raise NodeError(f"the node process ended during '{op}' (exit {self.process.returncode}): {self._said()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise NodeError(answer["error"])
        return answer["value"]

    def feed(self, tensors: Sequence[tuple[str, np.ndarray]]) -> int:
        self._next += 1
        payload = [{"name": name, "type": JS_TYPES[a.dtype.name], "dims": list(a.shape),
                    "b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()} for name, a in tensors]
        self.request("feed", id=self._next, inputs=payload)
        return self._next

    def run(self, feed_id: int) -> int:
        """One session.run on a resident feed; returns its nanoseconds as Node timed them."""
        return int(self.request("run", id=feed_id))

    def fetch(self, feed_id: int) -> list[tuple[str, np.ndarray]]:
        outputs = self.request("fetch", id=feed_id)
        return [(o["name"], from_js(o["type"], o["dims"], base64.b64decode(o["b64"]))) for o in outputs]

    def timed(self, feed_id: int, warmup: int, min_calls: int, max_calls: int, seconds: float) -> np.ndarray:
        ns = self.request("timed", id=feed_id, warmup=warmup, min=min_calls, max=max_calls, seconds=seconds)
        return np.asarray(ns, dtype=np.int64)

    def __post_init__(self) -> None:
        # A session dropped without close (an export's load check) still ends its process and pipes.
        self._end = weakref.finalize(self, _shutdown, self.process, self.stderr)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.request("close")
            except NodeError:
                pass
        self._end()

    def _said(self) -> str:
        """The tail of node's stderr (one line), for a process that died."""
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        return " ".join(self.stderr.read().decode(errors="replace").split())[-600:]


def _shutdown(process: subprocess.Popen, stderr: Any) -> None:
    """End `process` (closing its stdin ends node's read loop; killed if it does not exit) and close its files."""
    for stream in (process.stdin,):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for stream in (process.stdout, stderr):
        if stream is not None:
            stream.close()


def open_session(model: Path, threads: int) -> NodeSession:
    """Start node with the runner script and create a session on `model` (its external data beside it)."""
    node, modules = node_path(), modules_dir()
    if node is None:
        raise FileNotFoundError(f"no node executable found (apt-get install nodejs, or set ${NODE_ENV})")
    if modules is None:
        raise FileNotFoundError(f"onnxruntime-node is not installed: npm ci --prefix {NODE_MODULES.parent}")
    env = {"PATH": os.environ.get("PATH", ""), "NODE_PATH": str(modules), "HOME": os.environ.get("HOME", "/tmp")}
    stderr = tempfile.TemporaryFile()
    process = subprocess.Popen([node, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=stderr, text=True, env=env, cwd=str(model.parent))
    session = NodeSession(process, stderr)
    try:
        session.info = dict(session.request("init", model=str(model), threads=threads))
    except Exception:
        session.close()
        raise
    return session


def from_js(kind: str, dims: Sequence[int], raw: bytes) -> np.ndarray:
    """Node's tensor bytes as a numpy array of its ONNX type and shape."""
    dtype = np.dtype("bool") if kind == "bool" else np.dtype(kind)
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(dims)).copy()
