"""Greedy generation in the native consumers, from the exported prefill and decode-step artifacts, against jax.jit.

    python -m benchmarks.llm_native --size tiny --steps 32 --backends xla,openvino --out /tmp/llm-native [--keep]

Exports (per backend) the prefill and the decode step of benchmarks/real_models/llm.py with the weights as input
leaves (or, --baked, lifted to the artifact's weights file), then generates `steps` tokens after the example prompt
in each backend's native consumer, one process for the prefill and one for the whole decode loop:
- XLA, PJRT C API: `pjrt_run` runs the prefill artifact once, then the decode artifact with `--steps N`: every
  `out.cache.layer_i.k/v` output goes back in as `cache.layer_i.k/v` as the device buffer itself (`--carry`),
  the argmax of `out.logits` becomes the next `token` (`--greedy`) and `pos` counts up (`--count`); weights are
  uploaded once. Per-token latency is the program's own clock (call + argmax + feeding, per step).
- OpenVINO, C API: `ov_run` with the same flags: one infer request, each cache leaf two tensors swapped between
  its input and output ports (the next call reads the cache where the last one wrote it: no copy).
- jax.jit: `llm.greedy`, the same functions under jax.jit.
The tokens must be equal (the greedy choices of two programs that agree to a few ulps), and are printed side by
side with the per-token latency.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from multiexport.native.run import command

LOOP_BACKENDS = ("xla", "openvino")  # backends whose native consumer has the decode loop's flags


def _leaves(prefix: str, tree: Mapping[str, Any]):
    """(dotted name, array) of a nested dict, as multiexport names them (`params.layer_0.wq`)."""
    for key, value in tree.items():
        if isinstance(value, Mapping):
            yield from _leaves(f"{prefix}.{key}", value)
        else:
            yield f"{prefix}.{key}", np.asarray(value)


def _write_inputs(artifact: Path, feed: Mapping[str, Any], inputs: Path) -> None:
    """One .npy per leaf argument of the artifact's native section, named as the section says."""
    native = json.loads((artifact / "manifest.json").read_text())["native"]
    inputs.mkdir(parents=True, exist_ok=True)
    for entry in native["args"]:
        if entry.get("kind") == "leaf":
            np.save(inputs / entry["file"], np.asarray(feed[entry["leaf"]], order="C"), allow_pickle=False)


def _read_outputs(artifact: Path, outputs: Path) -> dict[str, np.ndarray]:
    native = json.loads((artifact / "manifest.json").read_text())["native"]
    return {e["leaf"]: np.load(outputs / e["file"]) for e in native["results"] if e.get("kind") == "leaf"}


