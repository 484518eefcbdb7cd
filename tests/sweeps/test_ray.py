"""The Ray executor on a real local Ray cluster started here (`ray start --head`, explicit resources): the
same statuses as the local executor, and a target no node can take reported at once, not waited for."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.subprocess

SPEC = """[sweep]
backends = ["xla", "onnx"]
args = ["--no-bench", "--trials", "1"]

[[target]]
target = "multiexport.examples:seed"

[[target]]
target = "models.py:double"
name = "double"
resources = {{ cpus = 1, arch = "{arch}" }}

[[target]]
target = "models.py:double"
name = "needs_gpu"
resources = {{ gpus = 1 }}
"""
MODELS = """import numpy as np
from multiexport import Target

def double():
    return Target(lambda x: {"y": x * 2}, args=(np.linspace(-1, 1, 6, dtype=np.float32),), name="double")
"""


@pytest.fixture(scope="module")
def ray_cluster():
    """A one-node Ray cluster on loopback with 2 CPUs and the custom resource of this machine's architecture;
    its session files in a short temporary directory (Ray's socket paths must stay under 107 bytes)."""
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    assert ray, "Ray is not installed: `make test` installs the [sweep] extra"
    temp = Path(tempfile.mkdtemp(prefix="mxray"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    arch = os.uname().machine
    start = subprocess.run([ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                            "--num-cpus", "2", "--num-gpus", "0", "--resources", json.dumps({f"arch:{arch}": 100}),
                            "--temp-dir", str(temp), "--include-dashboard", "false", "--disable-usage-stats"],
                           capture_output=True, text=True, env=env, timeout=180)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}", env, arch
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def test_the_ray_executor_gives_the_local_executor_s_statuses_and_reports_what_no_node_offers(tmp_path, ray_cluster):
    address, env, arch = ray_cluster
    (tmp_path / "models.py").write_text(MODELS)
    spec = tmp_path / "sweep.toml"
    spec.write_text(SPEC.format(arch=arch))
    on_ray = run_cli("sweep", spec, "--out-dir", tmp_path / "ray", "--executor", "ray", "--ray-address", address, env=env)
    assert on_ray.returncode == 3, on_ray.stderr[-3000:]  # needs_gpu has no results
    assert f"joined the cluster at {address}" in on_ray.stderr
    local = run_cli("sweep", spec, "--out-dir", tmp_path / "local", "--only", "seed,double")
    assert local.returncode == 0, local.stderr[-3000:]

    def statuses(out: Path) -> dict:
        summary = json.loads((out / "summary.json").read_text())
        return {n: (r["state"], {b: c["status"] for b, c in r["backends"].items()}) for n, r in summary.items()}

    ray_rows, local_rows = statuses(tmp_path / "ray"), statuses(tmp_path / "local")
    assert ray_rows.pop("needs_gpu") == ("unschedulable", {})
    assert ray_rows == local_rows == {"seed": ("done", {"xla": "ok", "onnx": "ok"}),
                                      "double": ("done", {"xla": "ok", "onnx": "ok"})}
    gpu = json.loads((tmp_path / "ray" / "summary.json").read_text())["needs_gpu"]
    assert gpu["reason"] == "no node of the cluster offers CPU=1, GPU=1" and gpu["attempts"] == 0
    # What the node shipped back is the compare's own results, read back whole
    shipped = json.loads((tmp_path / "ray" / "rows" / "double" / "results.json").read_text())
    assert shipped["backends"]["onnx"]["parity"]["passed"] is True
    assert (tmp_path / "ray" / "rows" / "double" / "report.html").is_file()
    assert "multiexport compare models.py:double" in (tmp_path / "ray" / "rows" / "double.log").read_text()
