"""Does the harness add overhead? Its p50 vs a bare hand-written loop on the same runtime, same process.

For each backend: export a model, load it once, then alternate blocks of (a) a bare loop calling the
runtime directly, written by hand per backend, and (b) the harness (`bench.time_calls` over
`Runner.run_prepared`), so machine noise hits both alike. Goal: harness p50 within 5% of bare p50.
The bare loops use each runner's own calling path (XLA, SavedModel, ONNX, LiteRT, OpenVINO), except
IREE's, which uses iree.runtime's public high-level call on the driver the export chose: there a ratio
below 1 is the runner's faster path showing. Every bare loop feeds only the leaves the manifest makes
parameters (`leaf.param`): the formats drop unused leaves (the seed's `foo.bar`).

Run: `.venv/bin/python -m benchmarks.harness_overhead [--models seed,mlp] [--backends xla,...] [--rounds 10]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.measure.bench import BenchConfig, time_calls


def bare_xla(directory: Path, feed_arrays, manifest):
    import jax

    exported = jax.export.deserialize(bytearray((directory / "model.jax_exported").read_bytes()))
    call = jax.jit(exported.call)
    args = [jax.device_put(a) for a in feed_arrays]
    jax.block_until_ready(call(*args))
    return lambda: jax.block_until_ready(call(*args))


def bare_savedmodel(directory: Path, feed_arrays, manifest):
    """The restored signature, keyword inputs bound once, `_call_flat` per call (the runner's chosen path)."""
    import tensorflow as tf
    from tensorflow.python.eager.polymorphic_function import function_type_utils

    serving = tf.saved_model.load(str(directory)).signatures["serving_default"]
    tensors = {leaf.alias: tf.constant(a) for leaf, a in zip(manifest.inputs, feed_arrays) if leaf.param is not None}
    bound = function_type_utils.canonicalize_function_inputs((), tensors, serving.function_type)
    flat = list(serving.function_type.unpack_inputs(bound))
    captured = serving.captured_inputs
    return lambda: serving._call_flat(flat, captured)


def bare_onnx(directory: Path, feed_arrays, manifest):
    """An InferenceSession with IO binding: inputs bound once, outputs left in ORT memory."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(directory / "model.onnx"), providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    keep = []
    for leaf, a in zip(manifest.inputs, feed_arrays):
        if leaf.param is not None:
            value = ort.OrtValue.ortvalue_from_numpy(a)
            keep.append(value)
            binding.bind_ortvalue_input(leaf.param, value)
    for leaf in manifest.outputs:
        binding.bind_output(leaf.param)
    return lambda: (session.run_with_iobinding(binding), keep)


def bare_iree(directory: Path, feed_arrays, manifest):
    """iree.runtime's own high-level call: the module's main on device arrays uploaded once."""
    import iree.runtime as rt

    driver = manifest.format["drivers"]["llvm-cpu"]
    config = rt.Config(driver)
    module = rt.load_vm_flatbuffer_file(str(directory / "model.vmfb"), driver=driver)
    kept = sorted((leaf.param, a) for leaf, a in zip(manifest.inputs, feed_arrays) if leaf.param is not None)
    args = [rt.asdevicearray(config.device, a) for _, a in kept]
    main = module.main
    return lambda: main(*args)


def bare_litert(directory: Path, feed_arrays, manifest):
    """The Interpreter (num_threads as the runner passes it): inputs set once at the signature's indices,
    `invoke()` per call."""
    from multiexport.backends.litert.runner import open_interpreter, signature_of
    from multiexport.exporting.options import usable_cpus

    interpreter = open_interpreter(str(directory / manifest.files["model"]), usable_cpus())
    indices = signature_of(interpreter)
    assert indices is not None
    interpreter.allocate_tensors()
    for leaf, a in zip(manifest.inputs, feed_arrays):
        if leaf.param is not None:
            interpreter.set_tensor(indices["inputs"][leaf.param], a)
    return interpreter.invoke


def bare_openvino(directory: Path, feed_arrays, manifest):
    """A CPU compiled model with the runner's config, one InferRequest, input tensors set once, `infer()`."""
    from multiexport.backends.openvino.runner import config, import_openvino
    from multiexport.exporting.options import usable_cpus

    ov = import_openvino()
    cm = ov.Core().compile_model(str(directory / manifest.files["model"]), "CPU", config(usable_cpus()))
    request = cm.create_infer_request()
    for leaf, a in zip(manifest.inputs, feed_arrays):
        if leaf.param is not None:
            request.set_tensor(cm.input(leaf.param), ov.Tensor(np.array(a), shared_memory=True))  # a writeable copy, as the runner makes
    return request.infer


BARE = {"xla": bare_xla, "savedmodel": bare_savedmodel, "onnx": bare_onnx, "iree": bare_iree, "litert": bare_litert,
        "openvino": bare_openvino}


def bare_loop(call, n: int) -> list[int]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp")
    parser.add_argument("--backends", default=",".join(BARE))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300, help="calls per block")
    args = parser.parse_args()
    config = BenchConfig(warmup_iters=20, warmup_time=0.0, min_iters=args.calls, bench_time=0.0, max_iters=args.calls)
    print(f"{'backend':>10} {'model':>6} {'bare p50 us':>12} {'harness p50 us':>15} {'ratio':>7}")
    for backend_name in args.backends.split(","):
        backend = get_backend(backend_name)
        if not backend.available().ok:
            print(f"{backend_name:>10}: unavailable ({backend.available().reason})")
            continue
        for model in args.models.split(","):
            target = getattr(examples, model)()
            sig = build_signature(target)
            with tempfile.TemporaryDirectory() as tmp:
                artifact = backend.export(target.fn, sig, Path(tmp) / "a")
                feed = sig.example_feed()
                runner = backend.load(artifact.directory)
                prepared = runner.prepare(feed)
                runner.run_prepared(prepared)
                ordered = [feed[leaf.name] for leaf in artifact.manifest.inputs]
                bare = BARE[backend_name](artifact.directory, ordered, artifact.manifest)
                bare_times, harness_times = [], []
                for _ in range(args.rounds):
                    bare_times += bare_loop(bare, args.calls)
                    harness_times += list(time_calls(lambda: runner.run_prepared(prepared), config)[0])
                b, h = statistics.median(bare_times) / 1e3, statistics.median(harness_times) / 1e3
                print(f"{backend_name:>10} {model:>6} {b:12.2f} {h:15.2f} {h / b:7.3f}")


if __name__ == "__main__":
    main()
