"""The decoder's greedy generation on the accelerator: jax.jit on the TPU against pjrt_run on libtpu, token by token.

    python -m benchmarks.tpu_llm OUT_DIR [--sizes tiny,1b] [--steps 32] [--device tpu|cpu]

For each size of benchmarks/real_models/llm.py: this process (JAX on the CPU: one process owns the chip) draws the
weights once, exports the prefill and the decode step to XLA for the CPU and the TPU with the weights as input
leaves (the cache donated: `format.aliases`), and saves the weights; then
1. one TPU process (`--jit-worker`) runs `llm.greedy` under jax.jit on the chip with those weights, timing each
   decode step (dispatch to ready, the token's argmax on the device);
2. pjrt_run (the native PJRT consumer) on libtpu runs the prefill artifact once, then the decode artifact for the
   same steps with the cache kept on the device (`benchmarks.llm_native.native_greedy`: --carry, --greedy, --count).
The tokens must be equal: the same StableHLO compiled by the same plugin. Writes OUT_DIR/tpu_llm.json and prints a
Markdown table. `--device cpu` runs the same on the CPU (jax.jit on the CPU, pjrt_run on the CPU PJRT plugin): the
rehearsal tests/benchmarks/test_tpu_llm.py runs in CI, where there is no TPU.
On the lent TPU machine, after `bash benchmarks/tpu_check.sh --fetch` here (the carried wheels, as the TPU check):
    run(command='python3 -m venv --system-site-packages /tmp/gv && /tmp/gv/bin/pip install -q --no-index --no-deps
        .tpu-wheels/*.whl && mkdir -p /tmp/bw && cp -r benchmarks /tmp/bw/ && cd /tmp/bw &&
        MULTIEXPORT_PJRT_INCLUDE=$OLDPWD/.tpu-wheels/include timeout 560 /tmp/gv/bin/python -m benchmarks.tpu_llm
        "$OUT/llm" --sizes tiny,1b', carry=[".tpu-wheels"], timeout_s=590)
(benchmarks/ from a copy, so that the wheel's multiexport, with its backends, is the one imported.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _nest(flat: dict[str, np.ndarray]) -> dict[str, Any]:
    """The nested dict back from `llm_native._leaves`' dotted names, the first part dropped."""
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        node = tree
        *parents, last = name.split(".")[1:]
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return tree


def jit_worker(params_npz: Path, size: str, steps: int, out: Path) -> None:
    """In the process that owns the device: greedy tokens under jax.jit with the saved weights, and each decode
    step's time (call to the token ready on the host)."""
    import functools

    import jax
    import jax.numpy as jnp

    from benchmarks.real_models import llm

    cfg = llm.CONFIGS[size]
    with np.load(params_npz) as saved:
        params = jax.device_put(_nest({k: saved[k] for k in saved.files}))
    prompt = llm.example_prompt(cfg)
    run_prefill = jax.jit(functools.partial(llm.prefill, cfg))
    run_decode = jax.jit(functools.partial(llm.decode, cfg), donate_argnums=(3,))
    t0 = time.perf_counter()
    first = run_prefill(params, prompt)
    token = jnp.argmax(first["logits"], axis=-1).astype(jnp.int32)
    tokens = [np.asarray(token)]
    prefill_ms = (time.perf_counter() - t0) * 1e3  # compile included, as the native row's
    cache = first["cache"]
    step_ms = []
    for i in range(steps):
        t0 = time.perf_counter()
        out_ = run_decode(params, token, jnp.int32(cfg.prompt + i), cache)
        token = jnp.argmax(out_["logits"], axis=-1).astype(jnp.int32)
        tokens.append(np.asarray(token))  # the host needs the token (as pjrt_run's --greedy downloads it)
        step_ms.append((time.perf_counter() - t0) * 1e3)
        cache = out_["cache"]
    out.write_text(json.dumps({"tokens": np.stack(tokens, axis=1).tolist(), "prefill_ms": prefill_ms,
                               "step_ms": step_ms, "device": str(jax.devices()[0]),
                               "platform": jax.devices()[0].platform}))


def _summary(ms: list[float]) -> dict[str, float]:
    """Median and p90 of the steps after the first (which compiles the decode step; pjrt_run compiles apart)."""
    steady = np.asarray(ms[1:] or ms, dtype=np.float64)
    return {"median_ms": float(np.median(steady)), "p90_ms": float(np.percentile(steady, 90)), "steps": int(steady.size)}


