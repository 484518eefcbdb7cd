"""The TPU check: what the lent TPU machine can verify with what it has (jax + libtpu, no flax, no network).

    python -m benchmarks.tpu_check OUT_DIR [--models seed,mlp,conv,transformer] [--bench-time S] [--no-native]
    python -m benchmarks.tpu_check --summarize OUT_DIR/results.json     # rewrite summary.md from a results file

Run by benchmarks/tpu_check.sh after it installs the carried wheels. This process keeps JAX on the CPU
(`keep_jax_off_the_tpu`: one process owns the chip) and, per model of benchmarks/tpu_models.py:

1. exports the XLA artifact for the TPU and the CPU (`platforms=("cpu", "tpu")`) and draws its inputs;
2. starts the one TPU process (multiexport/run/tpu_worker.py): jax.jit at the default matmul precision and at
   "highest", and the XLA artifact, on the TPU, timed in interleaved rounds (synchronised; transfers apart),
   plus the harness overhead (XlaRunner against a bare jitted loop);
3. once it has exited, the native PJRT consumer (pjrt_run) on libtpu, with the TPU_* variables under env -i,
   against the XLA artifact's TPU outputs (bit-exact expected);
4. the CPU rows here: jax.jit, the XLA artifact and (with a CPU PJRT plugin) its native consumer;
5. trained on TPU, shipped to CPU: each CPU row against the TPU reference at default and "highest" precision,
   and the share of that difference the TPU's own arithmetic explains (jax.jit on the CPU vs on the TPU);
6. the product's own path: `multiexport compare` with no option and no variable set (its report: compare.md).

Without a TPU (the CPU rehearsal, tests/test_tpu_check.py) the TPU rows are `no-tpu` with JAX's or libtpu's
reason and everything else runs the same. Writes OUT/results.json and OUT/summary.md.
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

from benchmarks.tpu_models import MODELS
from multiexport.files.npz import load_npz, save_npz

SCHEMA = "multiexport.tpu_check/1"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tpu_check")
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--bench-time", type=float, default=1.0, help="seconds of timed calls per runner and model")
    parser.add_argument("--no-native", action="store_true")
    parser.add_argument("--no-compare", action="store_true", help="skip step 6 (the product's own compare)")
    parser.add_argument("--worker-timeout", type=float, default=300.0)
    parser.add_argument("--summarize", type=Path, metavar="RESULTS_JSON")
    args = parser.parse_args(argv)
    if args.summarize is None and args.out is None:
        parser.error("OUT_DIR is required (or --summarize RESULTS_JSON)")
    models = [m for m in args.models.split(",") if m]
    if not models or any(m not in MODELS for m in models):
        parser.error(f"--models: got {args.models!r}, expected names from {', '.join(MODELS)}")
    if not args.bench_time > 0:
        parser.error(f"--bench-time: got {args.bench_time}, expected seconds > 0")
    args.models = models
    return args


def prepare(models: list[str], work: Path) -> dict[str, dict[str, np.ndarray]]:
    """Export each model for (cpu, tpu) and write its inputs; returns model -> feed."""
    from benchmarks.tpu_models import make
    from multiexport import api
    from multiexport.leaves import build_signature

    feeds = {}
    for name in models:
        target = make(name)
        feed = {k: np.asarray(v) for k, v in build_signature(target).example_feed().items()}
        api.export(target, work / "artifacts" / name, "xla", platforms=("cpu", "tpu"))
        save_npz(work / "inputs" / f"{name}.npz", feed)
        feeds[name] = feed
    return feeds


def run_tpu_worker(models: list[str], work: Path, bench_time: float, timeout: float) -> dict[str, Any]:
    """The one TPU process; its tpu.json (rows written after each model, so a timeout keeps those done)."""
    from multiexport.environment import tpu_worker_environment
    from multiexport.run.tpu_worker import RUNNERS

    specs = {m: "multiexport.examples:seed" if m == "seed" else f"benchmarks.tpu_models:{m}" for m in models}
    job = {"targets": specs, "artifacts": {m: str(work / "artifacts" / m) for m in models},
           "feeds": {m: str(work / "inputs" / f"{m}.npz") for m in models}, "out": str(work / "tpu"),
           "bench_time": bench_time}
    (work / "tpu").mkdir(exist_ok=True)
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, **tpu_worker_environment()}
    proc = subprocess.Popen([sys.executable, "-m", "multiexport.run.tpu_worker", str(work / "job.json")], env=env,
                            start_new_session=True)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        code = f"killed after {timeout:g} s"
    found = work / "tpu" / "tpu.json"
    result = json.loads(found.read_text()) if found.is_file() else {"rows": [], "overhead": []}
    done = {r["model"] for r in result["rows"]}
    for name in models:
        if name not in done:
            result["rows"] += [{"model": name, "runner": label, "device": "tpu", "status": "failed",
                                "reason": f"the TPU worker ended (exit {code}) before this model"}
                               for label in RUNNERS]
    return result


def native_rows(models: list[str], work: Path, feeds: dict, device: str, want: dict[str, dict]) -> list[dict]:
    """pjrt_run on `device` per model, timed inside the program, checked against `want` (bit-exact on the TPU:
    the same module on the same plugin), or a no-tpu / not-available row with the reason."""
    from multiexport.errors import MultiexportError
    from multiexport.native.run import run

    rows = []
    for name in models:
        row: dict[str, Any] = {"model": name, "runner": "xla native", "device": device, "status": "ok", "reason": ""}
        try:
            got = run(work / "artifacts" / name, feeds[name], iters=200, warmup=10, device=device, timeout=180,
                      trust_artifact=True)
        except MultiexportError as exc:
            missing = "no TPU PJRT plugin" in str(exc) or "no PJRT CPU plugin" in str(exc) or "pjrt_c_api.h" in str(exc)
            row.update(status=("no-tpu" if device == "tpu" else "not-available") if missing else "failed",
                       reason=" ".join(str(exc).split())[:400])
            rows.append(row)
            continue
        t = got.timing or {}
        row.update(p50_ms=t.get("median_ms"), calls=t.get("calls"), compile_ms=t.get("compile_ms"),
                   ci95_ms=_ci(got.samples_ns))
        if name in want:
            from multiexport.run.tpu_worker import err_scale

            row["err"] = {leaf: err_scale(v, want[name][leaf]) for leaf, v in got.outputs.items()}
            row["bit_exact"] = all(np.asarray(v).tobytes() == np.asarray(want[name][leaf]).tobytes()
                                   for leaf, v in got.outputs.items())
            row["vs"] = "the XLA artifact on the same device (multiexport's runner)"
        rows.append(row)
    return rows


def _ci(samples_ns) -> list[float] | None:
    if samples_ns is None or len(samples_ns) == 0:
        return None
    from multiexport.measure.bench import median_ci95

    lo, hi = median_ci95(np.sort(np.asarray(samples_ns, np.float64)) / 1e6)
    return [lo, hi]


def cpu_rows(models: list[str], work: Path, feeds: dict, bench_time: float) -> tuple[list[dict], dict]:
    """jax.jit and the XLA artifact on the CPU, here (JAX on the CPU), timed in interleaved rounds."""
    from benchmarks.tpu_models import make
    from multiexport import api
    from multiexport.leaves import build_signature
    from multiexport.measure.reference import ReferenceRunner
    from multiexport.run.tpu_worker import err_scale, timed

    rows, outputs = [], {}
    for name in models:
        target = make(name)
        runners = {"jax.jit": ReferenceRunner(target, build_signature(target), "cpu"),
                   "xla": api.load(work / "artifacts" / name, "cpu")}
        outs = {label: r(feeds[name]) for label, r in runners.items()}
        prepared = {label: r.prepare(feeds[name]) for label, r in runners.items()}
        times = timed({label: (lambda r=r, p=prepared[label]: r.run_prepared(p)) for label, r in runners.items()},
                      bench_time)
        for label in runners:
            rows.append({"model": name, "runner": label, "device": "cpu", "status": "ok", "reason": "",
                         "vs": "jax.jit on the CPU", **times[label],
                         "err": {k: err_scale(v, outs["jax.jit"][k]) for k, v in outs[label].items()}})
        outputs[name] = outs
    return rows, outputs


def precision_table(models: list[str], work: Path, cpu_outputs: dict) -> list[dict]:
    """Trained on TPU, shipped to CPU: per model and output leaf, each CPU row against the TPU reference at the
    default matmul precision and at "highest"; `tpu_arithmetic` is jax.jit on the CPU against the TPU default
    (what the TPU's arithmetic alone moves), `explained` its share of the CPU row's difference."""
    from multiexport.run.tpu_worker import err_scale

    table = []
    for name in models:
        path = work / "tpu" / f"{name}.tpu.npz"
        if not path.is_file() or name not in cpu_outputs:
            continue
        tpu = load_npz(path, "TPU outputs")
        cpu_rows_here = {f"{label} (cpu)": outs for label, outs in cpu_outputs[name].items()}
        for leaf in cpu_outputs[name]["jax.jit"]:
            default, highest = tpu[f"jax.jit/{leaf}"], tpu[f"jax.jit highest/{leaf}"]
            arithmetic = err_scale(cpu_outputs[name]["jax.jit"][leaf], default)
            for label, outs in cpu_rows_here.items():
                vs_default = err_scale(outs[leaf], default)
                table.append({"model": name, "leaf": leaf, "row": label, "vs_tpu_default": vs_default,
                              "vs_tpu_highest": err_scale(outs[leaf], highest),
                              "tpu_default_vs_highest": err_scale(default, highest), "tpu_arithmetic": arithmetic,
                              "converter": err_scale(outs[leaf], cpu_outputs[name]["jax.jit"][leaf]),
                              "explained": 1.0 if vs_default == 0 else min(1.0, arithmetic / vs_default)})
    return table


def product_compare(work: Path, timeout: float = 240) -> dict[str, Any]:
    """`multiexport compare` as a user types it on the TPU machine: no option, no variable set by hand."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "MULTIEXPORT_USER_JAX_PLATFORMS")}
    out = work / "compare"
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "multiexport", "compare", "--out-dir", str(out)], cwd=work,
                              env=env, capture_output=True, text=True, timeout=timeout)
        code, tail = proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[-12:]
    except subprocess.TimeoutExpired:
        code, tail = "timeout", [f"compare ran past {timeout:g} s"]
    found: dict[str, Any] = {"command": "multiexport compare", "exit": code, "seconds": time.monotonic() - start,
                             "tail": tail}
    results = out / "results.json"
    if results.is_file():
        data = json.loads(results.read_text())
        found["rows"] = {name: row.get("status") for name, row in data.get("backends", {}).items()}
        found["jax_platforms"] = data.get("environment", {}).get("jax_platforms")
        found["tpu"] = data.get("environment", {}).get("tpu")
    return found


