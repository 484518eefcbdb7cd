"""A machine that only serves artifacts needs each format's runtime, not the converter that wrote it: an ONNX
artifact loads, runs, and serves (the serve worker's `import_runtime`, the device probe) in a fresh process where onnx, onnx_ir and jax2onnx cannot be imported (each blocked in
sys.modules), and a runtime that is missing is one line naming it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from multiexport.api import export

from ..conftest import REPO

CHILD = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` raises ImportError, find_spec says None: as if not installed
from multiexport.errors import MultiexportError
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import load_npz
backend = get_backend("onnx")
try:
    runner = backend.load({artifact!r})
except MultiexportError as exc:
    print(json.dumps({{"error": str(exc), "export": backend.available().ok}}))
    raise SystemExit(0)
feed = load_npz({artifact!r} + "/example_inputs.npz")
out = runner(feed)
backend.import_runtime()  # what a serve worker (multiexport load's Python lanes) calls before its first load
print(json.dumps({{"outputs": sorted(out), "export": backend.available().ok, "cpu": backend.device_status("cpu").ok,
                  "loaded": sorted(m for m in {blocked!r} if sys.modules.get(m) is not None)}}))
"""


@pytest.fixture(scope="module")
def onnx_artifact(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    out = tmp_path_factory.mktemp("runtime-only") / "onnx"
    export("multiexport.examples:seed", out_dir=out, backend="onnx")
    return out


def _child(artifact, blocked):
    done = subprocess.run([sys.executable, "-c", CHILD.format(blocked=blocked, artifact=str(artifact))], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_onnx_artifact_runs_where_only_onnxruntime_is_installed(onnx_artifact):
    got = _child(onnx_artifact, ["onnx", "onnx_ir", "jax2onnx"])
    assert "error" not in got, got
    assert got["outputs"] and got["loaded"] == []
    assert got["cpu"] is True  # the device probe asks for the runtime too, not the converter
    assert got["export"] is False  # exporting still says what it lacks


def test_without_the_runtime_the_load_is_one_line_naming_it(onnx_artifact):
    got = _child(onnx_artifact, ["onnxruntime"])
    assert got["error"].startswith("Backend 'onnx' | cannot run artifacts here: onnxruntime not installed, the "
                                   "runtime its artifacts need (pip install 'multiexport[onnx]')"), got
    assert "\n" not in got["error"]
