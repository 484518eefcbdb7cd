"""Where the PJRT consumer's runtime is on this machine: `pjrt_c_api.h` to compile `pjrt_run` against, and the
PJRT plugin it dlopens (a CPU plugin wheel's, jax's CUDA plugin with the NVIDIA wheels' libraries, or libtpu's
libtpu.so with the machine's TPU_* variables), found in the installed packages without importing them, never
vendored."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from multiexport.sdk import NativeBuildError, package_dir, tpu_presence, tpu_variables

PLUGIN_ENV = "MULTIEXPORT_PJRT_PLUGIN"
HEADER_ENV = "MULTIEXPORT_PJRT_INCLUDE"
# jax's CUDA PJRT plugins, newest CUDA first: the package `jax-cudaNN-pjrt` installs jax_plugins/xla_cudaNN/.
CUDA_PLUGIN_PACKAGES = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")
CUDA_PLUGIN_FILE = "xla_cuda_plugin.so"
TPU_PLUGIN_FILE = "libtpu.so"  # the `libtpu` package's library is itself a PJRT plugin (it exports GetPjrtApi)


def find_pjrt_header() -> Path:
    """The directory holding `pjrt_c_api.h`: $MULTIEXPORT_PJRT_INCLUDE's, else the xla-cpu-pjrt wheel's,
    else the tensorflow wheel's. A directory named by the variable must hold it: no silent fallback."""
    if os.environ.get(HEADER_ENV):
        given = Path(os.environ[HEADER_ENV]).expanduser().resolve()
        if not (given / "pjrt_c_api.h").is_file():
            raise NativeBuildError(f"${HEADER_ENV} '{given}' | holds no pjrt_c_api.h, expected the directory "
                                   "that does")
        return given
    candidates = []
    xla = package_dir("xla_plugins")
    if xla:
        candidates.append(xla / "xla_cpu_pjrt" / "include")
    tf = package_dir("tensorflow")
    if tf:
        candidates.append(tf / "include" / "xla" / "pjrt" / "c")
    for directory in candidates:
        if (directory / "pjrt_c_api.h").is_file():
            return directory
    raise NativeBuildError(
        "no pjrt_c_api.h: install the PJRT CPU plugin wheel that ships it (pip install 'multiexport[native]', "
        f"i.e. xla-cpu-pjrt) or tensorflow; looked in {', '.join(map(str, candidates)) or 'no installed package'}")


def find_pjrt_plugin(explicit: str | os.PathLike | None = None, device: str = "cpu") -> Path:
    """The PJRT plugin to dlopen: `explicit`, else $MULTIEXPORT_PJRT_PLUGIN, else an installed one for
    `device` ("cpu", "gpu" or "tpu": libtpu's libtpu.so).

    Installed CPU plugins, best first: lammps-jax-pjrt-cpu (built from the XLA of jaxlib 0.11.2: measured
    bit-equal to JAX 0.10.2 on the MLP), then xla-cpu-pjrt 0.0.1 (an older XLA: its dots differ from
    jaxlib 0.10.2's in the last bit, since jaxlib fuses them into YNNPACK by default). The GPU plugin is
    the one jax itself loads: `jax_plugins/xla_cuda13/xla_cuda_plugin.so` of jax-cuda13-pjrt (else 12),
    the same XLA as the installed jaxlib.
    """
    if explicit or os.environ.get(PLUGIN_ENV):
        path = Path(explicit or os.environ[PLUGIN_ENV]).expanduser().resolve()
        if not path.is_file():
            raise NativeBuildError(f"PJRT plugin '{path}' | no such file")
        return path
    if device == "gpu":
        return find_cuda_plugin()
    if device == "tpu":
        return find_tpu_plugin()
    if device != "cpu":
        raise NativeBuildError(f"Device '{device}' | no PJRT plugin kind for it, expected cpu, gpu or tpu")
    candidates = []
    lammps = package_dir("lammps_jax_pjrt_cpu")
    if lammps:
        candidates.append(lammps / "pjrt_c_api_cpu_plugin.so")
    xla = package_dir("xla_plugins")
    if xla:
        candidates.append(xla / "xla_cpu_pjrt" / "xla_cpu_pjrt.so")
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise NativeBuildError(
        "no PJRT CPU plugin: install one (pip install 'multiexport[native]', i.e. xla-cpu-pjrt, or "
        f"lammps-jax-pjrt-cpu), or name its .so with --pjrt-plugin or ${PLUGIN_ENV}")


