"""Relocatable bundles: one folder a C/C++ deployer copies to a server and runs there, with no Python and no venv.

`bundle(DIR, OUT)` (`multiexport native DIR --bundle OUT`) writes:

    OUT/run.sh        one line: cd "$(dirname "$0")/artifact" && exec ../bin/PROG ARGS "$@" (after the runtime's
                      defaults from this machine, e.g. libtpu's TPU_* topology, each kept if the server sets it)
    OUT/bin/          the consumer: our own program rebuilt with DT_RPATH $ORIGIN/../lib, or a prebuilt tool
    OUT/lib/          every library the program and its runtime load that comes from outside the system's library
                      directories, flat, under the name the loader asks for (a PJRT plugin, OpenVINO's device
                      plugin and frontend, TF's libraries, ...)
    OUT/artifact/     manifest.json and every file of the manifest's inventory, each checked against its sha256
    OUT/bundle.json   where each file came from, what the server must provide, what was rewritten

Which libraries: the loader's own view. `ldd` (run with an empty environment) on the program and on each file the
runtime dlopens, which no ldd of the program shows: each consumer declares those (its backend's
`NativeConsumer.bundle_runtime`: the PJRT plugin, OpenVINO's CPU plugin, its auto-batch plugin, the frontend of the
model's format and TBB's own dlopened helpers, found by running `ov_run` under LD_DEBUG=files).
A library is the server's to provide when the loader found it in
the system's own directories (the defaults and those of `ldconfig -p`): glibc (never bundled, wherever it was
found: it must match the server's loader), libstdc++ and libgcc_s, a GPU driver's libraries. They are listed in
bundle.json with the newest symbol versions the bundle needs of them (`requires`: GLIBC_2.34, GLIBCXX_3.4.22, ...),
so a deployer checks a server once; every wheel here needs less of libstdc++ than any glibc >= 2.34 system ships.
Everything else (the venv's site-packages, our cache) is copied into OUT/lib.

How they are found: our programs carry DT_RPATH `$ORIGIN/../lib`; a bundled library's own RUNPATH must stay inside
OUT/lib, so one that names anything else (libtensorflow_cc.so.2 names `$ORIGIN/../../_solib_x86_64/...`, which in
a bundle points next to OUT) gets `$ORIGIN` written over that string in place (`loader.rewrite_search_path`: the string is
never shared with a symbol or another name, which is checked; no patchelf here). A prebuilt tool (IREE's) must need
nothing from OUT/lib, since nothing can add a search path to it.

Proof, before OUT appears: `ldd` on every ELF file of the bundle resolves only into OUT/lib and the system's
directories, and the bundle runs once on the artifact's example inputs under `env -i LD_DEBUG=libs,files`, every
object the loader mapped being inside the bundle or the system's directories. The bundle is built in a hidden
sibling of OUT and renamed into place, so a failure leaves nothing at OUT.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ArtifactError, RunError, UsageError
from ..exporting.manifest import Manifest
from ..exporting.native_consumer import NativeConsumer, Program, Request
from ..exporting.native_section import CONSUMERS, consumer_for
from ..exporting.registry import get_backend, names
from ..files.atomic import current_umask
from ..files.owned import sha256_file
from ..system.process import run_command
from .build import BUNDLE_RPATH, build
from .loader import LDD_TIMEOUT_S, Elf, in_dirs, ldd, loaded_objects, rewrite_search_path, system_dirs
from .run import check_artifact, check_timeout

SCHEMA = "multiexport.bundle/1"
# glibc's own libraries: they must come from the server, matching its loader, whatever directory they came from here.
GLIBC = re.compile(r"^(ld-linux[^/]*|linux-vdso\.so.*|linux-gate\.so.*|lib(c|m|dl|pthread|rt|resolv|util|anl|nsl|mvec|"
                   r"BrokenLocale|thread_db|nss_[a-z]+)\.so(\.[0-9]+)*)$")


@dataclass(frozen=True)
class Bundle:
    """A written bundle. files: path relative to OUT -> bytes; system: library name -> where the loader found it
    here (the server provides it); requires: symbol family -> newest version needed of the system (GLIBC: 2.34).
    rewritten: file -> the search path written over. how: a static bundle's instructions (empty for a program's)."""

    directory: Path
    backend: str
    files: dict[str, int]
    system: dict[str, str] = field(default_factory=dict)
    requires: dict[str, str] = field(default_factory=dict)
    rewritten: dict[str, str] = field(default_factory=dict)
    how: str = ""  # a static bundle's (a page's) instructions; empty: a program's, run by run.sh

    @property
    def size(self) -> int:
        return sum(self.files.values())

    def largest(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(self.files.items(), key=lambda kv: -kv[1])[:n]

    def summary(self) -> str:
        """One line for the command line: where, how big, what dominates, what the server must provide."""
        big = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in self.largest(2))
        if self.how:
            return (f"wrote bundle {self.directory}: {self.size / 2**20:.1f} MiB in {len(self.files)} files (largest: "
                    f"{big}); {self.how}")
        needs = ", ".join(f"{family} >= {version}" for family, version in self.requires.items())
        return (f"wrote bundle {self.directory}: {self.size / 2**20:.1f} MiB in {len(self.files)} files (largest: "
                f"{big}); run it from anywhere: {self.directory / 'run.sh'}; the server provides "
                f"{', '.join(self.system) or 'nothing'} ({needs or 'no versioned symbols'})")


def bundle(artifact_dir: str | os.PathLike, out: str | os.PathLike, *, plugin: str | os.PathLike | None = None,
           trust_artifact: bool = False, timeout: float = LDD_TIMEOUT_S) -> Bundle:
    """Write the relocatable bundle of `artifact_dir` to `out` (a new or empty directory), proven before it appears.

    timeout: seconds the proving run of run.sh may take; past them it is stopped with everything it started."""

    check_timeout(timeout)
    directory = Path(artifact_dir).resolve()
    target = Path(out).absolute()
    _check_out(target, directory)
    static = _static_bundler(directory, trust_artifact)
    if static is not None:
        return _static_bundle(directory, target, *static, timeout)
    manifest, native = check_artifact(directory, trust_artifact)
    consumer = consumer_for(manifest.backend)
    if consumer is None:  # check_artifact refused it already: kept for a consumer that vanished meanwhile
        raise ArtifactError(f"Artifact '{directory}' | backend '{manifest.backend}' has no bundle here, expected one "
                            f"of {', '.join(CONSUMERS)}")
    request = Request(manifest, native, Path(plugin) if plugin else None)
    programs = [Program(build(consumer.program, bundled=True), build(consumer.program))] if consumer.builds \
        else consumer.bundle_programs(request)  # ours: the bundled build, seen through the ordinary one
    runtime = consumer.bundle_runtime(request)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        staging.chmod(0o777 & ~current_umask())  # mkdtemp's 0700 would make OUT unreadable to the deployer's others
        made = _write(staging, directory, manifest, consumer, request, programs, runtime)
        _prove(staging, made, timeout)
        _check_out(target, directory)  # still new or empty: rename() replaces an empty directory, nothing else
        try:
            os.replace(staging, target)
        except OSError as exc:  # filled meanwhile (a concurrent bundle): refused as if found so
            raise UsageError(f"Option '--bundle' | '{target}' exists and is not an empty directory ({exc.strerror}), "
                             "expected a new or empty one; nothing was changed") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Bundle(target, manifest.backend, made["files"], made["system"], made["requires"], made["rewritten"])


def _static_bundler(directory: Path, trust_artifact: bool) -> tuple[Manifest, Any] | None:
    """(manifest, hook) when the artifact's backend bundles as a static folder (`static_bundle`), else None."""
    manifest = Manifest.read(directory)
    if manifest.backend not in names():
        return None
    backend = get_backend(manifest.backend)
    hook = getattr(backend, "static_bundle", None)
    if hook is None:
        return None
    if not trust_artifact:
        backend.check_untrusted(directory, manifest)
    return manifest, hook


