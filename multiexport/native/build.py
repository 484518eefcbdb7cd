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
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..system.process import run_command

# Where each runtime is (runtimes.py); re-exported, since callers build and locate through this module.
from .runtimes import (
    CUDA_PLUGIN_FILE as CUDA_PLUGIN_FILE,
    CUDA_PLUGIN_PACKAGES as CUDA_PLUGIN_PACKAGES,
    HEADER_ENV as HEADER_ENV,
    ORT_DECLARATION as ORT_DECLARATION,
    ORT_HEADER_ENV as ORT_HEADER_ENV,
    ORT_LIBRARY_ENV as ORT_LIBRARY_ENV,
    PLUGIN_ENV as PLUGIN_ENV,
    NativeBuildError as NativeBuildError,
    find_cuda_plugin as find_cuda_plugin,
    find_litert as find_litert,
    find_onnxruntime as find_onnxruntime,
    find_openvino as find_openvino,
    find_openvino_cpp as find_openvino_cpp,
    find_pjrt_header as find_pjrt_header,
    find_pjrt_plugin as find_pjrt_plugin,
    find_tensorflow as find_tensorflow,
    is_cuda_plugin as is_cuda_plugin,
    nvidia_library_dirs as nvidia_library_dirs,
    package_dir as package_dir,
    plugin_environment as plugin_environment,
)

SOURCE_DIR = Path(__file__).resolve().parent / "csrc"  # package data: a wheel carries the sources
COMMON = ("common/mx_json.c", "common/mx_npy.c", "common/mx_util.c")
COMMON_HEADERS = ("common/mx_json.h", "common/mx_npy.h", "common/mx_util.h")
PROGRAMS = ("pjrt_run", "tf_run", "ov_run", "ort_run", "lite_run")
# jax's CUDA PJRT plugins, newest CUDA first: the package `jax-cudaNN-pjrt` installs jax_plugins/xla_cudaNN/.
COMPILE_TIMEOUT_S = 600
BUNDLE_RPATH = "$ORIGIN/../lib"  # a bundled program's libraries: OUT/bin/PROG finds them in OUT/lib


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
