"""A Runner over a jax.jit-compiled callable: what the XLA backend and the jax.jit reference share."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .manifest import Manifest
from .options import RunOptions, observed_threads
from .runner import Runner


def enable_x64_if_needed(needed: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper that runs a callable with JAX's 64-bit mode on, when `needed` and it is off.

    A worker process turns x64 on globally before loading (no cost per call); a user's process that
    loads a 64-bit artifact gets each call wrapped instead, so loading never flips their global setting.
    """
    import jax

    if not needed or jax.config.read("jax_enable_x64"):
        return lambda call: call

    def wrap(call):
        def with_x64(*args):
            with jax.enable_x64(True):
                return call(*args)

        return with_x64

    return wrap


class JitRunner(Runner):
    """Runs `jax.jit(call)` through PJRT on inputs committed to one JAX device.

    resident: device arrays passed after the inputs on every call (lifted weights): put on the device
    once, like a deployed model's weights, and never timed as a transfer.
    x64: the callable takes or returns 64-bit types, so it runs with JAX's x64 mode on.
    """

    threads_key = "xla_eigen_threads"

    def __init__(self, manifest: Manifest, directory: Path, options: RunOptions, call: Callable[..., Any],
                 jax_device: Any, resident: Sequence[Any] = (), x64: bool = False):
        import jax

        super().__init__(manifest, directory, options)
        self._device = jax_device
        self._x64 = enable_x64_if_needed(x64)
        self._jitted = jax.jit(call)
        self._call = self._x64(self._jitted)
        self._block = jax.block_until_ready  # bound once: the timed call should not pay an import
        self._resident = list(resident)
        self._signatures: set = set()

    def _prepare_impl(self, arrays: list[np.ndarray]) -> list[Any]:
        import jax

        # jit keys its cache on the arguments' shapes, dtypes and weak types (one device): the fallback count
        self._signatures.add(tuple((a.shape, a.dtype.str) for a in arrays))
        put = self._x64(lambda *xs: [jax.device_put(a, self._device) for a in xs])
        return put(*arrays) + self._resident

    def _run_impl(self, prepared: list[Any]) -> None:
        self._block(self._call(*prepared))

    def _fetch_impl(self, prepared: list[Any]) -> Sequence[Any]:
        return [np.asarray(o) for o in self._call(*prepared)]

    def _compile_impl(self, prepared: list[Any]) -> bool:
        # jit reuses this executable for the first call with these shapes, so compile is timed once.
        self._x64(lambda *xs: self._jitted.lower(*xs).compile())(*prepared)
        return True

    def compile_count(self) -> int | None:
        """Executables compiled so far: jax's own count where it has one (`_cache_size`, a JAX internal that
        exists in 0.10 through 0.12), else the distinct input signatures prepared, which is jit's cache key."""
        size = getattr(self._jitted, "_cache_size", None)
        return size() if callable(size) else len(self._signatures)

    def _describe_impl(self) -> dict[str, Any]:
        import os

        import jax

        return {"jax_device": str(self._device), "platform": jax.default_backend(),
                "xla_flags": os.environ.get("XLA_FLAGS", ""), "pjrt_nproc": os.environ.get("PJRT_NPROC"),
                "xla_eigen_threads": observed_threads("tf_XLAEigen")}
