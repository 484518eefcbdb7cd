"""Build our native consumers on first use, cached per machine; this module names no format.

Each program is declared by its backend: the consumer whose `program` it is (found through the registry, as
`native.run` finds a backend's consumer) gives its `Recipe`: the language, the main source in the backend's
`csrc/`, the flags of its runtime (headers and libraries from Python packages, never vendored) and the files
whose change forces a rebuild. Here the main source is compiled with the system compiler (g++/gcc, or $CXX/$CC)
together with the shared `csrc/common/` sources, which every program includes as `"common/mx_util.h"`.

A build lands in `<cache>/<hash>/<program>`, the hash covering the sources, the compiler's version, the flags
and the recipe's headers and libraries, so an upgrade of any of them builds anew. The cache is
$MULTIEXPORT_NATIVE_CACHE, else $XDG_CACHE_HOME/multiexport/native, else ~/.cache/multiexport/native.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from ..errors import BackendUnavailable
from ..exporting.native_consumer import NativeConsumer, Recipe
from ..exporting.native_section import consumer_for
from ..exporting.registry import names
from ..system.process import run_command

# Generic helpers every format's runtime lookup uses (runtimes.py); re-exported, since callers build through here.
from .runtimes import NativeBuildError as NativeBuildError, package_dir as package_dir

SOURCE_DIR = Path(__file__).resolve().parent / "csrc"  # the shared sources' root (package data): -I names it
COMMON = ("common/mx_json.c", "common/mx_npy.c", "common/mx_util.c")
COMMON_HEADERS = ("common/mx_json.h", "common/mx_npy.h", "common/mx_util.h", "common/mx_load.h")
COMPILE_TIMEOUT_S = 600
BUNDLE_RPATH = "$ORIGIN/../lib"  # a bundled program's libraries: OUT/bin/PROG finds them in OUT/lib
CORE_OPTIONS = ("sources", "program", "device")  # `main`'s own options, which no backend's can replace


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


def consumers() -> dict[str, NativeConsumer]:
    """Program name -> the consumer that declares it, for every registered backend whose consumer we build
    (`builds`), in registry order; a program two backends name is the first's."""

    found: dict[str, NativeConsumer] = {}
    for backend in names():
        consumer = consumer_for(backend)
        if consumer is not None and consumer.builds:
            found.setdefault(consumer.program, consumer)
    return found


def recipe(program: str) -> Recipe:
    """How `program` is compiled here, from the consumer that declares it; raises NativeBuildError naming what
    is missing (an unknown program, a runtime not installed)."""
    known = consumers()
    if program not in known:
        raise NativeBuildError(f"Program '{program}' | unknown, expected one of {', '.join(known) or 'none'}")
    return known[program].recipe()


def relocatable(chain: Recipe) -> Recipe:
    """The relocatable variant of `chain` a bundle carries: the wheels' rpaths dropped for DT_RPATH
    `$ORIGIN/../lib`, and each library the program dlopens by path (`Recipe.dlopened`) named by file name
    instead, which dlopen then searches for through that DT_RPATH, i.e. the bundle's lib/."""
    flags = []
    for flag in chain.flags:
        if flag.startswith("-Wl,-rpath,"):
            continue
        name, _, value = flag[2:].partition("=")
        if flag.startswith("-D") and name in chain.dlopened:
            flag = f'-D{name}="{Path(value.strip(chr(34))).name}"'
        flags.append(flag)
    return replace(chain, flags=(*flags, "-Wl,--disable-new-dtags", f"-Wl,-rpath,{BUNDLE_RPATH}"))