def _native(artifact: Path, work: Path, extra: list[str], timeout: float, device: str = "cpu") -> str:
    argv, env = command(artifact, inputs_dir=str(work / "inputs"), outputs_dir=str(work / "outputs"), device=device)
    (work / "outputs").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv + extra, env=env, cwd=artifact, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def native_greedy(prefill_dir: Path, decode_dir: Path, params: Mapping[str, Any], prompt: np.ndarray, layers: int,
                  steps: int, work: Path, timeout: float = 600, carry: bool = True, device: str = "cpu") -> dict[str, Any]:
    """Prefill once, then `steps` decode steps in one process of the artifacts' native consumer (pjrt_run, ov_run)
    with the cache carried from call to call (`carry=False`: every step reads the prefill's cache again, a planted
    fault for tests). device: the PJRT plugin pjrt_run loads ("tpu": libtpu; `multiexport.native.run.command`).
    Returns {"tokens": int32[B, steps + 1], "prefill_ms": wall time of the prefill program's run (compile included),
    "decode": the loop's timing JSON (per-step wall times)}."""
    feed = dict(_leaves("params", params))
    pre = work / "prefill"
    _write_inputs(prefill_dir, {**feed, "tokens": prompt}, pre / "inputs")
    t0 = time.perf_counter()
    _native(prefill_dir, pre, [], timeout, device)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    out = _read_outputs(prefill_dir, pre / "outputs")
    first = np.argmax(out["out.logits"], axis=-1).astype(np.int32)
    dec = work / "decode"
    cache = {f"cache.layer_{i}.{kv}": out[f"out.cache.layer_{i}.{kv}"] for i in range(layers) for kv in "kv"}
    _write_inputs(decode_dir, {**feed, **cache, "token": first, "pos": np.int32(prompt.shape[1])}, dec / "inputs")
    flags = ["--steps", str(steps), "--greedy", "out.logits=token", "--count", "pos", "--tokens",
             str(dec / "tokens.npy")]
    for name in cache if carry else ():
        flags += ["--carry", f"out.{name}={name}"]
    stdout = _native(decode_dir, dec, flags, timeout, device)
    timing = json.loads(stdout.strip().splitlines()[-1])
    generated = np.load(dec / "tokens.npy")  # [steps, B]
    tokens = np.concatenate([first[:, None], generated.T], axis=1)
    return {"tokens": tokens, "prefill_ms": prefill_ms, "decode": timing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny", help="llm.py config: tiny or 1b")
    parser.add_argument("--steps", type=int, default=32, help="tokens generated, the prefill's first one included")
    parser.add_argument("--backends", default="xla,openvino",
                        help="comma-separated backends whose native consumer runs the loop: xla (pjrt_run), "
                             "openvino (ov_run) (default: both)")
    parser.add_argument("--baked", action="store_true",
                        help="export the *_baked targets: the weights lifted to the artifact's weights file, which "
                             "the consumer reads itself (no weights pass through .npy inputs; for the 1 B config)")
    parser.add_argument("--from-compare", type=Path, metavar="DIR",
                        help="no export: run the artifacts a `benchmarks.llm` run left in DIR (DIR/prefill/BACKEND and "
                             "DIR/decode/BACKEND, the *_baked targets' compares), e.g. the 1 B compare's, which this "
                             "machine cannot afford to export twice")
    parser.add_argument("--out", type=Path, default=Path("multiexport-out/llm-native"))
    parser.add_argument("--keep", action="store_true", help="keep the artifacts (default: removed at the end)")
    args = parser.parse_args(argv)
    import gc

    from benchmarks.real_models import llm

    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(LOOP_BACKENDS))
    if unknown or not backends:
        parser.error(f"--backends | got {args.backends!r}, expected some of {', '.join(LOOP_BACKENDS)}")
    cfg = llm.CONFIGS[args.size]
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "_baked" if args.baked else ""
    export_s: dict[str, float | None] = {}
    artifacts = {b: (args.out / b / "prefill", args.out / b / "decode") for b in backends}
    if args.from_compare is not None:
        args.baked = True  # the compares export the *_baked targets
        artifacts = {b: (args.from_compare / "prefill" / b, args.from_compare / "decode" / b) for b in backends}
        missing = [str(d) for pair in artifacts.values() for d in pair if not (d / "manifest.json").is_file()]
        if missing:
            parser.error(f"--from-compare | no artifact in {', '.join(missing)}")
        export_s = dict.fromkeys(backends)
    for backend in backends if args.from_compare is None else ():
        t0 = time.perf_counter()
        for step, directory in zip(("prefill", "decode"), artifacts[backend]):  # each export in its own process
            subprocess.run([sys.executable, "-m", "multiexport", "export",
                            f"benchmarks.real_models.llm:llm_{args.size}_{step}{suffix}", "--backend", backend,
                            "--out-dir", str(directory)], check=True, stdout=subprocess.DEVNULL)
        export_s[backend] = time.perf_counter() - t0
    params = llm.init_params(cfg)
    prompt = llm.example_prompt(cfg)
    t0 = time.perf_counter()
    ref = llm.greedy(cfg, params, prompt, args.steps - 1)
    jit_s = time.perf_counter() - t0
    if args.baked:  # the consumers read the weights from the artifacts: this process lets go of its copy first
        params = {}
        gc.collect()
    report: dict[str, Any] = {"size": args.size, "parameters": cfg.parameters, "baked": args.baked,
                              "tokens": args.steps, "jax_jit": ref.tolist(), "jax_jit_generate_s": jit_s}
    equal = True
    for backend in backends:
        got = native_greedy(*artifacts[backend], params, prompt, cfg.layers, args.steps - 1,
                            args.out / backend / "work")
        same = bool(np.array_equal(ref, got["tokens"]))
        equal = equal and same
        report[backend] = {"equal": same, "tokens": got["tokens"].tolist(), "export_s": export_s[backend],
                           "prefill_ms": got["prefill_ms"], "decode": got["decode"]}
    report["equal"] = equal
    print(json.dumps(report))
    if not args.keep:
        shutil.rmtree(args.out, ignore_errors=True)
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
