"""The native XLA consumer's GPU plumbing, checked on a CPU machine: which plugin `--device gpu` finds, what
environment it runs in, where the PJRT header may come from, static modules refined for CUDA without a GPU,
and pjrt_run refusing a module lowered for another platform than its plugin's.

jax's CUDA plugin cannot run here; its discovery is checked on the wheel's own layout
(jax_plugins/xla_cuda13/xla_cuda_plugin.so, nvidia/<lib>/lib) laid out in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from multiexport import api
from multiexport.backends.xla import runtime as pjrt
from multiexport.errors import BackendUnavailable, RunError
from multiexport.examples import mlp_dynamic
from multiexport.exporting.manifest import Manifest
from multiexport.native.run import command, run


@pytest.fixture
def fresh_namespaces():
    """Namespace packages imported while a test's layout is on sys.path keep that path when it is gone:
    forget them after the test, so the next one sees the real installation."""
    before = {name: sys.modules.get(name) for name in ("jax_plugins", "nvidia")}
    yield
    for name in list(sys.modules):
        if name.split(".")[0] in before:
            del sys.modules[name]
    sys.modules.update({name: module for name, module in before.items() if module is not None})


def _cuda_wheel_layout(root, cuda: str = "13"):
    """The files jax-cudaNN-pjrt and an NVIDIA wheel install, as empty files under `root`."""
    plugin_dir = root / "jax_plugins" / f"xla_cuda{cuda}"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "__init__.py").write_text("")
    (plugin_dir / pjrt.CUDA_PLUGIN_FILE).write_bytes(b"")
    lib = root / "nvidia" / f"cu{cuda}" / "lib"
    lib.mkdir(parents=True)
    return plugin_dir / pjrt.CUDA_PLUGIN_FILE, lib


@pytest.fixture
def no_plugin_env(monkeypatch):
    monkeypatch.delenv(pjrt.PLUGIN_ENV, raising=False)
    monkeypatch.delenv(pjrt.HEADER_ENV, raising=False)


def test_device_gpu_finds_jaxs_cuda_plugin_and_its_nvidia_libraries(
    tmp_path, monkeypatch, no_plugin_env, fresh_namespaces
):
    plugin, lib = _cuda_wheel_layout(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = pjrt.find_pjrt_plugin(device="gpu")
    assert found == plugin.resolve()
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")  # where a container puts libcuda.so.1
    env = pjrt.plugin_environment(found)
    assert env["LD_LIBRARY_PATH"].split(":") == [str(lib), "/usr/local/nvidia/lib64"]
    assert env["PATH"] == os.environ["PATH"]  # XLA looks for ptxas there
    assert pjrt.plugin_environment(tmp_path / "xla_cpu_pjrt.so") == {}  # a CPU plugin needs nothing


def test_without_a_cuda_plugin_the_error_names_the_package(tmp_path, monkeypatch, no_plugin_env):
    if any(pjrt.package_dir(m) for m in pjrt.CUDA_PLUGIN_PACKAGES):
        pytest.skip("a CUDA PJRT plugin is installed here")
    with pytest.raises(BackendUnavailable, match=r"no CUDA PJRT plugin: install JAX's.*jax-cuda13-pjrt"):
        pjrt.find_pjrt_plugin(device="gpu")
    with pytest.raises(BackendUnavailable, match=r"Device 'npu' \| no PJRT plugin kind"):
        pjrt.find_pjrt_plugin(device="npu")


def test_an_explicit_plugin_wins_over_the_device(tmp_path, monkeypatch, no_plugin_env):
    given = tmp_path / "my_plugin.so"
    given.write_bytes(b"")
    monkeypatch.setenv(pjrt.PLUGIN_ENV, str(given))
    assert pjrt.find_pjrt_plugin(device="gpu") == given.resolve()


def test_the_header_directory_can_be_named(tmp_path, monkeypatch, no_plugin_env):
    try:
        installed = pjrt.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    carried = tmp_path / "include"
    carried.mkdir()
    shutil.copy(installed / "pjrt_c_api.h", carried)  # a scratch copy, as a machine without the wheels gets it
    monkeypatch.setenv(pjrt.HEADER_ENV, str(carried))
    assert pjrt.find_pjrt_header() == carried.resolve()
    (carried / "pjrt_c_api.h").unlink()
    with pytest.raises(BackendUnavailable, match=r"MULTIEXPORT_PJRT_INCLUDE '.*include' \| holds no pjrt_c_api.h"):
        pjrt.find_pjrt_header()


@pytest.fixture(scope="module")
def cuda_artifact(tmp_path_factory):
    """The symbolic-batch MLP exported for CUDA alone, on this CPU machine, with a static module at b=2."""
    out = tmp_path_factory.mktemp("cuda-mlp") / "xla"
    api.export(mlp_dynamic(), out, "xla", platforms=("cuda",), static_sizes={"b": (2,)})
    return out


def test_static_modules_for_cuda_are_refined_without_a_gpu(cuda_artifact):
    manifest = Manifest.read(cuda_artifact)
    assert manifest.supports["platforms"] == ["cuda"]
    static = manifest.native["static_modules"]
    assert "b=2" in static  # and the example's size
    assert all(module["platforms"] == ["cuda"] for module in static.values())
    assert (cuda_artifact / static["b=2"]["program"]).is_file()
    assert not any("no refined static modules" in w for w in manifest.warnings)


def test_static_modules_follow_this_machine_when_the_module_has_its_platform(tmp_path):
    api.export(mlp_dynamic(), tmp_path / "xla", "xla", platforms=("cuda", "cpu"), static_sizes={"b": (2,)})
    static = Manifest.read(tmp_path / "xla").native["static_modules"]
    assert static["b=2"]["platforms"] == ["cpu"]  # this machine's, though cuda comes first


def test_pjrt_run_refuses_a_module_lowered_for_another_platform(cuda_artifact, no_plugin_env):
    try:
        pjrt.find_pjrt_plugin()
        pjrt.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    import numpy as np

    manifest = Manifest.read(cuda_artifact)
    feed = {leaf.name: np.zeros([2 if d == "b" else d for d in leaf.shape], leaf.dtype) for leaf in manifest.inputs}
    # the plugin named: `run` itself refuses --device cpu for a cuda-only artifact before pjrt_run is reached
    with pytest.raises(RunError, match=r"static/b2\.mlirbc \| lowered for cuda, this plugin's platform is 'cpu'"):
        run(cuda_artifact, feed, plugin=pjrt.find_pjrt_plugin())


def test_the_gpu_command_carries_the_cuda_plugin_and_its_libraries(
    cuda_artifact, tmp_path, monkeypatch, no_plugin_env, fresh_namespaces
):
    try:
        pjrt.find_pjrt_header()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    plugin, lib = _cuda_wheel_layout(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    argv, env = command(cuda_artifact, device="gpu")
    assert argv[argv.index("--plugin") + 1] == str(plugin.resolve())
    assert str(lib) in env["LD_LIBRARY_PATH"].split(":")
