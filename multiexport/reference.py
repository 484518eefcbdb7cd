"""The reference every backend is judged against: `jax.jit(fn)` on the same named inputs.

`ReferenceRunner` gives jax.jit the Runner interface, so the benchmark harness times the reference
exactly as it times every backend. `float64_outputs` runs the function in float64 (x64 on, float
inputs widened) for the true value rather than XLA's float32 one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .backend import Runner, base_versions, bindings, utc_now
from .manifest import Manifest
from .target import Target


def reference_manifest(sig) -> Manifest:
    n_in, n_out = len(sig.inputs), len(sig.outputs)
    return Manifest(
        backend="jax", target=sig.name,
        inputs=bindings(sig.inputs, [True] * n_in, range(n_in)),
        outputs=bindings(sig.outputs, [True] * n_out, range(n_out)),
        keep_unused=True, symbolic_dims=list(sig.symbolic_dims), files={}, versions=base_versions(),
        created=utc_now(),
    )


class ReferenceRunner(Runner):
    """jax.jit of the target's flat function, in this process."""

    calling_path = "jax.jit(fn) on named leaves; inputs committed with jax.device_put"

    def __init__(self, target: Target, sig, device: str = "cpu"):
        import jax

        super().__init__(reference_manifest(sig), Path("."), device)
        self._device = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        self._call = jax.jit(sig.flat_function(target.fn))
        self._block = jax.block_until_ready  # bound once: the timed call should not pay an import

    def _prepare_impl(self, arrays: list[np.ndarray]) -> list[Any]:
        import jax

        return [jax.device_put(a, self._device) for a in arrays]

    def _run_impl(self, prepared: list[Any]) -> None:
        self._block(self._call(*prepared))

    def _fetch_impl(self, prepared: list[Any]) -> Sequence[Any]:
        return [np.asarray(o) for o in self._call(*prepared)]

    def _compile_impl(self, prepared: list[Any]) -> bool:
        self._call.lower(*prepared).compile()
        return True

    def compile_count(self) -> int | None:
        size = getattr(self._call, "_cache_size", None)
        return size() if callable(size) else None

    def flops(self, feed: dict[str, np.ndarray]) -> float | None:
        """FLOPs of one call at this feed's shapes, from XLA's cost analysis (None if XLA cannot say)."""
        try:
            analysis = self._call.lower(*[feed[leaf.name] for leaf in self.manifest.inputs]).compile().cost_analysis()
        except Exception:  # cost analysis is best effort: some backends/platforms do not implement it
            return None
        if isinstance(analysis, (list, tuple)):
            analysis = analysis[0] if analysis else {}
        flops = (analysis or {}).get("flops")
        return float(flops) if flops is not None and flops >= 0 else None


def float64_outputs(target: Target, sig, feeds: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The function in float64 on each feed: the true value, not XLA's float32 one."""
    import jax

    flat = sig.flat_function(target.fn)
    outs = []
    with jax.enable_x64(True):
        jitted = jax.jit(flat)
        for feed in feeds:
            args = [np.asarray(feed[leaf.name], np.float64) if np.dtype(feed[leaf.name].dtype).kind == "f"
                    else feed[leaf.name] for leaf in sig.inputs]
            outs.append({leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, jitted(*args))})
    return outs
