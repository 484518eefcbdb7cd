"""The one process that owns the TPU: jax.jit and the XLA artifact on the chip, timed there.

    python -m multiexport.run.tpu_worker JOB.json   (started with JAX_PLATFORMS=tpu,cpu by `compare --device tpu`
                                                     and benchmarks/tpu_check.py; the parent keeps JAX on the CPU)

JOB: {"targets": {name: TARGET string}, "feeds": {name: .npz}, "artifacts": {name: XLA artifact lowered for tpu},
"out": dir, "bench_time": seconds, "matmul_precision": the reference's (default "default"), "platform": "tpu" (or
"cpu", to rehearse this worker without a TPU)}. libtpu lets one process hold a chip, so everything that runs on the TPU
through JAX runs here, and exits before the native consumer (pjrt_run on libtpu, another process) takes the
chip. Per target, on the parent's inputs:
jax.jit at the default matmul precision (the reference on the TPU) and at "highest", the XLA artifact
(jax.jit(Exported.call), multiexport's XlaRunner) on the TPU, timed in interleaved rounds with inputs on the
device and each call synchronised (block_until_ready); host->device and device->host transfers are timed apart.
The harness overhead: the XlaRunner's timed call against a bare jitted loop on the same executable, interleaved.
Writes JOB's out/tpu.json (rows, overhead) and out/NAME.tpu.npz (each runner's outputs, "RUNNER/LEAF"); without
a TPU every row is `no-tpu` with JAX's own reason.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..exporting.contract import RunOptions
from ..exporting.jit_runner import JitRunner
from ..exporting.manifest import Manifest
from ..files.npz import load_npz, save_npz
from ..leaves import build_signature, load_target
from ..measure.bench import BenchConfig, summarize, time_calls
from ..measure.pairing import round_orders
from ..measure.reference import at_precision, reference_manifest

ROUNDS = 5
RUNNERS = ("jax.jit", "jax.jit highest", "xla")
DEFAULT_OUTPUTS = "jax.jit default"  # saved (untimed) when the reference runs at another matmul precision


def timed(calls: dict[str, Callable[[], None]], bench_time: float, rounds: int = ROUNDS) -> dict[str, dict]:
    """Each call timed in `rounds` interleaved rounds (order rotated and reversed, as compare's paired rounds):
    p50 per call in ms with its 95 % interval (order statistics of the pooled calls), and the call count."""
    config = BenchConfig(warmup_iters=3, warmup_time=0.0, min_iters=10, bench_time=bench_time / rounds)
    samples: dict[str, list[np.ndarray]] = {name: [] for name in calls}
    for order in round_orders(list(calls), rounds):
        for name in order:
            samples[name].append(time_calls(calls[name], config)[0])
    out = {}
    for name, parts in samples.items():
        stats = summarize(np.concatenate(parts))
        out[name] = {"p50_ms": stats.p50_ms, "ci95_ms": [stats.ci95_low_ms, stats.ci95_high_ms], "calls": stats.n}
    return out


def transfers(device, arrays: list[np.ndarray], call: Callable[..., Any], repeats: int = 20) -> dict[str, float]:
    """p50 of host->device (device_put of every input, synchronised) and device->host (np.asarray of fresh
    outputs, the call itself finished first), in ms."""
    import time

    import jax

    h2d, d2h = [], []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        on_device = jax.block_until_ready([jax.device_put(a, device) for a in arrays])
        h2d.append(time.perf_counter_ns() - t0)
        outs = jax.block_until_ready(call(*on_device))
        t0 = time.perf_counter_ns()
        [np.asarray(o) for o in outs]
        d2h.append(time.perf_counter_ns() - t0)
    return {"h2d_ms": float(np.median(h2d)) / 1e6, "d2h_ms": float(np.median(d2h)) / 1e6}


def check_target(name: str, job: dict, device) -> tuple[list[dict], dict | None, dict[str, np.ndarray]]:
    """Rows of one model on the TPU, its harness overhead, and the outputs to save."""
    import jax


    target = load_target(job["targets"][name])
    sig = build_signature(target)
    feed = load_npz(job["feeds"][name], "TPU worker feed")
    flat = sig.flat_function(target.fn)
    options = RunOptions()
    # the TPU reference: jax.jit at the compare's --matmul-precision (the TPU's own default unless asked)
    jit_default = JitRunner(reference_manifest(sig), Path("."), options,
                            at_precision(flat, job.get("matmul_precision", "default")), device)

    def highest(*args):
        with jax.default_matmul_precision("highest"):
            return flat(*args)

    jit_highest = JitRunner(reference_manifest(sig), Path("."), options, highest, device)
    artifact = Path(job["artifacts"][name])
    manifest = Manifest.read(artifact)
    exported = jax.export.deserialize(bytearray(manifest.path(artifact, "exported").read_bytes()))
    if manifest.external_weights():
        raise ValueError(f"Artifact '{artifact}' | its weights are lifted to a file, which this TPU stage does not load "
                         "yet, expected baked weights")
    # what the XLA backend's runner is: jax.jit(Exported.call) on inputs committed to the device
    xla = JitRunner(manifest, artifact, options, exported.call, device, x64=bool(manifest.supports.get("x64")))
    runners = {"jax.jit": jit_default, "jax.jit highest": jit_highest, "xla": xla}
    outputs = {label: runner(feed) for label, runner in runners.items()}
    prepared = {label: runner.prepare(feed) for label, runner in runners.items()}
    bare_fn = jax.jit(exported.call)
    bare_args = prepared["xla"]
    calls = {label: _timed_call(runner, prepared[label]) for label, runner in runners.items()}
    calls["bare"] = lambda: jax.block_until_ready(bare_fn(*bare_args))
    times = timed(calls, job["bench_time"])
    moved = transfers(device, [np.asarray(a) for a in bare_args], bare_fn)  # the module's own arguments
    reference = outputs["jax.jit"]
    rows = []
    for label in runners:
        err = {leaf: err_scale(outputs[label][leaf], reference[leaf]) for leaf in reference}
        rows.append({"model": name, "runner": label, "device": "tpu", "status": "ok", "reason": "",
                     "vs": "jax.jit on the TPU", "err": err, **times[label],
                     **(moved if label == "xla" else {})})
    overhead = {"model": name, "runner_p50_ms": times["xla"]["p50_ms"], "bare_p50_ms": times["bare"]["p50_ms"],
                "ratio": times["xla"]["p50_ms"] / times["bare"]["p50_ms"], "calls": times["xla"]["calls"]}
    saved = {f"{label}/{leaf}": np.asarray(v) for label, outs in outputs.items() for leaf, v in outs.items()}
    if job.get("matmul_precision", "default") != "default":  # what the chip's own default computes, for the bound
        plain = JitRunner(reference_manifest(sig), Path("."), options, flat, device)(feed)
        saved.update({f"{DEFAULT_OUTPUTS}/{leaf}": np.asarray(v) for leaf, v in plain.items()})
    return rows, overhead, saved


def _timed_call(runner: Any, prepared: Any) -> Callable[[], None]:
    return lambda: runner.run_prepared(prepared)


def err_scale(got, want) -> float:
    """max |got - want| / max |want| (integers and exact matches give 0; a shape mismatch is inf)."""
    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(b), initial=0.0)), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(a - b), initial=0.0)) / scale


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    out = Path(job["out"])
    result: dict[str, Any] = {"rows": [], "overhead": [], "device": "", "reason": ""}
    try:
        import jax

        platform = job.get("platform", "tpu")  # "cpu" only to rehearse this worker where there is no TPU (tests)
        device = jax.devices(platform)[0]
        result["device"] = f"{device.device_kind} ({device.platform}, {len(jax.devices(platform))} device(s) seen)"
    except Exception as exc:  # noqa: BLE001 - JAX says why there is no TPU (RuntimeError, or libtpu's lock)
        result["reason"] = f"JAX sees no TPU: {' '.join(str(exc).split())[:300]}"
        for name in job["targets"]:
            for label in RUNNERS:
                result["rows"].append({"model": name, "runner": label, "device": "tpu", "status": "no-tpu",
                                       "reason": result["reason"]})
        (out / "tpu.json").write_text(json.dumps(result, indent=1))
        return 0
    for name in job["targets"]:
        try:
            rows, overhead, saved = check_target(name, job, device)
        except Exception as exc:  # noqa: BLE001 - one model's failure is its rows, the others still run
            said = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
            traceback.print_exc()
            rows = [{"model": name, "runner": label, "device": "tpu", "status": "failed", "reason": said}
                    for label in RUNNERS]
            overhead, saved = None, {}
        result["rows"] += rows
        if overhead:
            result["overhead"].append(overhead)
        if saved:
            save_npz(out / f"{name}.tpu.npz", saved)  # not np.savez: a leaf named `file` would collide
        (out / "tpu.json").write_text(json.dumps(result, indent=1))  # after each model: a timeout keeps the rest
        print(f"[tpu worker] {name}: " + ", ".join(f"{r['runner']} {r['status']}" for r in rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