def _key(program: str, chain: Recipe, compiler: str) -> str:
    digest = hashlib.sha256(program.encode())
    for path in [chain.main, *(SOURCE_DIR / c for c in (*COMMON, *COMMON_HEADERS))]:
        digest.update(path.read_bytes())
    version = run_command([compiler, "--version"], timeout=60).stdout
    digest.update(version.encode())
    digest.update(" ".join([chain.language, *chain.flags]).encode())
    for path in chain.inputs:  # a library is identified by size and mtime: hashing 300 MB on each call costs seconds
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def build(program: str, *, force: bool = False, bundled: bool = False) -> Path:
    """Path of the compiled `program` (a registered consumer's `program`), compiling it first if this machine
    has none.

    bundled: the relocatable copy a bundle carries (`native/bundle.py`, see `relocatable`): its libraries are found
    through DT_RPATH `$ORIGIN/../lib` instead of the wheels' directories. DT_RPATH rather than DT_RUNPATH: the
    loader also applies an executable's DT_RPATH to the dependencies of every object that has no RUNPATH
    of its own (a dlopened plugin), where DT_RUNPATH serves the executable's direct needs alone.
    """
    chain = recipe(program)
    if bundled:  # the flags are hashed into the key: this copy is cached beside the ordinary one
        chain = relocatable(chain)
    compiler = find_compiler(chain.language)
    target = cache_root() / _key(program, chain, compiler) / program
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        objects = []
        # The shared C files are compiled as C even for a C++ program (they are C99).
        cc = find_compiler("c")
        for source in (SOURCE_DIR / c for c in COMMON):
            obj = Path(work) / (source.stem + ".o")
            _compile([cc, "-std=c99", "-O2", "-c", str(source), "-o", str(obj)], program)
            objects.append(str(obj))
        tmp = Path(work) / program
        compile_flags = [f for f in chain.flags if not f.startswith(("-l", "-L", "-Wl"))]
        link_flags = [f for f in chain.flags if f.startswith(("-l", "-L", "-Wl"))]
        # The main source finds its own headers beside it (quoted includes) and the shared ones as "common/...".
        _compile([compiler, "-O2", *compile_flags, f"-I{SOURCE_DIR}", str(chain.main), *objects, *link_flags,
                  "-o", str(tmp)], program)
        os.replace(tmp, target)  # atomic: a concurrent build of the same key leaves one complete binary
    return target


def _compile(command: list[str], program: str) -> None:
    outcome = run_command(command, timeout=COMPILE_TIMEOUT_S)
    if outcome.returncode != 0:
        raise NativeBuildError(f"Program '{program}' | compiling {outcome.how_it_ended()} ({' '.join(command[:2])} "
                               f"...): {(outcome.stderr or outcome.stdout)[-4000:]}")


def user_options() -> dict[str, tuple[NativeConsumer, str]]:
    """The options of `main` the registered consumers answer (`NativeConsumer.user_options`): name -> (consumer,
    help), the first backend in registry order keeping a name two offer."""

    found: dict[str, tuple[NativeConsumer, str]] = {}
    for backend in names():
        consumer = consumer_for(backend)
        if consumer is None:
            continue
        for option, text in consumer.user_options().items():
            if option not in CORE_OPTIONS:
                found.setdefault(option, (consumer, text))
    return found


def main(argv: list[str] | None = None) -> int:
    """`python -m multiexport.native.build --sources|--program NAME|--OPTION`: what a user's own C/C++ build
    needs (examples/cpp/Makefile uses it), one answer per line. --sources and --program are the core's; every
    other option is a backend's (`NativeConsumer.user_options`: e.g. include flags of its runtime's headers)."""
    import argparse
    import sys

    offered = user_options()
    parser = argparse.ArgumentParser(prog="python -m multiexport.native.build", description=main.__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--sources", action="store_true", help="the shared C sources (JSON, .npy, manifest helpers)")
    for option, (_, text) in offered.items():
        group.add_argument(f"--{option}", action="store_true", help=text)
    group.add_argument("--program", choices=list(consumers()),
                       help="build (if needed) and print the path of a native program")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="the device an answer is for, where it depends on one (default: cpu)")
    args = parser.parse_args(argv)
    try:
        if args.sources:
            print(" ".join(str(SOURCE_DIR / c) for c in COMMON))
        elif args.program:
            print(build(args.program))
        else:
            option = next(o for o in offered if getattr(args, o.replace("-", "_")))
            print(offered[option][0].user_answer(option, SOURCE_DIR, args.device))
    except BackendUnavailable as exc:  # NativeBuildError, or a consumer without a recipe
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
