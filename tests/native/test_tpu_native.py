"""The native XLA consumer on a TPU machine, checked on the CPU: libtpu found as a PJRT plugin without loading it,
the TPU_* variables carried into the `env -i` environment (without them libtpu waits on a metadata server), a
bundle's run.sh that sets them, and a consumer that hangs stopped by `--timeout` with nothing left running.

The hanging consumer is real: pjrt_run loading a plugin whose GetPjrtApi forks a child and both sleep (what
libtpu querying an unreachable metadata server looks like from outside). The TPU bundle runs the CPU plugin
under libtpu's file name: its run.sh is what a TPU bundle writes, and it runs here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multiexport import api
from multiexport.backends.xla import runtime as pjrt
from multiexport.errors import UsageError
from multiexport.examples import seed
from multiexport.native.run import print_command

from ..conftest import REPO

HANG_C = r"""
#include <stdio.h>
#include <unistd.h>
void *GetPjrtApi(void) {
  pid_t child = fork();
  FILE *f = fopen(PIDFILE, "a");
  if (f) { fprintf(f, "%d\n", child == 0 ? (int)getpid() : (int)child); fclose(f); }
  for (;;) sleep(1000);  /* parent and child: a metadata server that never answers */
  return 0;
}
"""

TPU_ENV = {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "TPU_HOST_BOUNDS": "1,1,1",
           "TPU_WORKER_ID": "0"}


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TPU_")}
    return subprocess.run([sys.executable, "-m", "multiexport", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})}, cwd=REPO)


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its reaper has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def xla_artifact(tmp_path_factory) -> Path:
    try:
        pjrt.find_pjrt_header()
    except Exception as exc:  # noqa: BLE001 - the header is what pjrt_run compiles against
        pytest.skip(f"no pjrt_c_api.h here: {exc}")
    out = tmp_path_factory.mktemp("tpu-native") / "seed_xla"
    api.export(seed(), out, "xla")
    return out


@pytest.fixture
def hanging_plugin(tmp_path) -> tuple[Path, Path]:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    pids = tmp_path / "pids.txt"
    (tmp_path / "hang.c").write_text(HANG_C)
    subprocess.run([compiler, "-shared", "-fPIC", f'-DPIDFILE="{pids}"', str(tmp_path / "hang.c"), "-o",
                    str(tmp_path / "hang_plugin.so")], check=True, timeout=120)
    return tmp_path / "hang_plugin.so", pids


def _all_stopped(pids: Path) -> list[int]:
    deadline = time.monotonic() + 10  # the kernel delivers SIGKILL to the group at once; reaping may lag
    found = [int(line) for line in pids.read_text().split()]
    while any(_running(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(found) == 2, found  # the program and the child its plugin forked
    return [p for p in found if _running(p)]


def test_a_hanging_consumer_is_stopped_by_the_timeout_with_nothing_left_running(xla_artifact, hanging_plugin):
    plugin, pids = hanging_plugin
    proc = _cli("native", xla_artifact, "--pjrt-plugin", plugin, "--timeout", "3")
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Native program 'pjrt_run' | ran past 3 s and was stopped with everything it started" in lines[0]
    assert _all_stopped(pids) == []


def test_a_bundle_whose_proving_run_hangs_is_stopped_and_leaves_nothing(xla_artifact, hanging_plugin, tmp_path):
    plugin, pids = hanging_plugin
    out = tmp_path / "bundle"
    proc = _cli("native", xla_artifact, "--bundle", out, "--pjrt-plugin", plugin, "--timeout", "3")
    assert proc.returncode == 3, proc.stderr
    assert "Bundle run.sh | ran past 3 s" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".bundle.partial-*"))
    assert _all_stopped(pids) == []


def test_the_timeout_must_be_positive(xla_artifact):
    proc = _cli("native", xla_artifact, "--timeout", "0")
    assert proc.returncode == 2 and "Option '--timeout' | got 0, expected seconds > 0" in proc.stderr


@pytest.fixture
def libtpu_layout(tmp_path, monkeypatch):
    """The `libtpu` package's layout (libtpu/__init__.py, libtpu/libtpu.so) on sys.path, its .so the CPU plugin."""
    try:
        cpu_plugin = pjrt.find_pjrt_plugin(device="cpu")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no PJRT CPU plugin here: {exc}")
    package = tmp_path / "site" / "libtpu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('libtpu must not be imported to be found')\n")
    shutil.copy(cpu_plugin, package / "libtpu.so")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delenv(pjrt.PLUGIN_ENV, raising=False)
    for key in [k for k in os.environ if k.startswith("TPU_")]:
        monkeypatch.delenv(key)
    yield package / "libtpu.so"
    sys.modules.pop("libtpu", None)


