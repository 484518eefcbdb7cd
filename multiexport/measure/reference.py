"""The reference every backend is judged against: `jax.jit(fn)` on the same named inputs.

`ReferenceRunner` gives jax.jit the Runner interface, so the benchmark harness times the reference
exactly as it times every backend. `float64_outputs` runs the function in float64 (x64 on, float
inputs widened) for the true value rather than XLA's float32 one. `nondeterminism` says whether the
target can be checked at all: two traces must bake in the same constants, two runs give the same outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..dtypes import is_complex, is_float
from ..exporting.contract import RunOptions
from ..exporting.jit_runner import JitRunner
from ..exporting.manifest import Manifest
from ..exporting.manifest_records import Supports
from ..exporting.pipeline import bindings
from ..leaves import Target
from ..leaves.weights import plan
from ..versions import base_versions, utc_now

MATMUL_PRECISIONS = ("default", "high", "highest")  # jax.default_matmul_precision's names, "default" as it is


def reference_manifest(sig) -> Manifest:
    n_in, n_out = len(sig.inputs), len(sig.outputs)
    return Manifest(
        backend="jax", target=sig.name,
        inputs=bindings(sig.inputs, [True] * n_in, list(range(n_in))),
        outputs=bindings(sig.outputs, [True] * n_out, list(range(n_out))),
        keep_unused=True, symbolic_dims=list(sig.symbolic_dims), files={}, versions=base_versions(),
        created=utc_now(), supports=Supports(dims={d: "any" for d in sig.symbolic_dims}, platforms=["cpu", "cuda"],
                                          x64=sig.x64),
    )


class ReferenceRunner(JitRunner):
    """jax.jit of the target's flat function, in this process.

    A target that bakes in 16 MiB or more of weights is jitted with them lifted to arguments (the same
    jaxpr, evaluated with the same values): jax.jit would otherwise embed them as constants of the
    compiled program, which peaked at 7.1x the weights' size for the 1.34 GB LM (benchmarks/scale.py).
    """

    calling_path = "jax.jit(fn) on named leaves; inputs committed with jax.device_put"

    def __init__(self, target: Target, sig, device: str = "cpu", threads: int | None = None,
                 matmul_precision: str = "default"):
        import jax


        if matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(f"matmul_precision {matmul_precision!r} | expected one of {', '.join(MATMUL_PRECISIONS)}")
        self.matmul_precision = matmul_precision

        jax_device = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        options = RunOptions(device=device, threads=threads)
        lifted = plan(target.fn, sig, "auto")
        if lifted is None:
            super().__init__(reference_manifest(sig), Path("."), options,
                             at_precision(sig.flat_function(target.fn), matmul_precision), jax_device, x64=sig.x64)
            self.lifted_weights = 0
            return
        weights = [jax.block_until_ready(jax.device_put(a, jax_device)) for a in lifted.arrays]
        super().__init__(reference_manifest(sig), Path("."), options, at_precision(lifted.fn, matmul_precision),
                         jax_device, resident=weights, x64=sig.x64)
        self.lifted_weights = len(weights)
        self.calling_path = (f"jax.jit(fn) on named leaves, its {len(weights)} baked weights passed as arguments "
                             "(on the device once); inputs committed with jax.device_put")

    def flops(self, feed: dict[str, np.ndarray]) -> float | None:
        """FLOPs of one call at this feed's shapes, from XLA's cost analysis (None if XLA cannot say)."""
        try:
            args = [feed[leaf.name] for leaf in self.manifest.inputs] + self._resident
            analysis = self._x64(lambda *xs: self._jitted.lower(*xs).compile().cost_analysis())(*args)
        except Exception:  # cost analysis is best effort: some backends/platforms do not implement it
            return None
        if isinstance(analysis, (list, tuple)):
            analysis = analysis[0] if analysis else {}
        flops = (analysis or {}).get("flops")
        return float(flops) if flops is not None and flops >= 0 else None


def at_precision(fn, matmul_precision: str):
    """`fn` traced under `jax.default_matmul_precision(matmul_precision)` ("default": `fn` itself), so every dot and
    convolution it lowers carries that precision: what a TPU's bf16 passes move is then measured, not assumed."""
    if matmul_precision == "default":
        return fn

    def call(*args):
        import jax

        with jax.default_matmul_precision(matmul_precision):
            return fn(*args)

    return call


