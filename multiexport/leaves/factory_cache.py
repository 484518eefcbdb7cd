"""A TARGET's factory built once: the XLA programs it compiled handed to the export workers in a JAX cache.

A TARGET string names a factory that every export worker calls again for the function and its arguments.
Building a model runs its initializers eagerly, one XLA compile per op and shape (equinox's MNIST CNN: 15
compiles, ~6 s), so each export worker paid the parent's load again. The process that loads the TARGET
records those programs in a JAX persistent compilation cache of its own (a fresh temporary directory, gone
when it closes); export workers read it and build the same weights from the same programs in ~1 s.

Only programs compiled while a factory runs are written, and only export workers read the cache. A timed
worker (the reference, the xla runner, every cold start) has JAX's cache switched off, even when the
user's environment sets one (JAX_COMPILATION_CACHE_DIR), so what it compiles costs what it costs in a
fresh process: a cold start is never a cache hit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Iterator

from ..files.temporary import make_temporary

ENV = "MULTIEXPORT_FACTORY_CACHE"  # the directory, for the workers this process starts
_NEVER_WRITE_S = 1e9  # jax writes an entry only for a compile that took at least this long


class FactoryCache:
    """One process's cache directory; `load` builds a TARGET recording its programs, `close` removes it.

    path: the directory (also in os.environ[ENV] while open, so every worker started meanwhile is told).
    """

    def __init__(self) -> None:
        self.path = str(make_temporary("factory-cache"))
        _configure(self.path)
        os.environ[ENV] = self.path

    def load(self, spec: str | None):
        """`load_target(spec)`, writing what it compiles to the cache."""
        from .target import load_target

        with _writing():
            return load_target(spec)

    def close(self) -> None:
        if os.environ.get(ENV) == self.path:
            del os.environ[ENV]
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "FactoryCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def _configure(path: str) -> None:
    import jax

    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # the factory's programs are small
    jax.config.update("jax_persistent_cache_min_compile_time_secs", _NEVER_WRITE_S)
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")  # no autotune files of XLA's


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    import jax

    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        yield
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", _NEVER_WRITE_S)