def test_device_tpu_finds_libtpu_and_carries_the_tpu_variables(libtpu_layout, monkeypatch, xla_artifact, tmp_path):
    assert pjrt.find_pjrt_plugin(device="tpu") == libtpu_layout.resolve()
    for key, value in TPU_ENV.items():
        monkeypatch.setenv(key, value)
    env = pjrt.plugin_environment(libtpu_layout)
    assert env == {**TPU_ENV, "TPU_SKIP_MDS_QUERY": "true"}
    both = tmp_path / "both"
    api.export(seed(), both, "xla", platforms=["cpu", "tpu"])
    line = print_command(both, device="auto")  # a TPU attached (TPU_ACCELERATOR_TYPE), libtpu installed
    assert "env -i TPU_ACCELERATOR_TYPE=v5litepod-4" in line and "TPU_SKIP_MDS_QUERY=true" in line
    assert f"--plugin {libtpu_layout.resolve()}" in line
    assert "--cpu-devices" not in line  # libtpu's client takes no CPU device count
    cpu_line = print_command(both, device="cpu")
    assert "--cpu-devices 1" in cpu_line  # a CPU plugin's client with one device, as jaxlib's CPU client
    # lowered for the CPU only, auto stays on the CPU (libtpu could not run it); --device tpu refuses it in one line
    assert "TPU_ACCELERATOR_TYPE" not in print_command(xla_artifact, device="auto")
    with pytest.raises(UsageError, match="lowered for cpu, expected tpu for --device tpu: re-export with --platforms"):
        print_command(xla_artifact, device="tpu")


def test_without_libtpu_device_tpu_says_what_to_install(monkeypatch):
    monkeypatch.delenv(pjrt.PLUGIN_ENV, raising=False)
    if pjrt.package_dir("libtpu"):
        pytest.skip("libtpu is installed here")
    with pytest.raises(pjrt.NativeBuildError, match=r"no TPU PJRT plugin: libtpu is not installed .*jax\[tpu\]"):
        pjrt.find_pjrt_plugin(device="tpu")


def test_a_tpu_bundles_run_sh_sets_the_tpu_variables_unless_the_server_has_them(libtpu_layout, monkeypatch,
                                                                                 xla_artifact, tmp_path):
    from multiexport.native.bundle import bundle

    for key, value in TPU_ENV.items():
        monkeypatch.setenv(key, value)
    made = bundle(xla_artifact, tmp_path / "b", timeout=120)  # libtpu on a machine with a TPU: picked unasked
    assert (made.directory / "lib" / "libtpu.so").is_file()
    script = (made.directory / "run.sh").read_text()
    assert '[ -n "${TPU_HOST_BOUNDS+set}" ] || TPU_HOST_BOUNDS=1,1,1; export TPU_HOST_BOUNDS' in script
    assert "TPU_SKIP_MDS_QUERY=true" in script
    shown = subprocess.run(["env", "-i", "TPU_WORKER_ID=3", "sh", "-c",
                            script.replace("exec ../bin/", "env | sort; : ../bin/").split("\n", 1)[1]],
                           capture_output=True, text=True, cwd=made.directory, timeout=60).stdout
    assert "TPU_WORKER_ID=3" in shown and "TPU_HOST_BOUNDS=1,1,1" in shown  # the server's own value wins
    ran = subprocess.run(["env", "-i", str(made.directory / "run.sh")], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
