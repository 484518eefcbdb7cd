"""Which ONNX Runtime calling path should the ONNX runner time? Four, side by side, in one process.

On one session per model (built by the ONNX backend's own loader, so the same options):
  run           session.run(None, {name: ndarray})           numpy in, numpy out (a copy per output)
  ort_values    session.run_with_ort_values(names, {name: OrtValue})   inputs wrapped once, OrtValues out
  iobinding     session.run_with_iobinding(binding)          inputs bound once, ORT allocates outputs
  iobinding_pre the same, outputs bound to OrtValues allocated once (the shapes of a first run)
and `runner.run_prepared`, the call the benchmark harness times (iobinding behind the Runner API).

Each round runs every path `--calls` times, in a rotating order so that machine noise hits all alike;
the figure to read is each path's median per-call time and its ratio to `run`.
Run: `.venv/bin/python benchmarks/onnx_calling_paths.py [--models mlp,transformer,cnn] [--rounds 7]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.backends.onnx import OnnxBackend
from multiexport.leaves import build_signature


def paths(runner, feed: dict[str, np.ndarray]) -> dict[str, callable]:
    """The calls to time, each taking no arguments; everything they need is prepared here."""
    import onnxruntime as ort

    session = runner.session
    inputs = {leaf.param: feed[leaf.name] for leaf in runner.manifest.inputs if leaf.param is not None}
    out_names = [leaf.param for leaf in runner.manifest.outputs]
    ort_inputs = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in inputs.items()}

    binding = session.io_binding()
    for k, v in ort_inputs.items():
        binding.bind_ortvalue_input(k, v)
    for name in out_names:
        binding.bind_output(name, "cpu")

    pre = session.io_binding()
    for k, v in ort_inputs.items():
        pre.bind_ortvalue_input(k, v)
    first = session.run(None, inputs)
    outputs = [ort.OrtValue.ortvalue_from_numpy(np.empty_like(o)) for o in first]
    for name, value in zip(out_names, outputs):
        pre.bind_ortvalue_output(name, value)

    prepared = runner.prepare(feed)
    return {
        "run": lambda: session.run(None, inputs),
        "ort_values": lambda: session.run_with_ort_values(out_names, ort_inputs),
        "iobinding": lambda: session.run_with_iobinding(binding),
        "iobinding_pre": lambda: session.run_with_iobinding(pre),
        "runner.run_prepared": lambda: runner.run_prepared(prepared),
    }


def per_call_seconds(call, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,transformer,cnn", help="names in multiexport.examples")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200, help="calls per path per round")
    args = parser.parse_args()
    backend = OnnxBackend()
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            target = getattr(examples, model)()
            sig = build_signature(target)
            artifact = backend.export(target.fn, sig, Path(tmp) / model)
            runner = backend.load(artifact.directory)
            calls = paths(runner, sig.example_feed())
            for call in calls.values():  # warm-up: first runs allocate arenas and plan memory
                per_call_seconds(call, 50)
            samples: dict[str, list[float]] = {name: [] for name in calls}
            names = list(calls)
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    samples[name] += per_call_seconds(calls[name], args.calls)
            base = statistics.median(samples["run"])
            print(f"{model} (intra_op_threads={runner.describe()['intra_op_threads']}, inter_op_threads={runner.describe()['inter_op_threads']}, "
                  f"{len(samples['run'])} calls per path)")
            for name, s in samples.items():
                p50 = statistics.median(s)
                p90 = statistics.quantiles(s, n=10)[-1]
                print(f"  {name:>20}: p50 {p50 * 1e6:8.1f} us   p90 {p90 * 1e6:8.1f} us   p50 / run {p50 / base:5.2f}")
    print(f"runner calling path: {runner.calling_path}")


if __name__ == "__main__":
    main()