def find_cuda_plugin() -> Path:
    """jax's CUDA PJRT plugin (`jax-cuda13-pjrt`, else `jax-cuda12-pjrt`), found without importing JAX."""
    looked = []
    for module in CUDA_PLUGIN_PACKAGES:
        directory = package_dir(module)
        if directory is None:
            continue
        looked.append(str(directory))
        if (directory / CUDA_PLUGIN_FILE).is_file():
            return (directory / CUDA_PLUGIN_FILE).resolve()
    raise NativeBuildError(
        "no CUDA PJRT plugin: install JAX's (pip install 'jax[cuda13]', which brings jax-cuda13-pjrt and its "
        f"jax_plugins/xla_cuda13/{CUDA_PLUGIN_FILE}), or name a .so with --pjrt-plugin or ${PLUGIN_ENV}"
        + (f"; looked in {', '.join(looked)}" if looked else ""))


def find_tpu_plugin() -> Path:
    """libtpu's PJRT plugin (the `libtpu` package's libtpu.so, which jax[tpu] installs), found without loading it:
    loading it takes the chip's lock."""

    found = tpu_presence()
    if found.libtpu is None:
        raise NativeBuildError(f"no TPU PJRT plugin: libtpu is not installed (pip install 'jax[tpu]' brings the libtpu "
                               f"package and its {TPU_PLUGIN_FILE}), or name a .so with --pjrt-plugin or ${PLUGIN_ENV}; "
                               f"{found.describe()}")
    return found.libtpu


def is_tpu_plugin(plugin: Path) -> bool:
    """Whether `plugin` is libtpu (the libtpu package's libtpu.so, or a copy of it in a bundle's lib/)."""
    return plugin.name == TPU_PLUGIN_FILE


def is_cuda_plugin(plugin: Path) -> bool:
    """Whether `plugin` is a CUDA PJRT plugin (jax's layout: jax_plugins/xla_cudaNN/xla_cuda_plugin.so)."""
    return plugin.name == CUDA_PLUGIN_FILE or plugin.parent.name.startswith("xla_cuda")


def nvidia_library_dirs() -> list[Path]:
    """The `lib/` directories of the installed NVIDIA wheels (nvidia-cublas, nvidia-cuda-runtime, ... and
    CUDA 13's single `nvidia/cu13`), in a stable order."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ModuleNotFoundError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for root in spec.submodule_search_locations:
        found += [d for d in sorted(Path(root).glob("*/lib")) if d.is_dir()]
    return found


def plugin_environment(plugin: Path) -> dict[str, str]:
    """What the native program's environment (nothing inherited, as `env -i`) needs for `plugin`.

    A CPU plugin needs nothing. libtpu needs the machine's TPU_* variables (`tpu_environment`). jax's CUDA plugin dlopens the CUDA libraries (cudart, cuBLAS, cuDNN, ...)
    that jax preloads from the NVIDIA wheels before registering it (jax_plugins/xla_cuda13/__init__.py):
    without Python, LD_LIBRARY_PATH names those directories instead, followed by this process's own
    LD_LIBRARY_PATH, which is where a container puts the driver (libcuda.so.1, e.g. /usr/local/nvidia/lib64).
    PATH is passed on too (XLA looks for ptxas there), and CUDA_VISIBLE_DEVICES when set.
    """
    if is_tpu_plugin(plugin):
        return tpu_environment()
    if not is_cuda_plugin(plugin):
        return {}
    inherited = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    env = {"LD_LIBRARY_PATH": os.pathsep.join([*map(str, nvidia_library_dirs()), *inherited]),
           "PATH": os.environ.get("PATH") or "/usr/local/cuda/bin:/usr/bin:/bin"}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return {k: v for k, v in env.items() if v}



def tpu_environment() -> dict[str, str]:
    """What libtpu needs in an environment that inherits nothing: this machine's TPU_* variables (its topology:
    TPU_ACCELERATOR_TYPE, TPU_CHIPS_PER_HOST_BOUNDS, TPU_HOST_BOUNDS, TPU_WORKER_ID, ...), and
    TPU_SKIP_MDS_QUERY=true when they say the topology. Without them libtpu asks a cloud metadata server for
    each key, about 30 s apiece, which looks like a hang."""

    env = tpu_variables()
    if "TPU_ACCELERATOR_TYPE" in env:
        env.setdefault("TPU_SKIP_MDS_QUERY", "true")
    return env
