"""A Runner over a jax.jit-compiled callable: what the XLA backend and the jax.jit reference share."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .backend import Runner
from .manifest import Manifest


class JitRunner(Runner):
    """Runs `jax.jit(call)` through PJRT on inputs committed to one JAX device.

    resident: device arrays passed after the inputs on every call (lifted weights): put on the device
    once, like a deployed model's weights, and never timed as a transfer.
    """

    def __init__(self, manifest: Manifest, directory: Path, device: str, call: Callable[..., Any], jax_device: Any,
                 resident: Sequence[Any] = ()):
        import jax

        super().__init__(manifest, directory, device)
        self._device = jax_device
        self._call = jax.jit(call)
        self._block = jax.block_until_ready  # bound once: the timed call should not pay an import
        self._resident = list(resident)

    def _prepare_impl(self, arrays: list[np.ndarray]) -> list[Any]:
        import jax

        return [jax.device_put(a, self._device) for a in arrays] + self._resident

    def _run_impl(self, prepared: list[Any]) -> None:
        self._block(self._call(*prepared))

    def _fetch_impl(self, prepared: list[Any]) -> Sequence[Any]:
        return [np.asarray(o) for o in self._call(*prepared)]

    def _compile_impl(self, prepared: list[Any]) -> bool:
        # jit reuses this executable for the first call with these shapes, so compile is timed once.
        self._call.lower(*prepared).compile()
        return True

    def compile_count(self) -> int | None:
        size = getattr(self._call, "_cache_size", None)  # jax's own count of compiled shapes
        return size() if callable(size) else None

    def _describe_impl(self) -> dict[str, Any]:
        import os

        import jax

        return {"jax_device": str(self._device), "platform": jax.default_backend(),
                "xla_flags": os.environ.get("XLA_FLAGS", "")}