def environment_facts() -> dict[str, Any]:
    from importlib import metadata

    from multiexport.environment import tpu_presence

    versions = {}
    for package in ("jax", "jaxlib", "libtpu", "numpy", "multiexport"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    here = tpu_presence()
    return {"python": sys.version.split()[0], "cores": os.cpu_count(), "versions": versions,
            "tpu": here.describe(), "libtpu": str(here.libtpu or ""),
            "tpu_env": sorted(k for k in os.environ if k.startswith("TPU_"))}


def main(argv: list[str] | None = None) -> int:
    from multiexport.environment import keep_jax_off_the_tpu

    keep_jax_off_the_tpu()  # before JAX starts: this process and its CPU work never open the chip
    from multiexport.comparison.tpu_stage import judge_tpu_row
    from multiexport.run.tpu_worker import err_scale
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from benchmarks.tpu_summary import summary_markdown

    if args.summarize is not None:
        data = json.loads(args.summarize.read_text())
        (args.summarize.parent / "summary.md").write_text(summary_markdown(data))
        return 0
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="multiexport-tpu-check-") as tmp:
        work = Path(tmp)
        (work / "inputs").mkdir()
        feeds = prepare(args.models, work)
        print(f"[tpu_check] exported {len(args.models)} models for cpu,tpu in {time.monotonic() - start:.1f} s",
              flush=True)
        tpu = run_tpu_worker(args.models, work, args.bench_time, args.worker_timeout)
        tpu_outputs, own = {}, {}
        for name in args.models:
            path = work / "tpu" / f"{name}.tpu.npz"
            if path.is_file():
                saved = load_npz(path, "TPU outputs")
                tpu_outputs[name] = {k.split("/", 1)[1]: v for k, v in saved.items() if k.startswith("xla/")}
                # what the TPU's own bf16 passes move each leaf: the bound the compare's TPU stage judges with
                own[name] = {k.split("/", 1)[1]: err_scale(v, saved[f"jax.jit highest/{k.split('/', 1)[1]}"])
                             for k, v in saved.items() if k.startswith("jax.jit/")}
        rows = [judge_tpu_row(r, own.get(r["model"], {})) if r["runner"] == "xla" else r for r in tpu["rows"]]
        if not args.no_native:
            rows += [judge_tpu_row(r, own.get(r["model"], {}))
                     for r in native_rows(args.models, work, feeds, "tpu", tpu_outputs)]
        cpu, cpu_outputs = cpu_rows(args.models, work, feeds, args.bench_time)
        rows += [judge_tpu_row(r, {}) if r["runner"] == "xla" else r for r in cpu]
        if not args.no_native:
            rows += [judge_tpu_row(r, {}) for r in
                     native_rows(args.models, work, feeds, "cpu", {m: o["xla"] for m, o in cpu_outputs.items()})]
        table = precision_table(args.models, work, cpu_outputs)
        compare = None if args.no_compare else product_compare(work)
        if compare and (work / "compare" / "report.md").is_file():
            (out / "compare.md").write_text((work / "compare" / "report.md").read_text())
    data = {"schema": SCHEMA, "seconds": time.monotonic() - start, "tpu_device": tpu.get("device", ""),
            "tpu_reason": tpu.get("reason", ""), "environment": environment_facts(), "rows": rows,
            "overhead": tpu.get("overhead", []), "precision": table, "compare": compare}
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "summary.md").write_text(summary_markdown(data))
    print((out / "summary.md").read_text())
    bad = [r for r in rows if r["status"] == "failed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
