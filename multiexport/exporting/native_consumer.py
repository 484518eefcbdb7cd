"""What the core needs from a format's native consumer, declared by the format's backend (`Backend.native_consumer`).

The core runs, checks and bundles every native consumer through this one contract, so no core module names a
format: `native.run` asks the consumer for its argv and environment and how its timings are read,
`native_section.check_section` asks it for its section's consumer id and field checks, `native.bundle` asks it
what a bundle holds. A new format with a native consumer is its backend package alone.

It lives with the `Backend` contract (below `native` in the layers), so it builds nothing itself: its `recipe`
says how (language, the program's main source in its backend's `csrc/`, flags, the runtime files hashed into the
cache key), `native/build.py` compiles it with the shared `native/csrc/common/` sources, and the core hands
`command` the built program. The default behaviour is that of multiexport's own programs, which share one
command line, `PROG [FLAGS] --inputs DIR --outputs DIR [--warmup N --iters N --times FILE]`, print their figures
as one JSON line and write every timed call's ns to `--times`. A consumer that runs someone else's tool (IREE's)
sets `builds=False`, gives no `recipe` and overrides `command`, `timed`, `read_timing` and `bundle_programs`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import ArtifactError, BackendUnavailable, RunError

if TYPE_CHECKING:
    from .manifest import Manifest


@dataclass(frozen=True)
class Call:
    """One invocation the core asks a consumer for.

    inputs_dir / outputs_dir: where the .npy files are and go, relative to the artifact or absolute.
    iters / warmup: timed calls after untimed ones (0 iters: one untimed call that writes the outputs).
    threads: the runtime's intra-op threads, None for the runtime's own choice.
    plugin / device: the PJRT plugin asked for and the device ("cpu", "gpu"), for consumers that load one.
    """

    inputs_dir: str
    outputs_dir: str
    iters: int = 0
    warmup: int = 0
    threads: int | None = None
    plugin: str | None = None
    device: str = "cpu"


@dataclass(frozen=True)
class Request:
    """What a consumer's bundle entry is asked about: the checked manifest, its native section, the PJRT plugin
    asked for (None: the one found)."""

    manifest: "Manifest"
    native: Mapping[str, Any]
    plugin: Path | None = None


@dataclass(frozen=True)
class Program:
    """A program a bundle's bin/ holds: `copy` is the file copied, `seen_from` the one whose ldd gives its
    libraries (the same program built with the wheels' rpath: the bundled copy's `$ORIGIN/../lib` means nothing
    before it is in place)."""

    copy: Path
    seen_from: Path


@dataclass(frozen=True)
class Recipe:
    """How `native/build.py` compiles one of our programs: everything about its runtime, none of it in the core.

    language: "c" or "c++", which compiler builds `main` (the shared `common/` sources are always compiled as C99).
    main: the program's main source, package data of its backend (`backends/<name>/csrc/`); the build's include
        path holds its own directory (quoted includes) and `native/csrc/` (`#include "common/mx_util.h"`).
    flags: compile and link flags in order (`-std=`, `-I`, `-D`; `-l`, `-L`, `-Wl,` go on the link line). A
        `-Wl,-rpath,DIR` is the wheels' directory: the bundled build drops it for `$ORIGIN/../lib`.
    inputs: the runtime's headers and libraries and the program's own headers, hashed into the cache key by path,
        size and mtime (hashing a 300 MB library on each call costs seconds), so an upgrade builds anew.
    dlopened: names of `-DNAME="/abs/path"` flags naming a library the program dlopens by path: the bundled build
        names the file alone, which dlopen then looks for through the bundle's `$ORIGIN/../lib`.
    """

    language: str
    main: Path
    flags: tuple[str, ...] = ()
    inputs: tuple[Path, ...] = ()
    dlopened: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.language not in ("c", "c++"):
            raise ValueError(f"Recipe language '{self.language}' | unknown, expected 'c' or 'c++'")


@dataclass(frozen=True)
class NativeConsumer:
    """One format's Python-free consumer. Subclass it for a format whose consumer needs more than the defaults.

    consumer: the id the manifest's native section names (`native.consumer`, e.g. "pjrt_c_api"), listed in
        manifest.schema.json; `check_section` refuses a section of a backend naming another.
    program: what `native.run.consumer_of` answers: our program's name (built by `native.build.build` from
        `recipe`, the name `native.build` looks it up by) when `builds`, else a label of the tool found elsewhere
        (IREE's "iree").
    builds: whether `program` is ours: the core builds it from `recipe` and passes it to `command`, and a bundle
        holds its bundled build (False: `command` and `bundle_programs` find the tool themselves).
    mismatch: the end of the message refusing a section that differs from `expected` ("... give: refusing to
        run a session the export did not write"); used only when `expected` returns a section.
    env: variables every run sets (read when the runtime's library loads, so the program cannot set them);
        a bundle's run.sh sets them too.
    threads_flag: our program takes `--threads N` (False: the threads go through `thread_env`).
    mkdir_outputs: the program does not create its outputs directory itself (a bundle's run.sh makes it).
    devices: the devices `Call.device` may name ("cpu"; PJRT also "gpu", through jax's CUDA plugin), for a caller
        deciding whether a GPU plan runs this consumer at all.
    static_modules: the consumer compiles no symbolic module (PJRT), so an export for `compare --native` carries
        modules refined to every size the compare checks or times (`ExportOptions.static_sizes`).
    """

    consumer: str
    program: str
    builds: bool = True
    mismatch: str = "refusing to run a configuration the export did not write"
    env: tuple[tuple[str, str], ...] = ()
    threads_flag: bool = True
    mkdir_outputs: bool = False
    devices: tuple[str, ...] = ("cpu",)
    static_modules: bool = False

    # -- the build -------------------------------------------------------------------------------------------

    def recipe(self) -> Recipe:
        """How `program` is compiled on this machine when `builds`: the runtime's headers and libraries found in the
        installed wheels. Raises BackendUnavailable (`native.runtimes.NativeBuildError`) naming what is missing."""
        raise BackendUnavailable(f"Native consumer '{self.consumer}' | builds its program '{self.program}' but gives "
                                 "no recipe, expected `NativeConsumer.recipe` overridden")

    def user_options(self) -> Mapping[str, str]:
        """Options of `python -m multiexport.native.build` this consumer answers, name (no "--") -> help: what a
        user's own C/C++ program on this runtime needs (include and link flags, a plugin to dlopen), as
        examples/cpp/Makefile asks. An option an earlier backend (registry order) offers is not offered twice."""
        return {}

    def user_answer(self, option: str, common: Path, device: str) -> str:
        """The one-line answer to `option`, one of `user_options`. common: the directory a program's `-I` names for
        the shared headers (`#include "common/mx_util.h"`); device: the command's `--device` ("cpu", "gpu").
        Raises BackendUnavailable naming what is missing."""
        raise KeyError(option)

    # -- the tamper check -------------------------------------------------------------------------------------

    def check_fields(self, native: Mapping[str, Any], directory: Path) -> None:
        """Refuse a section field that is not data (run while the section is validated, before anything else)."""

    def expected(self, manifest: "Manifest", native: Mapping[str, Any]) -> dict[str, Any] | None:
        """The section recomputed from the manifest alone (None: not recomputed); `check` compares it."""
        return None

    def check(self, manifest: "Manifest", native: Mapping[str, Any], directory: Path) -> None:
        """Refuse a section that differs from what the manifest gives: the consumer runs only what the export
        wrote. `inputs_written` is the pipeline's record, not the consumer's binding (absent from older artifacts)."""
        expected = self.expected(manifest, native)
        if expected is None:
            return
        written = {"inputs_written": native["inputs_written"]} if "inputs_written" in native else {}
        if dict(native) != {**expected, **written}:
            raise ArtifactError(f"Artifact '{directory}' | native section differs from what the manifest's "
                                f"{self.mismatch}")

    def check_entries(self, manifest: "Manifest", native: Mapping[str, Any]) -> None:
        """Refuse, before any file is written, leaves the consumer cannot read or write (RunError)."""

    # -- a run ------------------------------------------------------------------------------------------------

    def thread_env(self, threads: int) -> dict[str, str]:
        """The environment that sets the runtime's intra-op threads when `threads_flag` is False."""
        return {}

    def program_args(self, manifest: "Manifest", native: Mapping[str, Any], call: Call
                     ) -> tuple[list[str], dict[str, str]]:
        """The flags before `--inputs` and the environment they need (a PJRT plugin and its variables)."""
        return [], {}

    def command(self, manifest: "Manifest", native: Mapping[str, Any], call: Call, program: Path | None
                ) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of one run in the artifact directory; the environment is all the program gets.
        program: our program, built (None when not `builds`)."""
        env = dict(self.env)
        flags, extra = self.program_args(manifest, native, call)
        env.update(extra)
        if call.threads:
            if self.threads_flag:
                flags = [*flags, "--threads", str(call.threads)]
            else:
                env.update(self.thread_env(call.threads))
        argv = [str(program), *flags, "--inputs", call.inputs_dir, "--outputs", call.outputs_dir]
        if call.iters:
            argv += ["--warmup", str(call.warmup), "--iters", str(call.iters)]
        return argv, env

    def timed(self, argv: list[str], times: Path) -> list[str]:
        """The timed command's argv: ours write every timed call's ns to `--times`."""
        return [*argv, "--times", str(times)]

    def read_timing(self, stdout: str, outputs: Path, times: Path) -> tuple[dict[str, Any], np.ndarray]:
        """The program's figures (min_ms, median_ms, p90_ms, max_ms, mean_ms, calls, ...) and every timed call's
        ns in call order: ours print the figures as their last stdout line and write the calls to `times`."""
        try:
            figures = json.loads(stdout.strip().splitlines()[-1])
            figures.setdefault("statistic", "wall time of each call, measured inside the program")
            samples = np.load(times, allow_pickle=False) if times.is_file() else None
            if samples is None or samples.dtype != np.int64 or samples.ndim != 1 or len(samples) != figures["calls"]:
                raise RunError(f"Native program | wrote no per-call times to {times.name} (--times), expected "
                               f"{figures['calls']} of them")
            return figures, samples
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise RunError(f"Native program | got unreadable timing output ({exc}), expected JSON") from exc

    def outputs_after_timing(self) -> bool:
        """Whether the timed command writes no outputs, so one untimed run follows for them."""
        return False

    # -- a bundle ---------------------------------------------------------------------------------------------

    def bundle_programs(self, request: Request) -> list[Program]:
        """The programs a bundle's bin/ holds when not `builds` (ours: the bundled build); run.sh runs the first."""
        return []

    def bundle_runtime(self, request: Request) -> list[Path]:
        """Files the runtime dlopens that no ldd of the program shows; copied into lib/ with their own libraries."""
        return []

    def bundle_argv(self, request: Request) -> list[str]:
        """run.sh's arguments after the program (the working directory is artifact/, so lib/ is '../lib')."""
        return []