def _static_bundle(directory: Path, target: Path, manifest: Manifest, hook: Any, timeout: float) -> Bundle:
    """The page's bundle: OUT/model/ (the artifact, each file checked), what the backend's hook writes beside it,
    proven by the hook in a browser, built in a hidden sibling and renamed into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        staging.chmod(0o777 & ~current_umask())
        _copy_artifact(directory, manifest, staging / "model")
        record = dict(hook(directory, manifest, staging, timeout))
        files = {str(p.relative_to(staging)): p.stat().st_size for p in sorted(staging.rglob("*")) if p.is_file()}
        data = {"schema": SCHEMA, "backend": manifest.backend, "kind": "static", **record,
                "sha256": {rel: sha256_file(staging / rel) for rel in files}, "bytes": sum(files.values())}
        (staging / "bundle.json").write_text(json.dumps(data, indent=1) + "\n")
        files["bundle.json"] = (staging / "bundle.json").stat().st_size
        _check_out(target, directory)
        try:
            os.replace(staging, target)
        except OSError as exc:
            raise UsageError(f"Option '--bundle' | '{target}' exists and is not an empty directory ({exc.strerror}), "
                             "expected a new or empty one; nothing was changed") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Bundle(target, manifest.backend, files, how=str(record.get("how", "")))


def _check_out(target: Path, artifact: Path) -> None:
    resolved = target.resolve()
    if resolved == artifact or artifact in resolved.parents:
        raise UsageError(f"Option '--bundle' | '{target}' is inside the artifact '{artifact}', expected a place outside "
                         "it (the bundle holds a copy of the artifact)")
    if os.path.lexists(target) and (target.is_symlink() or not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"Option '--bundle' | '{target}' exists and is not an empty directory, expected a new or empty "
                         "one; nothing was changed")


def _write(root: Path, artifact: Path, manifest: Manifest, consumer: NativeConsumer, request: Request,
           programs: list[Program], runtime: list[Path]) -> dict[str, Any]:
    known = system_dirs()
    bundled: dict[str, Path] = {}  # name in lib/ -> source
    system: dict[str, str] = {}
    why: dict[str, str] = {}

    def take(name: str, source: Path, reason: str) -> None:
        if GLIBC.match(name) or in_dirs(source, known):
            system.setdefault(name, str(source))
            return
        if name in bundled and bundled[name].resolve() != source.resolve():
            raise ArtifactError(f"Library '{name}' | found both at {bundled[name]} and {source}, expected one")
        if name not in bundled:
            bundled[name], why[name] = source, reason

    for program in programs:
        for name, path in ldd(program.seen_from):
            take(name, path, f"needed by bin/{program.copy.name}")
    for path in runtime:
        take(path.name, path, "loaded at run time")
        for name, dep in ldd(path):
            take(name, dep, f"needed by lib/{path.name}")
    (root / "bin").mkdir()
    (root / "lib").mkdir()
    sources: dict[str, str] = {}
    for program in programs:
        shutil.copy2(program.copy.resolve(), root / "bin" / program.copy.name)
        sources[f"bin/{program.copy.name}"] = str(program.copy)
    for name, source in sorted(bundled.items()):
        shutil.copy2(source.resolve(), root / "lib" / name)
        sources[f"lib/{name}"] = f"{source} ({why[name]})"
    rewritten = {}
    for rel in sorted(sources):
        wanted = "$ORIGIN" if rel.startswith("lib/") else BUNDLE_RPATH
        old = rewrite_search_path(root / rel, wanted)
        if old is not None:
            rewritten[rel] = f"{old} -> {wanted}"
    _copy_artifact(artifact, manifest, root / "artifact")
    _write_run_sh(root, consumer, request, programs[0].copy.name)
    requires = _requires([root / rel for rel in sources], set(bundled))
    files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
    record = {"schema": SCHEMA, "backend": manifest.backend, "run": "run.sh", "program": f"bin/{programs[0].copy.name}",
              "sources": sources, "system_libraries": dict(sorted(system.items())), "requires": requires,
              "rewritten_search_paths": rewritten, "bytes": sum(files.values()),
              "rule": ("lib/ holds every library loaded from outside the system's library directories; the server "
                       "provides system_libraries (glibc never bundled), needing at least the versions in requires")}
    (root / "bundle.json").write_text(json.dumps(record, indent=1) + "\n")
    files["bundle.json"] = (root / "bundle.json").stat().st_size
    return {"files": files, "system": record["system_libraries"], "requires": requires, "rewritten": rewritten}


def _copy_artifact(artifact: Path, manifest: Manifest, to: Path) -> None:
    """manifest.json and every file of the inventory, each proven by its recorded sha256 (an edited file is refused)."""
    to.mkdir()
    shutil.copy2(artifact / "manifest.json", to / "manifest.json")
    for rel in sorted(manifest.inventory):
        source, dest = artifact / rel, to / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest, follow_symlinks=False)
        want = manifest.inventory_sha256.get(rel)
        if dest.is_symlink() or (want is not None and sha256_file(dest) != want) \
                or dest.stat().st_size != manifest.inventory[rel]:
            raise ArtifactError(f"Artifact file '{rel}' | differs from the manifest's inventory, expected the file the "
                                "export wrote (edited since?)")


def _write_run_sh(root: Path, consumer: NativeConsumer, request: Request, program: str) -> None:
    env = "".join(f"{k}={shlex.quote(v)} " for k, v in consumer.env)
    mkdir = "mkdir -p outputs && " if consumer.mkdir_outputs else ""
    argv = shlex.join([f"../bin/{program}", *consumer.bundle_argv(request)])
    line = f'cd "$(dirname "$0")/artifact" && {mkdir}{env}exec {argv} "$@"'
    # A runtime's defaults from this machine (libtpu's TPU_* topology), each kept when the server sets its own.
    defaults: dict[str, str] = getattr(consumer, "bundle_environment", lambda _request: {})(request)
    preset = "".join(f'[ -n "${{{k}+set}}" ] || {k}={shlex.quote(v)}; export {k}\n' for k, v in defaults.items()
                     if re.fullmatch(r"[A-Z_][A-Z0-9_]*", k))
    (root / "run.sh").write_text(f"#!/bin/sh\n{preset}{line}\n")
    (root / "run.sh").chmod(0o755)


def _requires(files: list[Path], bundled: set[str]) -> dict[str, str]:
    """Newest version of each symbol family (GLIBC, GLIBCXX, CXXABI, GCC, ...) the files need of the system."""
    newest: dict[str, tuple[tuple[int, ...], str]] = {}
    for path in files:
        elf = Elf.read(path)
        if elf is None:
            continue
        for library, versions in elf.version_needs().items():
            if library in bundled:
                continue
            for version in versions:
                family, _, number = version.rpartition("_")
                try:
                    key = tuple(int(x) for x in number.split("."))
                except ValueError:
                    continue
                if family and (family not in newest or key > newest[family][0]):
                    newest[family] = (key, number)
    return {family: number for family, (_, number) in sorted(newest.items())}


def _prove(root: Path, made: Mapping[str, Any], timeout: float = LDD_TIMEOUT_S) -> None:
    """ldd on every ELF file, then one run under env -i: nothing may come from outside the bundle and the system."""
    known = system_dirs()
    root = root.resolve()

    def allowed(path: Path) -> bool:
        return root in path.resolve().parents or in_dirs(path, known)

    lib_names = {p.name for p in (root / "lib").iterdir()}
    for rel in made["files"]:
        path = root / rel
        elf = Elf.read(path) if rel.startswith(("bin/", "lib/")) else None
        if elf is None:
            continue
        outcome = run_command(["ldd", str(path)], timeout=LDD_TIMEOUT_S, env={})
        if outcome.returncode != 0:
            raise ArtifactError(f"Bundle file '{rel}' | ldd {outcome.how_it_ended()}: {outcome.stderr.strip()[-500:]}")
        for line in outcome.stdout.splitlines():
            name, _, where = (s.strip() for s in line.strip().partition("=>"))
            if where.startswith("not found"):
                # An object without RUNPATH of its own is served at run time by the program's DT_RPATH, which ldd
                # of the object alone does not apply.
                if name in lib_names and not elf.search_paths():
                    continue
                raise ArtifactError(f"Bundle file '{rel}' | needs {name}, which the loader does not find from the "
                                    "bundle or the system, expected it in lib/")
            where = where.split(" (0x")[0].strip()
            if where.startswith("/") and not allowed(Path(where)):
                raise ArtifactError(f"Bundle file '{rel}' | loads {where} from outside the bundle and the system's "
                                    "library directories, expected it from lib/")
    artifact = root / "artifact"
    had_outputs = (artifact / "outputs").exists()
    with tempfile.TemporaryDirectory(prefix="multiexport-bundle-ld-") as logs:
        # env(1) sets LD_DEBUG for run.sh alone: run_command starts programs behind a Python stub, whose own
        # loading must not be logged.
        outcome = run_command(["env", "LD_DEBUG=libs,files", f"LD_DEBUG_OUTPUT={logs}/ld", str(root / "run.sh")],
                              timeout=timeout, cwd=root, env={})
        loaded = [p for log in sorted(Path(logs).iterdir()) for p in loaded_objects(log.read_text(errors="replace"),
                                                                                    artifact)]
    if not had_outputs:
        shutil.rmtree(artifact / "outputs", ignore_errors=True)
    if outcome.timed_out:
        raise RunError(f"Bundle run.sh | ran past {timeout:g} s on the artifact's example inputs under env -i and was "
                       "stopped with everything it started (--timeout); nothing was written", category="timeout")
    if outcome.returncode != 0:
        said = " ".join((outcome.stderr.strip() or outcome.stdout.strip()).split())[-2000:]
        raise ArtifactError(f"Bundle run.sh | {outcome.how_it_ended()} on the artifact's example inputs under env -i: "
                            f"{said}")
    outside = sorted({str(p) for p in loaded if not allowed(p)})
    if outside:
        raise ArtifactError(f"Bundle run.sh | loaded {', '.join(outside)} from outside the bundle and the system's "
                            "library directories, expected every library in lib/ (a file the runtime dlopens: declare "
                            "it in the consumer's runtime files)")
