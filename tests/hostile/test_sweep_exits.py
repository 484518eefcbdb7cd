"""A sweep's exit codes say whose problem it was: a full disk is the user's (exit 2, one line naming the
path, the row's log keeping the command it ran), an unreachable Ray address one line within seconds."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import REPO
from tests.hostile.conftest import assert_one_line

pytestmark = pytest.mark.subprocess

FILLER = """
import os
import numpy as np
from multiexport import Target


def build():
    # fills the sweep's file system (a 4 MiB tmpfs) while the compare runs: every later write there fails
    try:
        with open(os.path.join(os.environ["FILL_DIR"], f"fill-{os.getpid()}"), "wb") as fh:
            while True:
                fh.write(b"\\0" * 65536)
                fh.flush()
    except OSError:
        pass
    return Target(lambda x: x * 2, args=(np.ones((2, 3), np.float32),))
"""


def _tmpfs_namespaces() -> str:
    """Why a private tmpfs cannot be mounted here (empty: it can): `unshare -rm` needs user namespaces."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, text=True, timeout=60)
    return "" if probe.returncode == 0 else f"unshare -rm cannot mount a tmpfs here: {probe.stderr.strip()[:200]}"


def test_a_full_disk_during_a_sweep_is_exit_2_naming_the_path_and_the_log_keeps_its_command(tmp_path):
    why = _tmpfs_namespaces()
    if why:
        pytest.skip(why)
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "filler.py").write_text(FILLER)
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\nargs = ["--no-bench", "--trials", "1"]\n'
                    '[[target]]\ntarget = "filler.py:build"\nname = "filler"\n')
    script = (f'mount -t tmpfs -o size=4m tmpfs "{disk}" && cd "{REPO}" && '
              f'FILL_DIR="{disk}" "{sys.executable}" -m multiexport sweep "{spec}" --out-dir "{disk}/out" --jobs 1 '
              f'>"{tmp_path}/stdout" 2>"{tmp_path}/stderr"; echo $? >"{tmp_path}/rc"; '
              f'cp "{disk}/out/rows/filler.log" "{tmp_path}/log" 2>/dev/null; true')
    subprocess.run(["unshare", "-rm", "sh", "-c", script], check=True, timeout=600)
    code = int((tmp_path / "rc").read_text())
    proc = subprocess.CompletedProcess([], code, (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text())
    proc.stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("[sweep] "))
    assert_one_line(proc, 2, f"Path '{disk}/out/", "no space left on the device")
    log = (tmp_path / "log").read_text()
    assert log.startswith("$ ") and " -m multiexport compare filler.py:build --out-dir " in log


def test_an_unreachable_ray_address_is_one_line_within_seconds(tmp_path):
    pytest.importorskip("ray", reason="the Ray executor is the optional 'sweep' extra")
    with socket.socket() as s:  # a port nothing listens on: bound, never listening, closed after
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\n[[target]]\ntarget = "multiexport.examples:seed"\nname = "seed"\n')
    proc = subprocess.run([sys.executable, "-m", "multiexport", "sweep", str(spec), "--out-dir", str(tmp_path / "out"),
                           "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # before: ray.init retried for minutes
    proc.stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("[sweep] "))
    assert_one_line(proc, 2, f"Option '--ray-address' | cannot reach 127.0.0.1:{port}", "ray start --head")
    assert not (tmp_path / "out" / "rows" / "seed").exists()


def test_sigterm_while_ray_starts_is_a_stop_never_the_target_s_sys_exit(tmp_path):
    """Ray's ray.init installs a SIGTERM handler that calls sys.exit(15); a SIGTERM in that window was
    reported as 'Target | called sys.exit(15)', exit 2. Whenever it lands (importing Ray, starting the local
    cluster, driving the tasks) it is a stop: exit 143, no target blamed."""
    pytest.importorskip("ray", reason="the Ray executor is the optional 'sweep' extra")
    import signal

    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\n[[target]]\ntarget = "multiexport.examples:seed"\nname = "seed"\n')
    tmp = tempfile.mkdtemp(prefix="mx-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    try:
        with open(tmp_path / "err", "w") as err_file:
            proc = subprocess.Popen([sys.executable, "-m", "multiexport", "sweep", str(spec), "--out-dir",
                                     str(tmp_path / "out"), "--executor", "ray"], cwd=REPO, stdout=subprocess.DEVNULL,
                                    stderr=err_file, env={**os.environ, "TMPDIR": tmp})
            try:  # the local cluster's GCS server started (its session lives in our TMPDIR): ray.init is under way
                while proc.poll() is None and not _ray_started(tmp):
                    time.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)
            finally:
                proc.kill()
        err = (tmp_path / "err").read_text()
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "sys.exit" not in err and "Traceback" not in err
        assert not _ray_started(tmp)  # the cluster it had started is gone too
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ray_started(tmp) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    line = fh.read()
            except OSError:
                continue
            if b"gcs_server" in line and str(tmp).encode() in line:
                return True
    return False
