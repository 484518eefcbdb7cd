"""Build the native consumers in `csrc/` on first use, cached per machine.

Each program is compiled with the system compiler (g++/gcc, or $CXX/$CC) against headers and libraries
that come from Python packages, never vendored:

- `pjrt_run` (C++): `pjrt_c_api.h` from the xla-cpu-pjrt wheel (`xla_plugins/xla_cpu_pjrt/include`) or
  the tensorflow wheel (`tensorflow/include/xla/pjrt/c`). The PJRT plugin is not linked: the program
  dlopens the one it is given (`find_pjrt_plugin`), so one build serves every plugin of API major 0.
- `tf_run` (C): the TF C API headers and `libtensorflow_cc.so.2` / `libtensorflow_framework.so.2` of the
  tensorflow wheel, linked with an rpath to the wheel so the program runs under `env -i`.

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
from ..run.supervisor import run_command

SOURCE_DIR = Path(__file__).resolve().parent / "csrc"  # package data: a wheel carries the sources
COMMON = ("common/mx_json.c", "common/mx_npy.c", "common/mx_util.c")
COMMON_HEADERS = ("common/mx_json.h", "common/mx_npy.h", "common/mx_util.h")
PROGRAMS = ("pjrt_run", "tf_run")
PLUGIN_ENV = "MULTIEXPORT_PJRT_PLUGIN"
COMPILE_TIMEOUT_S = 600


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
    """The directory holding `pjrt_c_api.h`: the xla-cpu-pjrt wheel's, else the tensorflow wheel's."""
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


def find_pjrt_plugin(explicit: str | os.PathLike | None = None) -> Path:
    """The PJRT CPU plugin to dlopen: `explicit`, else $MULTIEXPORT_PJRT_PLUGIN, else an installed one.

    Installed plugins, best first: lammps-jax-pjrt-cpu (built from the XLA of jaxlib 0.11.2: measured
    bit-equal to JAX 0.10.2 on the MLP), then xla-cpu-pjrt 0.0.1 (an older XLA: its dots differ from
    jaxlib 0.10.2's in the last bit, since jaxlib fuses them into YNNPACK by default).
    """
    if explicit or os.environ.get(PLUGIN_ENV):
        path = Path(explicit or os.environ[PLUGIN_ENV]).expanduser().resolve()
        if not path.is_file():
            raise NativeBuildError(f"PJRT plugin '{path}' | no such file")
        return path
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


def build(program: str, *, force: bool = False) -> Path:
    """Path of the compiled `program` ('pjrt_run' or 'tf_run'), compiling it first if this machine has none."""
    chain = toolchain(program)
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
    """`python -m multiexport.native.build --cflags|--sources|--plugin|--program NAME`: what a user's own
    C/C++ build needs (examples/cpp/Makefile uses it), one answer per line."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m multiexport.native.build", description=main.__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cflags", action="store_true", help="include flags: the shared C sources and pjrt_c_api.h")
    group.add_argument("--sources", action="store_true", help="the shared C sources (JSON, .npy, manifest helpers)")
    group.add_argument("--plugin", action="store_true", help="the installed PJRT CPU plugin to dlopen")
    group.add_argument("--program", choices=PROGRAMS, help="build (if needed) and print the path of a native program")
    args = parser.parse_args(argv)
    try:
        if args.cflags:
            print(f"-I{SOURCE_DIR} -I{find_pjrt_header()}")
        elif args.sources:
            print(" ".join(str(SOURCE_DIR / c) for c in COMMON))
        elif args.plugin:
            print(find_pjrt_plugin())
        else:
            print(build(args.program))
    except NativeBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
