"""Where each native consumer's runtime is on this machine: headers, libraries and plugins, found in the
installed Python packages without importing them (importing TensorFlow takes seconds), never vendored.

`build.py` compiles against what these find; `run.py` and `bundle.py` use the plugins and libraries.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import BackendUnavailable

PLUGIN_ENV = "MULTIEXPORT_PJRT_PLUGIN"
LITERT_CHECKED = ("2.3",)  # ai-edge-litert releases litert_api.h was checked against (major.minor)
ORT_HEADER_ENV, ORT_LIBRARY_ENV = "MULTIEXPORT_ORT_INCLUDE", "MULTIEXPORT_ORT_LIBRARY"
HEADER_ENV = "MULTIEXPORT_PJRT_INCLUDE"
ORT_DECLARATION = "ort_api.h"  # multiexport's declaration of the ORT C API that ort_run calls
CUDA_PLUGIN_PACKAGES = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")
CUDA_PLUGIN_FILE = "xla_cuda_plugin.so"


class NativeBuildError(BackendUnavailable):
    """A native consumer cannot be built here: the message names what is missing and how to get it."""


def package_dir(module: str) -> Path | None:
    """Directory of an installed package, found without importing it (importing TF takes seconds)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ModuleNotFoundError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


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
    `device` ("cpu" or "gpu").

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
    if device != "cpu":
        raise NativeBuildError(f"Device '{device}' | no PJRT plugin kind for it, expected cpu or gpu")
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
        f"lammps-jax-pjrt-cpu), or name its .so with --plugin or ${PLUGIN_ENV}")


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
        f"jax_plugins/xla_cuda13/{CUDA_PLUGIN_FILE}), or name a .so with --plugin or ${PLUGIN_ENV}"
        + (f"; looked in {', '.join(looked)}" if looked else ""))


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

    A CPU plugin needs nothing. jax's CUDA plugin dlopens the CUDA libraries (cudart, cuBLAS, cuDNN, ...)
    that jax preloads from the NVIDIA wheels before registering it (jax_plugins/xla_cuda13/__init__.py):
    without Python, LD_LIBRARY_PATH names those directories instead, followed by this process's own
    LD_LIBRARY_PATH, which is where a container puts the driver (libcuda.so.1, e.g. /usr/local/nvidia/lib64).
    PATH is passed on too (XLA looks for ptxas there), and CUDA_VISIBLE_DEVICES when set.
    """
    if not is_cuda_plugin(plugin):
        return {}
    inherited = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    env = {"LD_LIBRARY_PATH": os.pathsep.join([*map(str, nvidia_library_dirs()), *inherited]),
           "PATH": os.environ.get("PATH") or "/usr/local/cuda/bin:/usr/bin:/bin"}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return {k: v for k, v in env.items() if v}


def find_tensorflow() -> tuple[Path, Path]:
    """(include dir, library dir) of the tensorflow wheel's C API."""
    tf = package_dir("tensorflow")
    if tf is None:
        raise NativeBuildError("no tensorflow: the TF C API consumer links the tensorflow wheel's "
                               "libtensorflow_cc.so.2; pip install 'multiexport[tf]'")
    for need in (tf / "include" / "tensorflow" / "c" / "c_api.h", tf / "libtensorflow_cc.so.2",
                 tf / "libtensorflow_framework.so.2"):
        if not need.is_file():
            raise NativeBuildError(f"tensorflow at {tf} | no {need.relative_to(tf)}: this wheel lacks the C API")
    return tf / "include", tf


def find_openvino() -> tuple[Path, Path]:
    """(include dir, libopenvino_c) of the openvino wheel's C API."""
    ov = package_dir("openvino")
    if ov is None:
        raise NativeBuildError("no openvino: the OpenVINO C API consumer links the openvino wheel's libopenvino_c; "
                               "pip install 'multiexport[openvino]'")
    header = ov / "include" / "openvino" / "c" / "openvino.h"
    libs = sorted((ov / "libs").glob("libopenvino_c.so*"))
    if not header.is_file() or not libs:
        raise NativeBuildError(f"openvino at {ov} | no include/openvino/c/openvino.h or libs/libopenvino_c.so*: this "
                               "wheel lacks the C API")
    return ov / "include", libs[0]


