"""The compare's TPU rows (`--device tpu`, or `--device auto` on a machine with a TPU): one process owns the chip.

The parent and every CPU worker keep JAX on the CPU (`environment.keep_jax_off_the_tpu`), so the CPU rows are the
compare's ordinary rows. After them, this stage exports the XLA artifact once more, lowered for the TPU and the CPU,
and starts one TPU worker (`run.tpu_worker`) that runs jax.jit on the TPU at the default matmul precision (the TPU
reference) and at "highest", and the artifact on the TPU, timed in interleaved rounds with each call synchronised
and the transfers timed apart. With `--native`, pjrt_run on libtpu then runs the same artifact (the worker has
exited: libtpu lets one process hold the chip). Each TPU row is judged against jax.jit on the TPU; jax.jit on the
CPU (the compare's reference) against the TPU at both precisions says how much the TPU's arithmetic alone moves
an output, which bounds what a CPU row can differ from a model checked on the TPU beyond its own error.
A row that cannot run on the TPU is `no-tpu` with the reason, never a CPU run. The result lands in
results.json under `device.tpu`, and each row is said on the terminal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import numpy as np

from ..environment import tpu_presence, tpu_worker_environment
from ..errors import MultiexportError
from ..exporting.manifest import Manifest
from ..exporting.options import ExportOptions
from ..exporting.pipeline import export_artifact
from ..exporting.registry import get_backend
from ..files.npz import load_npz, save_npz
from ..files.temporary import make_temporary
from ..measure.bench import summarize
from ..native.run import run
from ..run.runs import run_artifact
from ..run.tpu_worker import DEFAULT_OUTPUTS, RUNNERS, err_scale
from .stages import Context, Prepared

# An XLA artifact on the TPU runs the module jax.jit runs there (bit-identical, measured on a TPU v5e); above this
# error / max|ref| against jax.jit on the TPU a TPU row is parity-failed.
TPU_PARITY = 1e-5
# Set to "cpu", the TPU worker runs its rows on the CPU (job platform "cpu"): the whole stage and the report's TPU
# sections rehearsed on a machine without a TPU (tests, CI). Never set on a TPU machine by multiexport itself.
REHEARSAL_ENV = "MULTIEXPORT_TPU_REHEARSAL"


def tpu_stage(ctx: Context, prep: Prepared) -> dict[str, Any]:
    """The TPU rows of this compare, for results.json's `device.tpu`."""
    here = tpu_presence()
    if ctx.spec is None:
        return _none("the TPU worker builds the target from its TARGET string, and this compare was given a Target "
                     "object (the Python API): run `multiexport compare TARGET --device tpu`", here.describe())

    work = make_temporary("tpu")
    try:
        return _stage(ctx, prep, work, here.describe())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _none(reason: str, machine: str) -> dict[str, Any]:
    rows = [{"runner": r, "device": "tpu", "status": "no-tpu", "reason": reason} for r in ("jax.jit", "xla")]
    return {"machine": machine, "reason": reason, "rows": rows, "overhead": [], "arithmetic": {}}


