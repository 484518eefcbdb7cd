"""Which way of calling a restored SavedModel is fastest per call? (picks the savedmodel runner's path)

Each model from multiexport.examples is exported with the savedmodel backend and loaded once with
`tf.saved_model.load`; every calling path then runs on the same prepared TF tensors. Paths are timed in
interleaved rounds (every path once per round, in rotating order) so machine noise hits all alike; the
figure per path is the p50 of single-call times, and the ratio to the public serving signature is the
number to read. Every path's outputs are checked equal to the runner's before timing. `jax.jit` of the
same function runs in the same rounds as a reference for what the computation itself costs.

Run: `.venv/bin/python benchmarks/savedmodel_calling_paths.py [--models mlp,transformer] [--rounds 15] [--calls 100]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from multiexport import examples
from multiexport.backends.savedmodel import LEAF_FUNCTION, SIGNATURE_KEY, SavedModelBackend, import_tf  # noqa: F401
from multiexport.leaves import build_signature

REFERENCE = "(reference) jax.jit, not a TF path"


def calling_paths(tf, loaded, runner, feed):
    """name -> zero-argument callable running the model once on prepared tensors (outputs as a dict)."""
    serving = loaded.signatures[SIGNATURE_KEY]
    leaves = runner.manifest.inputs
    keys = [leaf.alias for leaf in leaves]
    tensors = [tf.constant(feed[leaf.name]) for leaf in leaves]
    kwargs = dict(zip(keys, tensors))
    restored = getattr(loaded, LEAF_FUNCTION)
    restored_concrete = restored.concrete_functions[0]
    wrapper = tf.function(lambda *ts: serving(**dict(zip(keys, ts))), autograph=False)
    wrapper_xla = tf.function(lambda *ts: serving(**dict(zip(keys, ts))), autograph=False, jit_compile=True)
    prepared = runner.prepare(feed)
    return {
        "serving signature(**tensors)": lambda: serving(**kwargs),
        f"restored tf.function {LEAF_FUNCTION}(*t)": lambda: restored(*tensors),
        "restored concrete function(*t)": lambda: restored_concrete(*tensors),
        "tf.function(signature) wrapper": lambda: wrapper(*tensors),
        "tf.function(jit_compile) wrapper": lambda: wrapper_xla(*tensors),
        "signature bound once, _call_flat": lambda: runner._call(prepared),
    }


def measure(paths, rounds: int, calls: int) -> dict[str, float]:
    samples = {name: [] for name in paths}
    names = list(paths)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            call = paths[name]
            for _ in range(calls):
                t0 = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,transformer", help="comma-separated multiexport.examples targets")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=100, help="timed calls per path per round")
    args = parser.parse_args()
    tf = import_tf()
    backend = SavedModelBackend()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            target = getattr(examples, name)()
            sig = build_signature(target)
            backend.export(target.fn, sig, Path(tmp) / name)
            runner = backend.load(Path(tmp) / name)
            loaded = runner._loaded
            feed = sig.example_feed()
            paths = calling_paths(tf, loaded, runner, feed)
            want = runner(feed)
            for path, call in paths.items():  # same numbers from every path, and warm
                for _ in range(20):
                    out = call()
                for leaf in runner.manifest.outputs:
                    np.testing.assert_array_equal(out[leaf.alias].numpy(), want[leaf.name], err_msg=path)
            jitted = jax.jit(sig.flat_function(target.fn))
            on_device = [jax.device_put(feed[leaf.name]) for leaf in sig.inputs]
            paths[REFERENCE] = lambda: jax.block_until_ready(jitted(*on_device))
            paths[REFERENCE]()
            p50 = measure(paths, args.rounds, args.calls)
            rows.append((name, len(sig.inputs), p50))

    print(f"TensorFlow {tf.__version__}; per-call p50 over {args.rounds} interleaved rounds x {args.calls} calls")
    print(f"{'model':<12} {'leaves':>6}  {'calling path':<38} {'p50 us':>9} {'vs signature':>13}")
    for name, n_leaves, p50 in rows:
        base = p50["serving signature(**tensors)"]
        for path, t in sorted(p50.items(), key=lambda kv: kv[1]):
            print(f"{name:<12} {n_leaves:>6}  {path:<38} {t * 1e6:9.1f} {t / base:12.2f}x")
    fastest = {min((p for p in p50 if p != REFERENCE), key=p50.get) for _, _, p50 in rows}
    print(f"fastest on every model: {', '.join(sorted(fastest))}" if len(fastest) == 1
          else f"fastest differs by model: {', '.join(sorted(fastest))}")
    print(f"runner uses: {SavedModelBackend().name} -> {type(runner).calling_path}")


if __name__ == "__main__":
    main()