def nondeterminism(target: Target, sig, runner: ReferenceRunner, feed: Mapping[str, np.ndarray]) -> str | None:
    """Why the target cannot be checked (it is not deterministic), or None when it is.

    Two traces must bake in the same constants (numpy random numbers drawn while tracing differ), and two
    runs of the compiled reference on the same inputs must agree (a callback drawing random numbers).
    """
    if sig.fingerprint(target.fn) != sig.fingerprint(target.fn):
        return (f"Target '{target.name}' | bakes in different constants each time it is traced (random numbers drawn "
                "while tracing, e.g. np.random without a seed), expected the same: draw them once outside the "
                "function, or from a fixed jax.random key")
    first, second = runner(feed), runner(feed)
    for name in first:
        a, b = np.asarray(first[name]), np.asarray(second[name])
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            return (f"Target '{target.name}' | output '{name}' differs between two runs on the same inputs, expected "
                    "the same: the function draws random numbers at run time (a host callback?); give it a key input "
                    "instead")
    return None


def float64_outputs(target: Target, sig, feeds: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The function in float64 on each feed: the true value, not XLA's float32 one."""
    import jax

    flat = sig.flat_function(target.fn)
    outs = []
    with jax.enable_x64(True):
        jitted = jax.jit(flat)
        for feed in feeds:
            args = [_widen(feed[leaf.name]) for leaf in sig.inputs]
            outs.append({leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, jitted(*args))})
    return outs


def not_float64(truth: Sequence[Mapping[str, np.ndarray]]) -> list[str]:
    """Float output leaves the float64 run did not compute in 64 bits: the function casts back (a Keras layer
    keeps its dtype policy's float32, `.astype(jnp.float32)`), so that 'truth' is another float32 result
    and an error against it says nothing about accuracy."""
    narrow = set()
    for outputs in truth:
        for name, value in outputs.items():
            dt = np.asarray(value).dtype
            if (is_float(dt) and dt != np.float64) or (is_complex(dt) and dt != np.complex128):
                narrow.add(name)
    return sorted(narrow)


def without(truth: Sequence[Mapping[str, np.ndarray]], leaves: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """The truth less `leaves` (those with no float64 value)."""
    return [{k: v for k, v in outputs.items() if k not in leaves} for outputs in truth]


def _widen(value) -> np.ndarray:
    """A float input in float64 (bfloat16 and float8 included: numpy calls their kind 'V'), complex in complex128."""
    a = np.asarray(value)
    if is_complex(a.dtype):
        return a.astype(np.complex128)
    return a.astype(np.float64) if is_float(a.dtype) else a


def error_vs(outputs, truth) -> dict[str, float]:
    """Per output leaf: max |error| / max |truth| against the float64 truth, worst over all trials."""
    worst: dict[str, float] = {}
    for got, want in zip(outputs, truth):
        for name, w in want.items():
            w = np.asarray(w)
            if not (is_float(w.dtype) or is_complex(w.dtype)) or name not in got:
                continue
            cast = np.complex128 if is_complex(w.dtype) or is_complex(np.asarray(got[name]).dtype) else np.float64
            g = np.asarray(got[name]).astype(cast)
            w = w.astype(cast)
            scale = max(float(np.max(np.abs(w), initial=0.0)), np.finfo(np.float64).tiny)
            worst[name] = max(worst.get(name, 0.0), float(np.max(np.abs(g - w), initial=0.0)) / scale)
    return worst