def one_size(size: str, steps: int, device: str, work: Path, timeout: float) -> dict[str, Any]:
    """Export, jax.jit on the device in its own process, pjrt_run on the device; one row."""
    from benchmarks.llm_native import _leaves, native_greedy
    from benchmarks.real_models import llm
    from multiexport import api
    from multiexport.environment import tpu_worker_environment

    cfg = llm.CONFIGS[size]
    row: dict[str, Any] = {"size": size, "parameters": cfg.parameters, "device": device, "tokens": steps}
    params = llm.init_params(cfg)
    flat = dict(_leaves("params", params))
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "params.npz", **flat)
    prompt = llm.example_prompt(cfg)
    platforms = ("cpu", "tpu") if device == "tpu" else ("cpu",)
    t0 = time.perf_counter()
    for step, make in (("prefill", llm.prefill_target), ("decode", llm.decode_target)):
        api.export(make(size), work / step, "xla", platforms=platforms)
    row["export_s"] = round(time.perf_counter() - t0, 1)
    env = {**os.environ, **(tpu_worker_environment() if device == "tpu" else {"JAX_PLATFORMS": "cpu"})}
    done = subprocess.run([sys.executable, "-m", "benchmarks.tpu_llm", "--jit-worker", str(work / "params.npz"),
                           size, str(steps - 1), str(work / "jit.json")], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        row.update(status="failed", reason=f"jax.jit worker: {done.stderr.strip()[-1500:]}")
        return row
    jit = json.loads((work / "jit.json").read_text())
    got = native_greedy(work / "prefill", work / "decode", params, prompt, cfg.layers, steps - 1, work / "native",
                        timeout=timeout, device=device)
    del params
    ref = np.asarray(jit["tokens"])
    equal = bool(np.array_equal(ref, got["tokens"]))
    row.update(status="ok" if equal else "tokens-differ", equal=equal, jit_platform=jit["platform"],
               jit_device=jit["device"], jax_jit=ref.tolist(), pjrt=got["tokens"].tolist(),
               jit_prefill_ms=jit["prefill_ms"], pjrt_prefill_ms=got["prefill_ms"],
               jit_decode=_summary(jit["step_ms"]), pjrt_decode=got["decode"])
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of the rows."""
    lines = ["| size | parameters | device | status | tokens equal | jax.jit ms/token p50 [p90] | pjrt_run ms/token "
             "p50 [p90] | export s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        jit = r.get("jit_decode") or {}
        nat = r.get("pjrt_decode") or {}  # the program's own clock per step (its compile is apart: compile_ms)
        nat_txt = f"{nat['median_ms']:.3f} [{nat['p90_ms']:.3f}]" if nat else "-"
        jit_txt = f"{jit['median_ms']:.3f} [{jit['p90_ms']:.3f}]" if jit else "-"
        lines.append(f"| {r['size']} | {r['parameters']:,} | {r.get('jit_device', r['device'])} | {r['status']} | "
                     f"{r.get('equal', '-')} ({r['tokens']}) | {jit_txt} | {nat_txt} | {r.get('export_s', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--jit-worker":
        _, npz, size, steps, out = argv
        jit_worker(Path(npz), size, int(steps), Path(out))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tpu_llm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where tpu_llm.json and the work directories go")
    parser.add_argument("--sizes", default="tiny", help="llm.py configs, comma-separated (default: tiny)")
    parser.add_argument("--steps", type=int, default=32, help="tokens generated, the prefill's one included")
    parser.add_argument("--device", choices=("tpu", "cpu"), default="tpu",
                        help="tpu: jax.jit on the chip and pjrt_run on libtpu; cpu: the same on the CPU (rehearsal)")
    parser.add_argument("--timeout", type=float, default=400, help="seconds for each process (default: 400)")
    args = parser.parse_args(argv)
    from multiexport.environment import keep_jax_off_the_tpu

    keep_jax_off_the_tpu()  # this process exports on the CPU; the jax.jit worker owns the chip
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in [s for s in args.sizes.split(",") if s]:
        t0 = time.perf_counter()
        try:
            row = one_size(size, args.steps, args.device, args.out / size, args.timeout)
        except Exception as exc:  # one size's failure is its row; the next size still runs
            row = {"size": size, "parameters": 0, "device": args.device, "tokens": args.steps, "status": "failed",
                   "reason": " ".join(f"{type(exc).__name__}: {exc}".split())[:1500]}
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        (args.out / "tpu_llm.json").write_text(json.dumps({"rows": rows}, indent=1))
        print(f"[tpu_llm] {size}: {row['status']} in {row['wall_s']} s {row.get('reason', '')}", flush=True)
    print(table(rows))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
