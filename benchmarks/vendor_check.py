"""Is each runner as fast as its vendor's own best documented path? Runner vs vendor, interleaved, one process.

For each model and backend: export once, load the runner, then alternate rounds of (a) a block of
`Runner.run_prepared` calls (what `compare` times) and (b) a block of calls through each vendor path, so
machine noise hits all alike. Every figure is a block's wall time per call, the median over rounds; every
path gets the same threads and the example inputs. Vendor paths (the vendor's tool or documented fast path):
- iree: `iree-benchmark-module` (IREE's own C tool) on the artifact's inputs, on both CPU drivers (local-sync,
  local-task), its per-iteration real time;
- onnx: an InferenceSession with the runner's SessionOptions, `run(None, feed)` (the documented call) and
  `run_with_iobinding` with OrtValues bound once (ONNX Runtime's documented fast path);
- openvino: `benchmark_app -hint latency -api sync` (OpenVINO's tool: Duration / Count, inputs random), and a
  compiled model with only PERFORMANCE_HINT=LATENCY, `InferRequest.infer()` on tensors set once;
- litert: the ai_edge_litert Interpreter's own `invoke()` loop (inputs set once, the runner's num_threads);
- xla: `jax.jit(exported.call)` on device arrays (jax's documented path for a serialized Exported);
- savedmodel: the `serving_default` signature called with keyword tensors (TF Serving's signature).
The ratio is runner / the fastest vendor path; above FLAG (10 % slower) the row is flagged: a defect to fix
or explain.

Run: `.venv/bin/python -m benchmarks.vendor_check [--models seed,mlp,cnn,benchmarks.real_models:hf_bert]
[--backends iree,onnx,...] [--rounds 5]`
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from multiexport import examples
from multiexport.exporting import RunOptions
from multiexport.exporting.options import usable_cpus
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature

BACKENDS = ("iree", "onnx", "openvino", "litert", "xla", "savedmodel")
FLAG = 1.10
FLOOR_US = 1.0  # a gap under this is the cost of one Python call into the binding, not a configuration
# A block times `calls(n)`: n calls, returning seconds per call (its own figure, for a tool).
Block = Callable[[int], float]


@dataclass
class Row:
    """One artifact: runner vs each vendor path, microseconds per call (median over rounds).

    runner_us: Runner.run_prepared. vendor_us: path name -> its figure. best: the fastest vendor path.
    ratio: runner_us / vendor_us[best]; flagged when above FLAG. runner: the runner's describe() facts.
    note: why a flagged row is slower, where the check can tell (a gap under FLOOR_US: the Python call).
    """

    model: str
    backend: str
    runner_us: float
    vendor_us: dict[str, float]
    best: str
    ratio: float
    flagged: bool
    runner: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def loop(call: Callable[[], Any]) -> Block:
    def block(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            call()
        return (time.perf_counter() - start) / n
    return block


def _param_arrays(manifest, feed) -> list[tuple[Any, np.ndarray]]:
    """(leaf, array) for the leaves the format takes (the manifest's parameters), in manifest order."""
    return [(leaf, np.asarray(feed[leaf.name])) for leaf in manifest.inputs if leaf.param is not None]


def vendor_iree(directory: Path, manifest, feed, threads: int) -> dict[str, Block]:
    from multiexport.backends.iree.native import iree_tool

    tool = str(iree_tool("iree-benchmark-module"))
    args = [a for a in manifest.native["benchmark_args"] if not a.startswith(("--device=", "--benchmark_min_time"))]

    def tool_block(driver: str) -> Block:
        def block(n: int) -> float:
            proc = subprocess.run([tool, f"--device={driver}", f"--task_topology_max_group_count={threads}", *args,
                                   f"--benchmark_min_time={n}x"], cwd=directory, capture_output=True, text=True,
                                  timeout=600, check=True)
            found = json.loads(proc.stdout)["benchmarks"][0]
            return found["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[found["time_unit"]]
        return block

    return {f"iree-benchmark-module {d}": tool_block(d) for d in ("local-sync", "local-task")}


def vendor_onnx(directory: Path, manifest, feed, threads: int) -> dict[str, Block]:
    import onnxruntime as ort

    from multiexport.backends.onnx.runner import session_options

    session = ort.InferenceSession(str(directory / manifest.files["model"]), session_options(ort, threads),
                                   providers=["CPUExecutionProvider"])
    named = {leaf.param: a for leaf, a in _param_arrays(manifest, feed)}
    binding = session.io_binding()
    values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in named.items()}
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    for output in session.get_outputs():
        binding.bind_output(output.name)
    return {"ort session.run": loop(lambda: session.run(None, named)),
            "ort run_with_iobinding": loop(lambda: (session.run_with_iobinding(binding), values))}


def vendor_openvino(directory: Path, manifest, feed, threads: int) -> dict[str, Block]:
    from multiexport.backends.openvino.runner import import_openvino

    ov = import_openvino()
    model = directory / manifest.files["model"]
    cm = ov.Core().compile_model(str(model), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = cm.create_infer_request()
    for leaf, a in _param_arrays(manifest, feed):
        request.set_tensor(cm.input(leaf.param), ov.Tensor(np.array(a), shared_memory=True))
    shapes = ",".join(f"{leaf.param}[{','.join(map(str, a.shape))}]" for leaf, a in _param_arrays(manifest, feed))
    # Every dim's layout unknown ("?"): else benchmark_app guesses a batch dim per input and refuses inputs
    # whose guessed batches differ ("Can't determine batch size"), e.g. a CNN's kernels beside its images.
    layouts = ",".join(f"{leaf.param}[{'?' * a.ndim}]" for leaf, a in _param_arrays(manifest, feed) if a.ndim)
    app = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "benchmark_app")
    import shutil
    import sys

    app = shutil.which("benchmark_app", path=str(Path(sys.executable).parent)) or app

    def benchmark_app(n: int) -> float:
        proc = subprocess.run([app, "-m", str(model), "-d", "CPU", "-hint", "latency", "-api", "sync",
                               "-niter", str(n), "-data_shape", shapes, "-layout", layouts], capture_output=True, text=True,
                              timeout=600, check=True)
        count = float(re.search(r"Count:\s+([\d.]+) iterations", proc.stdout).group(1))  # type: ignore[union-attr]
        duration = float(re.search(r"Duration:\s+([\d.]+) ms", proc.stdout).group(1))  # type: ignore[union-attr]
        return duration / count * 1e-3

    return {"openvino infer (LATENCY hint)": loop(request.infer), "benchmark_app -hint latency": benchmark_app}


def vendor_litert(directory: Path, manifest, feed, threads: int) -> dict[str, Block]:
    from ai_edge_litert.interpreter import Interpreter

    from multiexport.backends.litert.runner import signature_of

    interpreter = Interpreter(model_path=str(directory / manifest.files["model"]), num_threads=threads)
    indices = signature_of(interpreter)
    assert indices is not None
    interpreter.allocate_tensors()
    for leaf, a in _param_arrays(manifest, feed):
        interpreter.set_tensor(indices["inputs"][leaf.param], a)
    return {"Interpreter.invoke": loop(interpreter.invoke)}


def vendor_xla(directory: Path, manifest, feed, threads: int) -> dict[str, Block]:
    import jax

    from multiexport.backends.xla import load_weights

    exported = jax.export.deserialize(bytearray((directory / manifest.files["exported"]).read_bytes()))
    call = jax.jit(exported.call)
    device = jax.devices("cpu")[0]
    # baked weights lifted out of the module (--external-weights auto) follow the leaves, as the caller passes them
    weights = load_weights(directory, manifest, device) if manifest.external_weights() else []
    args = [jax.device_put(np.asarray(feed[leaf.name]), device) for leaf in manifest.inputs] + weights
    jax.block_until_ready(call(*args))
    return {"jax.jit(exported.call)": loop(lambda: jax.block_until_ready(call(*args)))}


def vendor_savedmodel(directory: Path, manifest, feed, threads: int) -> dict[str, Block]:
    import tensorflow as tf

    serving = tf.saved_model.load(str(directory)).signatures["serving_default"]
    tensors = {leaf.alias: tf.constant(a) for leaf, a in _param_arrays(manifest, feed)}
    return {"serving_default(**tensors)": loop(lambda: serving(**tensors))}


VENDOR = {"iree": vendor_iree, "onnx": vendor_onnx, "openvino": vendor_openvino, "litert": vendor_litert,
          "xla": vendor_xla, "savedmodel": vendor_savedmodel}


def check(model: str, target, backend_name: str, rounds: int, block_s: float, root: Path) -> Row:
    """Export `target` for one backend under `root` and time runner and vendor paths, interleaved."""
    backend = get_backend(backend_name)
    sig = build_signature(target)
    feed = sig.example_feed()
    artifact = backend.export(target.fn, sig, root / f"{model}-{backend_name}")
    threads = usable_cpus()
    runner = backend.load(artifact.directory, RunOptions(threads=threads, trust_artifact=True))
    prepared = runner.prepare(feed)
    blocks: dict[str, Block] = {"runner": loop(lambda: runner.run_prepared(prepared)),
                                **VENDOR[backend_name](artifact.directory, artifact.manifest, feed, threads)}
    sizes = {}
    for name, block in blocks.items():  # warm up, then size each block to about block_s
        block(3)
        sizes[name] = max(3, min(20000, int(block_s / max(block(3), 1e-7))))
    times: dict[str, list[float]] = {name: [] for name in blocks}
    for _ in range(rounds):
        for name, block in blocks.items():
            times[name].append(block(sizes[name]))
    us = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    runner_us = us.pop("runner")
    best = min(us, key=us.__getitem__)
    ratio = runner_us / us[best]
    described = runner.describe()
    gap = runner_us - us[best]
    note = (f"gap {gap:.2f} us < {FLOOR_US:g} us: one Python call into the binding (the vendor path is a C loop "
            "or a bare method)" if ratio > FLAG and gap < FLOOR_US else "")
    return Row(model, backend_name, runner_us, us, best, ratio, ratio > FLAG,
               {k: described.get(k) for k in ("driver", "compile_flags", "intra_op_threads", "intra_op_allow_spinning",
                                              "performance_hint", "num_threads") if described.get(k) is not None},
               note)


def table(rows: list[Row]) -> str:
    lines = ["| model | backend | runner (us) | vendor paths (us) | fastest vendor | runner / vendor | flag |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        paths = "; ".join(f"{k} {v:.1f}" for k, v in r.vendor_us.items())
        lines.append(f"| {r.model} | {r.backend} | {r.runner_us:.1f} | {paths} | {r.best} | {r.ratio:.2f} | "
                     f"{('> 10% slower' + (': ' + r.note if r.note else '')) if r.flagged else ''} |")
    return "\n".join(lines)


def _target(spec: str):
    """A built-in example by name (seed, mlp, cnn), else any target spec 'module:function' (as the CLI takes:
    benchmarks.real_models:hf_bert is a Hugging Face Flax BERT)."""
    if ":" not in spec:
        return getattr(examples, spec)()
    from multiexport.api import load_target

    return load_target(spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp,cnn",
                        help="comma-separated: built-in examples, or target specs module:function")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block-seconds", type=float, default=0.05, help="wall time of one timed block")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for name in args.backends.split(","):
                if not get_backend(name).available().ok:
                    print(f"{name}: unavailable ({get_backend(name).available().reason})")
                    continue
                rows.append(check(model.rsplit(":", 1)[-1], _target(model), name, args.rounds, args.block_seconds,
                                  Path(tmp)))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1))


if __name__ == "__main__":
    main()