def _stage(ctx: Context, prep: Prepared, work, machine: str) -> dict[str, Any]:
    config = ctx.config
    ctx.progress("TPU: exporting xla for tpu,cpu, then one TPU worker (jax.jit and xla on the chip)")
    artifact = work / "xla"
    export_artifact(get_backend("xla"), ctx.target.fn, prep.sig, artifact,
                    ExportOptions(platforms=("cpu", "tpu"), keep_unused=config.keep_unused))
    feed = prep.trials[0].feed
    save_npz(work / "feed.npz", {k: np.asarray(v) for k, v in feed.items()})
    name = ctx.target.name
    bench_time = config.bench.bench_time if config.bench is not None else 0.2
    job = {"targets": {name: ctx.spec}, "feeds": {name: str(work / "feed.npz")}, "artifacts": {name: str(artifact)},
           "out": str(work), "bench_time": bench_time, "matmul_precision": config.matmul_precision}
    rehearsal = os.environ.get(REHEARSAL_ENV) == "cpu"
    if rehearsal:
        job["platform"] = "cpu"
    (work / "job.json").write_text(json.dumps(job))
    platforms = {"JAX_PLATFORMS": "cpu"} if rehearsal else tpu_worker_environment()
    proc = subprocess.Popen([sys.executable, "-m", "multiexport.run.tpu_worker", str(work / "job.json")],
                            env={**os.environ, **platforms, "TMPDIR": str(work)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=config.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        err = f"the TPU worker ran past {config.timeout:g} s (--timeout) and was stopped"
    found = work / "tpu.json"
    result: dict[str, Any] = json.loads(found.read_text()) if found.is_file() else {
        "rows": [{"runner": r, "device": "tpu", "status": "failed",
                  "reason": ((err or "").strip().splitlines() or ["the TPU worker wrote nothing"])[-1]} for r in RUNNERS],
        "overhead": [], "reason": ""}
    outputs = work / f"{name}.tpu.npz"
    saved = load_npz(outputs, "TPU outputs") if outputs.is_file() else {}
    # What the TPU's own bf16 passes move each output: jax.jit at the default matmul precision against "highest"
    # (the reference itself unless --matmul-precision ran it at another).
    plain = DEFAULT_OUTPUTS if any(k.startswith(f"{DEFAULT_OUTPUTS}/") for k in saved) else "jax.jit"
    own = {k.split("/", 1)[1]: err_scale(v, saved[f"jax.jit highest/{k.split('/', 1)[1]}"])
           for k, v in saved.items() if k.startswith(f"{plain}/")}
    for row in result["rows"]:
        row.pop("model", None)
        if row["runner"] == "xla":
            judge_tpu_row(row, own)
    arithmetic: dict[str, dict[str, float]] = {}
    if saved:
        for leaf, cpu in prep.ref_outputs[0].items():
            if f"jax.jit/{leaf}" in saved:
                arithmetic[leaf] = {"vs_tpu_default": err_scale(cpu, saved[f"jax.jit/{leaf}"]),
                                    "vs_tpu_highest": err_scale(cpu, saved[f"jax.jit highest/{leaf}"])}
        if config.native:
            native = _native(artifact, feed, {k.split("/", 1)[1]: v for k, v in saved.items() if k.startswith("xla/")},
                             config.timeout, "cpu" if rehearsal else "tpu")
            # A program lowered for the chip's platform alone is what jax compiles there: judged at TPU_PARITY, not
            # within the bf16 bound (the multi-platform main of an older artifact may place those passes otherwise).
            alone = str(native.get("program", "")).startswith("platforms/")
            result["rows"].append(judge_tpu_row(native, {} if alone else own))
    elif config.native:
        reason = result.get("reason") or "the TPU worker gave no outputs"
        result["rows"].append({"runner": "xla native", "device": "tpu", "status": "no-tpu", "reason": reason})
    for row in result["rows"]:
        said = f"{row['p50_ms']:.4g} ms p50" if row.get("p50_ms") is not None else row.get("reason", "")
        ctx.progress(f"TPU {row['runner']}: {row['status']} {said}")
    shipped = _shipped(ctx, prep, saved) if saved else []
    return {"machine": machine, "device": result.get("device", ""), "reason": result.get("reason", ""),
            "rehearsal": rehearsal, "rows": result["rows"], "overhead": result.get("overhead", []),
            "arithmetic": arithmetic, "bf16_bound": own, "tpu_parity": TPU_PARITY, "shipped": shipped,
            "note": "TPU rows are judged against jax.jit on the TPU (default matmul precision); arithmetic: jax.jit on "
                    "the CPU (this compare's reference) against jax.jit on the TPU, error / max|ref|"}


def _shipped(ctx: Context, prep: Prepared, saved: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Trained on TPU, shipped to CPU: per output leaf, jax.jit on the CPU and each CPU artifact of this compare (run
    once more on the first trial in a fresh CPU worker) against jax.jit on the TPU at the default matmul precision
    and at "highest"; `tpu_arithmetic` is jax.jit on the CPU against the TPU default (what the TPU alone moves),
    `converter` the row against jax.jit on the CPU (what the export alone moves), `explained` the share of the row's
    difference from the TPU default that the TPU's arithmetic accounts for (and `vs_float64` with --reference
    float64). A CPU artifact whose worker fails here has no row: its own row in the report says why."""
    plain = DEFAULT_OUTPUTS if any(k.startswith(f"{DEFAULT_OUTPUTS}/") for k in saved) else "jax.jit"
    feed, cpu_ref = prep.trials[0].feed, prep.ref_outputs[0]
    outputs: dict[str, Any] = {"jax.jit": cpu_ref}
    for name in ctx.config.backends:
        directory = ctx.out / name
        try:
            Manifest.read(directory)
        except Exception:  # noqa: BLE001 - no artifact (its export failed): its own row says why
            continue
        ran = run_artifact(["run", str(directory)], [feed], [], {}, None, prep.device.chosen, ctx.threads,
                           ctx.config.timeout)
        if not ran.failure and ran.outputs:
            outputs[name] = ran.outputs[0]
    truth = prep.truth[0] if prep.truth is not None else None
    table = []
    for leaf, ref in cpu_ref.items():
        if f"{plain}/{leaf}" not in saved or f"jax.jit highest/{leaf}" not in saved:
            continue
        default, highest = saved[f"{plain}/{leaf}"], saved[f"jax.jit highest/{leaf}"]
        arithmetic = err_scale(ref, default)
        for label, outs in outputs.items():
            if leaf not in outs:
                continue
            vs_default = err_scale(outs[leaf], default)
            entry = {"row": f"{label} (cpu)", "leaf": leaf, "vs_tpu_default": vs_default,
                     "vs_tpu_highest": err_scale(outs[leaf], highest),
                     "tpu_default_vs_highest": err_scale(default, highest), "tpu_arithmetic": arithmetic,
                     "converter": err_scale(outs[leaf], ref),
                     "explained": 1.0 if vs_default == 0 else min(1.0, arithmetic / vs_default)}
            if truth is not None and leaf in truth:
                entry["vs_float64"] = err_scale(outs[leaf], truth[leaf])
            table.append(entry)
    return table


def _native(artifact, feed, want: dict[str, np.ndarray], timeout: float, device: str = "tpu") -> dict[str, Any]:
    """pjrt_run on libtpu (the CPU plugin in a rehearsal), against the artifact's own TPU outputs (bit-exact
    expected)."""
    row: dict[str, Any] = {"runner": "xla native", "device": "tpu", "status": "ok", "reason": ""}
    try:
        got = run(artifact, feed, iters=100, warmup=10, device=device, timeout=timeout, trust_artifact=True)
    except MultiexportError as exc:
        missing = "no TPU PJRT plugin" in str(exc) or "pjrt_c_api.h" in str(exc)
        row.update(status="no-tpu" if missing else "failed", reason=" ".join(str(exc).split())[:400])
        return row
    row["err"] = {leaf: err_scale(v, want[leaf]) for leaf, v in got.outputs.items() if leaf in want}
    row["bit_exact"] = all(np.asarray(v).tobytes() == np.asarray(want[leaf]).tobytes()
                           for leaf, v in got.outputs.items() if leaf in want)
    row["p50_ms"] = (got.timing or {}).get("median_ms")
    row["program"] = (got.timing or {}).get("program")  # platforms/tpu.mlirbc: the TPU's own single-platform program
    if got.samples_ns is not None and len(got.samples_ns):  # the runner rows' statistic: p50 with its 95 % interval

        stats = summarize(np.asarray(got.samples_ns))
        row.update(p50_ms=stats.p50_ms, ci95_ms=[stats.ci95_low_ms, stats.ci95_high_ms], calls=stats.n)
    return row


def judge_tpu_row(row: dict[str, Any], own: dict[str, float]) -> dict[str, Any]:
    """A TPU row passes at TPU_PARITY, or within what the TPU's own bf16 passes move that leaf (jax.jit at the default
    matmul precision against "highest": two programs on the chip may place those passes differently), said in its
    reason; above both it is parity-failed, so a converter's error is not hidden behind the TPU's arithmetic."""
    if row.get("status") != "ok":
        return row
    for leaf, err in (row.get("err") or {}).items():
        bound = max(TPU_PARITY, own.get(leaf, 0.0))
        if err > bound:
            row["status"] = "parity-failed"
            row["reason"] = (f"Output '{leaf}' | error / max|ref| {err:.2g}, expected <= {bound:.2g} (the larger of "
                             f"{TPU_PARITY:g} and what the TPU's bf16 passes move it)")
            return row
        if err > TPU_PARITY:
            row["reason"] = (f"Output '{leaf}' | error / max|ref| {err:.2g}: within the TPU's own arithmetic (jax.jit "
                             f"at the default matmul precision against highest: {own[leaf]:.2g})")
    return row
