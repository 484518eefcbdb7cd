"""What to run where: which trials are evidence, which sizes an artifact supports, the feeds to time.

Pure functions over trials, reference outputs and manifests, so every rule that decides what a verdict
rests on is in one place and testable without any runtime.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import UsageError
from ..exporting.native_section import static_key
from ..results.parity import ExcludedTrial
from .inputs import Trial, is_finite_feed, trial_at


def out_of_domain(trials: Sequence[Trial], ref_outputs: Sequence[Mapping[str, np.ndarray]]) -> list[ExcludedTrial]:
    """Trials on which jax.jit itself is not finite where it was finite on the example: no evidence.

    Without an example trial there is nothing to compare against, and no trial is excluded.
    """
    example = next((i for i, t in enumerate(trials) if t.name == "example"), None)
    if example is None:
        return []
    finite = {name: is_finite_feed({name: value}) for name, value in ref_outputs[example].items()}
    excluded = []
    for trial, outs in zip(trials, ref_outputs):
        if trial.name == "example":
            continue
        bad = [name for name, value in outs.items() if finite.get(name) and not is_finite_feed({name: value})]
        if bad:
            excluded.append(ExcludedTrial(trial.name, f"jax.jit's own output {', '.join(bad)} is not finite on this "
                                                      "trial's inputs (it is on the example's): the inputs left the "
                                                      "model's domain, so the trial is no evidence either way"))
    return excluded


def supported(trial_dims: Mapping[str, int], fixed: Mapping[str, Sequence[int]]) -> bool:
    """Whether an artifact that supports only `fixed` sizes of some dims can take a trial with these dims."""
    return all(trial_dims.get(d) in sizes for d, sizes in fixed.items() if d in trial_dims)


def unsupported_reason(backend: str, fixed: Mapping[str, Sequence[int]]) -> str:
    shown = ", ".join(f"{d}={','.join(map(str, s))}" for d, s in fixed.items())
    return (f"the {backend} artifact was built for {shown} only (its converter could not keep the symbolic "
            "dimension); other sizes are not supported by it, so they were neither checked nor timed")


def bench_feeds(sig, trials: Sequence[Trial], batch_sizes: Sequence[int] | None, seed: int,
                val_ranges: Mapping[str, Any] | None, batch_leaves: Sequence[str]) -> list[tuple[int | None, dict]]:
    """One feed per batch size to time: the sweep sizes of the batch symbol, else the first trial as is."""
    symbols = list(sig.symbolic_dims)
    if not batch_sizes:
        first = trials[0]
        return [(first.dims[symbols[0]] if len(symbols) == 1 else static_batch(sig, batch_leaves), first.feed)]
    if len(symbols) != 1:
        raise UsageError(
            f"Option '--batch-sizes' | got a target with {len(symbols)} symbolic dimensions, expected exactly one "
            "(declare a symbolic batch: Target(symbolic_batch='b', ...))"
        )
    sym = symbols[0]
    rng = np.random.default_rng(seed + 1)
    examples = sig.example_feed()
    return [(size, trial_at(sig.inputs, examples, {sym: size}, rng, f"bench {sym}={size}", val_ranges).feed)
            for size in batch_sizes]


def static_batch(sig, batch_leaves: Sequence[str]) -> int | None:
    """The batch size of a static target whose batch leaves are named (batch_leaves), for items/s."""
    import fnmatch

    if tuple(batch_leaves) == ("*",):
        return None  # every leaf, weights included: no batch size to speak of
    leading = {leaf.shape[0] for leaf in sig.inputs
               if leaf.shape and any(fnmatch.fnmatchcase(leaf.name, p) for p in batch_leaves)}
    return leading.pop() if len(leading) == 1 and isinstance(next(iter(leading), None), int) else None


def sizes_checked(sig, trials: Sequence[Trial], feeds: Sequence[tuple[int | None, dict]]) -> dict[str, tuple[int, ...]]:
    """Every size of every symbolic dimension a compare checks or times: the static sizes a native XLA
    consumer needs refined modules for (PJRT compiles no polymorphic module)."""
    found: dict[str, set[int]] = {d: set() for d in sig.symbolic_dims}
    for trial in trials:
        for d, size in trial.dims.items():
            found.setdefault(d, set()).add(int(size))
    if len(sig.symbolic_dims) == 1:
        for batch, _ in feeds:
            if batch is not None:
                found[sig.symbolic_dims[0]].add(int(batch))
    return {d: tuple(sorted(s)) for d, s in found.items() if s}


def native_supports(native: Mapping[str, Any] | None, dims: Mapping[str, int]) -> str | None:
    """None when the native consumer can run at `dims`, else why not (a symbolic XLA artifact has refined
    static modules for some sizes only)."""
    if not native or native.get("consumer") != "pjrt_c_api" or not native.get("symbolic_dims"):
        return None
    key = static_key({d: dims[d] for d in native["symbolic_dims"] if d in dims})
    have = sorted(native.get("static_modules") or {})
    if key in have:
        return None
    return f"no refined static module for {key} (the artifact has {', '.join(have) or 'none'})"
