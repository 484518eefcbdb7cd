"""A TARGET's factory built once: the XLA programs it compiled handed to the export workers in a JAX cache.

A TARGET string names a factory that every export worker calls again for the function and its arguments.
Building a model runs its initializers eagerly, one XLA compile per op and shape (equinox's MNIST CNN: 15
compiles, ~6 s), so each export worker paid the parent's load again. The process that loads the TARGET
records those programs in a JAX persistent compilation cache; export workers read it and build the same
weights from the same programs in ~1 s.

The cache is kept between commands (`kept_directory`: $XDG_CACHE_HOME/multiexport/build, bounded to
MAX_BYTES, least recently used first out), so the next compare of the same model builds it from the same
programs too: building was the largest share of a real model's compare (a Haiku ResNet's init 8.6 s of a
64 s compare). $MULTIEXPORT_BUILD_CACHE names another directory, or `off` for a temporary one per command
(removed when it closes), which is also what a machine without `filelock` gets: JAX locks a bounded cache
with it, and two compares sharing one unlocked could read each other's half-written programs.

Programs compiled while a factory runs are written, and, for a target that bakes in little (`keep_compiles`),
what the compare's own process compiles after it: jax.jit at each trial's sizes for the reference's outputs and
the rounding floor (keras_hub_gpt2: ~1.5 CPU s of compiles, the first trial's on the compare's critical path), none
of them timed. Only the compare's process and export workers read the cache; the reference's paired worker reads
it while its factory runs, then switches it off. A timed worker (the reference, the xla runner, every cold start)
has JAX's cache switched off, even when the user's environment sets one (JAX_COMPILATION_CACHE_DIR), so what it
compiles costs what it costs in a fresh process: a cold start is never a cache hit; where the compare's own process
times the reference (no worker could), no cache is read meanwhile (`off_here`). A caller's process gets its own JAX
cache settings back when the FactoryCache closes, and its own cache, if it had opened one, gets nothing of this.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Iterator

from ..files.temporary import make_temporary
from .target import load_target

ENV = "MULTIEXPORT_FACTORY_CACHE"  # the directory, for the workers this process starts
KEPT_ENV = "MULTIEXPORT_BUILD_CACHE"  # the kept cache's directory, or "off"
MAX_BYTES = 256 * 2**20  # the kept cache's bound: jax evicts the least recently used programs beyond it
_OFF = ("off", "0", "no", "false", "none")
_NEVER_WRITE_S = 1e9  # jax writes an entry only for a compile that took at least this long
# What `keep_compiles` keeps: compiles that took at least this long (not the eager one-op programs of the
# compare's own checks, each a file for nothing), for a target baking in at most KEEP_LIMIT_BYTES of weights
# (baked weights are constants inside every program kept, one per trial size and check: a few of those must not
# push other models' factories out of MAX_BYTES; weights given as input leaves are arguments, not in the program).
KEEP_MIN_COMPILE_S = 0.05
KEEP_LIMIT_BYTES = 1 << 20
# The JAX settings a FactoryCache sets in its process, restored by `close` (a Python caller's process goes on).
_SETTINGS = ("jax_enable_compilation_cache", "jax_compilation_cache_dir", "jax_persistent_cache_min_entry_size_bytes",
             "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_enable_xla_caches",
             "jax_compilation_cache_max_size")


def kept_directory() -> Path | None:
    """Where factories' programs are kept between commands: $MULTIEXPORT_BUILD_CACHE, else
    $XDG_CACHE_HOME/multiexport/build (~/.cache/...); None when that says `off` or `filelock` is missing."""
    given = os.environ.get(KEPT_ENV, "").strip()
    if given.lower() in _OFF or importlib.util.find_spec("filelock") is None:
        return None
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "multiexport" / "build"


class FactoryCache:
    """One process's cache directory; `load` builds a TARGET recording its programs, `close` removes it.

    path: the directory (also in os.environ[ENV] while open, so every worker started meanwhile is told).
    kept: whether it is the cache kept between commands (`kept_directory`), else a temporary removed by `close`.
    """

    def __init__(self) -> None:
        kept = kept_directory()
        if kept is not None:
            try:
                kept.mkdir(parents=True, exist_ok=True)
            except OSError:  # unwritable: this command builds as if it were off
                kept = None
        self.kept = kept is not None and os.access(kept, os.W_OK)
        self.path = str(kept) if self.kept else str(make_temporary("factory-cache"))
        self._before = _settings()
        _configure(self.path)
        os.environ[ENV] = self.path

    def load(self, spec: str | None):
        """`load_target(spec)`, writing what it compiles to the cache."""

        with _writing():
            return load_target(spec)

    def close(self) -> None:
        """The process's JAX cache settings as they were (a Python caller's process goes on: what it compiles next
        is read from and written to its own cache, if any, not this one); a temporary directory removed."""
        if os.environ.get(ENV) == self.path:
            del os.environ[ENV]
            _restore(self._before)
        if not self.kept:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "FactoryCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def keep_compiles(baked: int) -> bool:
    """In a process with a FactoryCache open on the kept directory (the compare's, given a TARGET string), keep in it
    what this process compiles from now on too (`KEEP_MIN_COMPILE_S` or longer), where the target bakes in at most
    KEEP_LIMIT_BYTES of weights (`baked`, bytes): the next compare of the same model reads its reference's programs
    instead of compiling them. Elsewhere, or for heavier constants, nothing is kept (a compare nested in this one,
    the floor's, decides again for its own target; `stop_keeping` ends it with each compare). Nothing this process
    compiles while keeping is timed: the reference is timed in a worker of its own, which never reads the cache
    while it times, and `off_here` holds where this process times it. Returns whether it keeps them."""
    path = os.environ.get(ENV, "")
    kept = kept_directory()
    if not path or kept is None or path != str(kept) or baked > KEEP_LIMIT_BYTES:
        stop_keeping()  # (a temporary cache is removed at close: what it kept would help no one)
        return False
    import jax

    where = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # jax reads its flags so
    if where != path or not jax.config.jax_enable_compilation_cache:  # type: ignore[attr-defined]
        return False  # not this process's FactoryCache (an export worker reads it; a timed worker has it off)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", KEEP_MIN_COMPILE_S)
    return True


def stop_keeping() -> None:
    """Keep nothing more this process compiles (what a FactoryCache's own load records aside)."""
    import sys

    if "jax" in sys.modules:  # jax imported: the cache may be configured; never imported for this alone
        sys.modules["jax"].config.update("jax_persistent_cache_min_compile_time_secs", _NEVER_WRITE_S)


@contextlib.contextmanager
def off_here() -> Iterator[None]:
    """No JAX compilation cache in this process meanwhile, reads included (any: a FactoryCache's, the caller's
    own): while this process times jax.jit itself (the reference benchmarked here when no worker could), whose
    compiles must cost what they cost. The settings as they were afterwards."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    before = _settings()
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides once whether its cache is used: decide again, now off
    try:
        yield
    finally:
        _restore(before)


def use_in_export_worker() -> bool:
    """Read the cache of the process that started this export worker (never write); True if there is one."""
    path = os.environ.get(ENV, "")
    if not path or not os.path.isdir(path):
        return False
    _configure(path)
    return True


def off_in_timed_worker() -> None:
    """No JAX compilation cache in this process, whatever the environment says (before jax is imported)."""
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    os.environ.pop(ENV, None)


def _settings() -> dict[str, object]:
    import jax

    return {name: getattr(jax.config, name) for name in _SETTINGS}


def _restore(settings: dict[str, object]) -> None:
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    for name, value in settings.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()  # opened again where the restored settings say, when next used


def _configure(path: str) -> None:
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    # JAX opens its cache once, where the settings said then: one the caller's process had opened already (its own
    # JAX_COMPILATION_CACHE_DIR) would get what this one records
    compilation_cache.reset_cache()
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # the factory's programs are small
    jax.config.update("jax_persistent_cache_min_compile_time_secs", _NEVER_WRITE_S)
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")  # no autotune files of XLA's
    if importlib.util.find_spec("filelock") is not None:  # bounded, and so locked: compares may share it
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    import jax

    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        yield
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", _NEVER_WRITE_S)
