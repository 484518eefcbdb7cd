"""One step of benchmarks/llm.py's format-by-format mode, in a process of its own (its peak RSS is its own).

    python -m benchmarks.llm_worker reference TARGET OUT_DIR ITERS   # jax.jit on the example: ref.npz, feed.npz
    python -m benchmarks.llm_worker run ARTIFACT_DIR FEED.npz OUT.npz ITERS   # multiexport's runner from disk
    python -m benchmarks.llm_worker export TARGET BACKEND OUT_DIR   # the export, without the load check

Each prints one JSON line: load seconds, per-call latencies (ms), and the process's peak RSS. The reference runs
the target as compare's reference does for baked weights: the large constants lifted to arguments
(`leaves.weights.lift_weights`), so XLA does not copy 4 GiB of constants into the executable.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def _peak_rss() -> int:
    """This process's own peak (VmHWM: the address space since exec; getrusage's ru_maxrss also counts the parent's
    pages the fork copied before the exec)."""
    from multiexport.measure.bench import memory_now

    return memory_now()["peak_rss_bytes"]


def _timed(call, iters: int) -> list[float]:
    call()  # warm-up (compiles where the runtime compiles on first call)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def reference(spec: str, out: Path, iters: int) -> dict:
    import jax

    from multiexport.leaves import build_signature, load_target
    from multiexport.leaves.weights import lift_weights

    t0 = time.perf_counter()
    target = load_target(spec)
    sig = build_signature(target)
    feed = {leaf.name: np.asarray(x) for leaf, x in zip(sig.inputs, sig.examples)}
    lifted = lift_weights(target.fn, sig)
    leaves = [jax.device_put(feed[leaf.name]) for leaf in sig.inputs]
    weights = [jax.device_put(a) for a in lifted.arrays] if lifted else []
    fn = jax.jit(lifted.fn if lifted else sig.flat_function())
    load_s = time.perf_counter() - t0
    outs = fn(*leaves, *weights)
    jax.block_until_ready(outs)
    times = _timed(lambda: jax.block_until_ready(fn(*leaves, *weights)), iters)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "feed.npz", **feed)
    np.savez(out / "ref.npz", **{leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, outs)})
    weights_bytes = int(sig.weights.get("baked_bytes", 0)) + int(sig.weights.get("input_bytes", 0))
    return {"load_s": load_s, "times_ms": times, "peak_rss_bytes": _peak_rss(), "weights_bytes": weights_bytes}


def run(artifact: Path, feed_path: Path, out: Path, iters: int) -> dict:
    from multiexport.api import load

    feed = dict(np.load(feed_path))
    t0 = time.perf_counter()
    runner = load(artifact, trust_artifact=True)  # our own export, just written
    load_s = time.perf_counter() - t0
    outputs = runner(feed)
    prepared = runner.prepare(feed)
    times = _timed(lambda: runner.run_prepared(prepared), iters)
    np.savez(out, **{k: np.asarray(v) for k, v in outputs.items()})
    return {"load_s": load_s, "times_ms": times, "peak_rss_bytes": _peak_rss()}


def export(spec: str, backend: str, out: Path) -> dict:
    """The export as compare's export worker does it: no load check here (the run step loads it next, in a fresh
    process), so the export's peak is the converter's, not the converter's plus a loaded runtime's."""
    from multiexport.api import export as export_artifact

    t0 = time.perf_counter()
    export_artifact(spec, out_dir=out, backend=backend, check_load=False)
    return {"seconds": time.perf_counter() - t0, "peak_rss_bytes": _peak_rss()}


def main(argv: list[str]) -> int:
    if argv[:1] == ["export"] and len(argv) == 4:
        result = export(argv[1], argv[2], Path(argv[3]))
    elif argv[:1] == ["reference"] and len(argv) == 4:
        result = reference(argv[1], Path(argv[2]), int(argv[3]))
    elif argv[:1] == ["run"] and len(argv) == 5:
        result = run(Path(argv[1]), Path(argv[2]), Path(argv[3]), int(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
