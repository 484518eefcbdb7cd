"""The reference every backend is judged against: `jax.jit(fn)` on the same named inputs.

`ReferenceRunner` gives jax.jit the Runner interface, so the benchmark harness times the reference
exactly as it times every backend. `float64_outputs` runs the function in float64 (x64 on, float
inputs widened) for the true value rather than XLA's float32 one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .backend import base_versions, bindings, utc_now
from .jit_runner import JitRunner
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


class ReferenceRunner(JitRunner):
    """jax.jit of the target's flat function, in this process.

    A target that bakes in 16 MiB or more of weights is jitted with them lifted to arguments (the same
    jaxpr, evaluated with the same values): jax.jit would otherwise embed them as constants of the
    compiled program, which peaked at 7.1x the weights' size for the 1.34 GB LM (benchmarks/scale.py).
    """

    calling_path = "jax.jit(fn) on named leaves; inputs committed with jax.device_put"

    def __init__(self, target: Target, sig, device: str = "cpu"):
        import jax

        from .weights import plan

        jax_device = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        lifted = plan(target.fn, sig, "auto")
        if lifted is None:
            super().__init__(reference_manifest(sig), Path("."), device, sig.flat_function(target.fn), jax_device)
            self.lifted_weights = 0
            return
        weights = [jax.block_until_ready(jax.device_put(a, jax_device)) for a in lifted.arrays]
        super().__init__(reference_manifest(sig), Path("."), device, lifted.fn, jax_device, resident=weights)
        self.lifted_weights = len(weights)
        self.calling_path = (f"jax.jit(fn) on named leaves, its {len(weights)} baked weights passed as arguments "
                             "(on the device once); inputs committed with jax.device_put")

    def flops(self, feed: dict[str, np.ndarray]) -> float | None:
        """FLOPs of one call at this feed's shapes, from XLA's cost analysis (None if XLA cannot say)."""
        try:
            args = [feed[leaf.name] for leaf in self.manifest.inputs] + self._resident
            analysis = self._call.lower(*args).compile().cost_analysis()
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
