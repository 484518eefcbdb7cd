"""Build the native consumers in `csrc/` on first use, cached per machine.

Each program is compiled with the system compiler (g++/gcc, or $CXX/$CC) against headers and libraries
that come from Python packages, never vendored:

- `pjrt_run` (C++): `pjrt_c_api.h` from $MULTIEXPORT_PJRT_INCLUDE (a directory holding it, for a machine
  with neither wheel, e.g. one with only JAX and its CUDA plugin), the xla-cpu-pjrt wheel
  (`xla_plugins/xla_cpu_pjrt/include`) or the tensorflow wheel (`tensorflow/include/xla/pjrt/c`). The PJRT
  plugin is not linked: the program dlopens the one it is given (`find_pjrt_plugin`: a CPU plugin, or the
  CUDA plugin of jax's `jax-cuda*-pjrt` package), so one build serves every plugin of API major 0.
- `ov_run` (C): OpenVINO's C API headers (`openvino/include`) and `libopenvino_c` of the openvino wheel,
  linked with an rpath to the wheel's `openvino/libs`.
- `tf_run` (C): the TF C API headers and `libtensorflow_cc.so.2` / `libtensorflow_framework.so.2` of the
  tensorflow wheel, linked with an rpath to the wheel so the program runs under `env -i`.
- `ort_run` (C): ONNX Runtime's C API, declared by `csrc/ort_api.h` (no package here ships ORT's headers),
  or ORT's own `onnxruntime_c_api.h` from $MULTIEXPORT_ORT_INCLUDE (a directory holding it, e.g. the
  `include/` of ORT's release package). The library is dlopened by absolute path: $MULTIEXPORT_ORT_LIBRARY,
  else the onnxruntime wheel's `capi/libonnxruntime.so.1.*` (which the wheel ships without the
  `libonnxruntime.so.1` name its soname asks for, so it cannot be linked and found by soname).

A build lands in `<cache>/<hash>/<program>`, the hash covering the sources, the compiler's version and
the headers and libraries used, so an upgrade of any of them builds anew. The cache is
$MULTIEXPORT_NATIVE_CACHE, else $XDG_CACHE_HOME/multiexport/native, else ~/.cache/multiexport/native.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BackendUnavailable
from ..system.process import run_command

SOURCE_DIR = Path(__file__).resolve().parent / "csrc"  # package data: a wheel carries the sources
COMMON = ("common/mx_json.c", "common/mx_npy.c", "common/mx_util.c")
COMMON_HEADERS = ("common/mx_json.h", "common/mx_npy.h", "common/mx_util.h")
PROGRAMS = ("pjrt_run", "tf_run", "ov_run", "ort_run", "lite_run")
PLUGIN_ENV = "MULTIEXPORT_PJRT_PLUGIN"
HEADER_ENV = "MULTIEXPORT_PJRT_INCLUDE"
ORT_HEADER_ENV, ORT_LIBRARY_ENV = "MULTIEXPORT_ORT_INCLUDE", "MULTIEXPORT_ORT_LIBRARY"
ORT_DECLARATION = "ort_api.h"  # multiexport's declaration of the ORT C API that ort_run calls
# jax's CUDA PJRT plugins, newest CUDA first: the package `jax-cudaNN-pjrt` installs jax_plugins/xla_cudaNN/.
CUDA_PLUGIN_PACKAGES = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")
CUDA_PLUGIN_FILE = "xla_cuda_plugin.so"
COMPILE_TIMEOUT_S = 600
BUNDLE_RPATH = "$ORIGIN/../lib"  # a bundled program's libraries: OUT/bin/PROG finds them in OUT/lib


class NativeBuildError(BackendUnavailable):
    """A native consumer cannot be built here: the message names what is missing and how to get it."""


@dataclass(frozen=True)
class Toolchain:
    """What one program is built from: compiler, flags, and the files whose change forces a rebuild."""

    compiler: str
    flags: list[str]
    inputs: list[Path] = field(default_factory=list)  # headers and libraries hashed into the cache key


def cache_root() -> Path:
    if os.environ.get("MULTIEXPORT_NATIVE_CACHE"):
        return Path(os.environ["MULTIEXPORT_NATIVE_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "multiexport" / "native"


def find_compiler(language: str) -> str:
    """Path of the C ('c') or C++ ('c++') compiler: $CC/$CXX, else gcc/cc/clang, g++/c++/clang++ on PATH."""
    env, names = ("CXX", ("g++", "c++", "clang++")) if language == "c++" else ("CC", ("gcc", "cc", "clang"))
    for name in ([os.environ[env]] if os.environ.get(env) else []) + list(names):
        found = shutil.which(name)
        if found:
            return found
    raise NativeBuildError(
        f"no {language.upper()} compiler: none of {', '.join(names)} is on PATH (and ${env} is unset); "
        f"install one, e.g. `apt-get install {'g++' if language == 'c++' else 'gcc'}`")


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
    return litert / "libLiteRt.so"


def toolchain(program: str) -> Toolchain:
    """How `program` is compiled here; raises NativeBuildError naming what is missing."""
    if program == "pjrt_run":
        header = find_pjrt_header()
        return Toolchain(find_compiler("c++"), ["-std=c++17", f"-I{header}", "-ldl"], [header / "pjrt_c_api.h"])
    if program == "tf_run":
        include, lib = find_tensorflow()
        return Toolchain(find_compiler("c"), [
            "-std=c99", f"-I{include}", f"-L{lib}", "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
            f"-Wl,-rpath,{lib}"], [include / "tensorflow" / "c" / "c_api.h", lib / "libtensorflow_cc.so.2"])
    if program == "ov_run":
        include, lib = find_openvino()
        return Toolchain(find_compiler("c"), ["-std=c99", f"-I{include}", f"-l:{lib.name}", f"-L{lib.parent}",
                                              f"-Wl,-rpath,{lib.parent}"], [include / "openvino" / "c" / "openvino.h", lib])
    if program == "ort_run":
        ort_include, ort_library = find_onnxruntime()
        real = [f"-I{ort_include}", "-DMX_ORT_REAL_HEADER"] if ort_include else []
        return Toolchain(find_compiler("c"), ["-std=c11", *real, f'-DMX_ORT_LIBRARY="{ort_library}"', "-ldl"],
                         [ort_include / "onnxruntime_c_api.h" if ort_include else SOURCE_DIR / ORT_DECLARATION,
                          ort_library])
    if program == "lite_run":
        lib = find_litert()
        # C11: litert_api.h checks LiteRT's documented struct sizes with _Static_assert
        return Toolchain(find_compiler("c"), ["-std=c11", f"-L{lib.parent}", "-l:libLiteRt.so",
                                              f"-Wl,-rpath,{lib.parent}"], [SOURCE_DIR / "litert_api.h", lib])
    raise NativeBuildError(f"Program '{program}' | unknown, expected one of {', '.join(PROGRAMS)}")


def _sources(program: str) -> list[Path]:
    main = SOURCE_DIR / (f"{program}.cc" if program == "pjrt_run" else f"{program}.c")
    return [main, *(SOURCE_DIR / c for c in COMMON)]


def _key(program: str, chain: Toolchain) -> str:
    digest = hashlib.sha256(program.encode())
    for path in [*_sources(program), *(SOURCE_DIR / h for h in COMMON_HEADERS)]:
        digest.update(path.read_bytes())
    version = run_command([chain.compiler, "--version"], timeout=60).stdout
    digest.update(version.encode())
    digest.update(" ".join(chain.flags).encode())
    for path in chain.inputs:  # a library is identified by size and mtime: hashing 300 MB on each call costs seconds
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def build(program: str, *, force: bool = False, bundled: bool = False) -> Path:
    """Path of the compiled `program` (one of PROGRAMS), compiling it first if this machine has none.

    bundled: the relocatable copy a bundle carries (`native/bundle.py`): its libraries are found through
    DT_RPATH `$ORIGIN/../lib` instead of the wheels' directories. DT_RPATH rather than DT_RUNPATH: the
    loader also applies an executable's DT_RPATH to the dependencies of every object that has no RUNPATH
    of its own (a dlopened PJRT plugin), where DT_RUNPATH serves the executable's direct needs alone.
    """
    chain = toolchain(program)
    if bundled:  # the flags are hashed into the key: this copy is cached beside the ordinary one
        # A library the program dlopens by absolute path (ort_run's libonnxruntime) is named by file name instead:
        # dlopen then searches the program's DT_RPATH, i.e. the bundle's lib/.
        flags = [f'-DMX_ORT_LIBRARY="{Path(f.split("=", 1)[1].strip(chr(34))).name}"'
                 if f.startswith("-DMX_ORT_LIBRARY=") else f for f in chain.flags if not f.startswith("-Wl,-rpath,")]
        chain = Toolchain(chain.compiler, flags + ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{BUNDLE_RPATH}"],
                          chain.inputs)
    target = cache_root() / _key(program, chain) / program
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        objects = []
        # The shared C files are compiled as C even for the C++ program (they are C99).
        cc = find_compiler("c")
        for source in (SOURCE_DIR / c for c in COMMON):
            obj = Path(work) / (source.stem + ".o")
            _compile([cc, "-std=c99", "-O2", "-c", str(source), "-o", str(obj)], program)
            objects.append(str(obj))
        main = _sources(program)[0]
        tmp = Path(work) / program
        compile_flags = [f for f in chain.flags if not f.startswith(("-l", "-L", "-Wl"))]
        link_flags = [f for f in chain.flags if f.startswith(("-l", "-L", "-Wl"))]
        _compile([chain.compiler, "-O2", *compile_flags, f"-I{SOURCE_DIR}", str(main), *objects, *link_flags,
                  "-o", str(tmp)], program)
        os.replace(tmp, target)  # atomic: a concurrent build of the same key leaves one complete binary
    return target


def _compile(command: list[str], program: str) -> None:
    outcome = run_command(command, timeout=COMPILE_TIMEOUT_S)
    if outcome.returncode != 0:
        raise NativeBuildError(f"Program '{program}' | compiling {outcome.how_it_ended()} ({' '.join(command[:2])} "
                               f"...): {(outcome.stderr or outcome.stdout)[-4000:]}")


def main(argv: list[str] | None = None) -> int:
    """`python -m multiexport.native.build --cflags|--sources|--plugin|--openvino-cflags|--openvino-libs|--program
    NAME`: what a user's own C/C++ build needs (examples/cpp/Makefile uses it), one answer per line."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m multiexport.native.build", description=main.__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cflags", action="store_true", help="include flags: the shared C sources and pjrt_c_api.h")
    group.add_argument("--sources", action="store_true", help="the shared C sources (JSON, .npy, manifest helpers)")
    group.add_argument("--plugin", action="store_true", help="the installed PJRT plugin to dlopen (see --device)")
    group.add_argument("--openvino-cflags", action="store_true",
                       help="include flags for a C++ program on OpenVINO's C++ API: the shared C sources, openvino.hpp")
    group.add_argument("--openvino-libs", action="store_true",
                       help="link flags for it: the openvino wheel's libopenvino, with an rpath to the wheel's libs")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="with --plugin: the CPU plugin (default) or jax's CUDA plugin")
    group.add_argument("--program", choices=PROGRAMS, help="build (if needed) and print the path of a native program")
    args = parser.parse_args(argv)
    try:
        if args.cflags:
            print(f"-I{SOURCE_DIR} -I{find_pjrt_header()}")
        elif args.sources:
            print(" ".join(str(SOURCE_DIR / c) for c in COMMON))
        elif args.plugin:
            print(find_pjrt_plugin(device=args.device))
        elif args.openvino_cflags:
            print(f"-I{SOURCE_DIR} -I{find_openvino_cpp()[0]}")
        elif args.openvino_libs:
            library = find_openvino_cpp()[1]
            print(f"{library} -Wl,-rpath,{library.parent}")
        else:
            print(build(args.program))
    except NativeBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