def find_openvino_cpp() -> tuple[Path, Path]:
    """(include dir, libopenvino) of the openvino wheel's C++ API, for a user's own C++ program
    (examples/cpp/batch_openvino.cpp); the wheel ships libopenvino.so.<version> without the plain name."""
    include, _ = find_openvino()
    libs = sorted((include.parent / "libs").glob("libopenvino.so*"))
    if not (include / "openvino" / "openvino.hpp").is_file() or not libs:
        raise NativeBuildError(f"openvino at {include.parent} | no include/openvino/openvino.hpp or libs/libopenvino.so*: "
                               "this wheel lacks the C++ API")
    return include, libs[0]


def find_onnxruntime() -> tuple[Path | None, Path]:
    """(directory of ORT's own onnxruntime_c_api.h or None: ort_api.h then declares the API, libonnxruntime
    to dlopen). $MULTIEXPORT_ORT_INCLUDE / $MULTIEXPORT_ORT_LIBRARY, when set, must name what they say: no
    silent fallback."""
    include = None
    if os.environ.get(ORT_HEADER_ENV):
        include = Path(os.environ[ORT_HEADER_ENV]).expanduser().resolve()
        if not (include / "onnxruntime_c_api.h").is_file():
            raise NativeBuildError(f"${ORT_HEADER_ENV} '{include}' | holds no onnxruntime_c_api.h, expected the "
                                   "directory that does (the include/ of ONNX Runtime's release package)")
    if os.environ.get(ORT_LIBRARY_ENV):
        library = Path(os.environ[ORT_LIBRARY_ENV]).expanduser().resolve()
        if not library.is_file():
            raise NativeBuildError(f"${ORT_LIBRARY_ENV} '{library}' | no such file, expected libonnxruntime.so")
    else:
        capi = package_dir("onnxruntime")
        found = sorted((capi / "capi").glob("libonnxruntime.so.1*")) if capi else []
        if not found:
            raise NativeBuildError("no libonnxruntime: the ONNX Runtime C API consumer dlopens the onnxruntime wheel's "
                                   "capi/libonnxruntime.so.1.*; pip install 'multiexport[onnx]', or name one with "
                                   f"${ORT_LIBRARY_ENV}")
        library = found[-1]
    if any(c in str(library) for c in '"\\\n'):
        raise NativeBuildError(f"libonnxruntime '{library}' | a path with a quote, backslash or newline, expected a "
                               "plain path (it is compiled into the program as a string)")
    return include, library


def find_litert() -> Path:
    """libLiteRt.so of the ai-edge-litert wheel (its LiteRt* C API; the wheel ships no headers: the program
    declares what it calls in csrc/litert_api.h)."""
    litert = package_dir("ai_edge_litert")
    if litert is None:
        raise NativeBuildError("no ai_edge_litert: the LiteRT C API consumer links the ai-edge-litert wheel's "
                               "libLiteRt.so; pip install 'multiexport[litert]'")
    if not (litert / "libLiteRt.so").is_file():
        raise NativeBuildError(f"ai_edge_litert at {litert} | no libLiteRt.so: this wheel lacks the C API library")
    # litert_api.h is our declaration of a C API whose signatures have changed between releases, and no library
    # call reports its version: a release it was not checked against is unavailable, never called on a guess.
    import importlib.metadata

    try:
        version = importlib.metadata.version("ai-edge-litert")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if not version.startswith(tuple(f"{v}." for v in LITERT_CHECKED)):
        raise NativeBuildError(f"ai-edge-litert {version} | lite_run's declarations (csrc/litert_api.h) are checked "
                               f"against {', '.join(f'{v}.x' for v in LITERT_CHECKED)}, expected one of those: "
                               "its C API's signatures change between releases")
    return litert / "libLiteRt.so"
