"""The Llama-style decoder (benchmarks/real_models/llm.py) through every format: one compare per function.

    python -m benchmarks.llm --size 1b --functions decode,prefill --out DIR [--backends all] [--native]
    python -m benchmarks.llm --table DIR          # the tables of a finished run, nothing run

For each function (`decode`: one token with its KV cache; `prefill`: the prompt) it runs `multiexport compare`
on `benchmarks.real_models.llm:llm_SIZE_FUNCTION_baked` (weights closed over: each format stores them with its own
large-weights mechanism, `--external-weights auto`) in a process of its own, with one trial and a short timed run,
and prints per format: status (the reason when not ok), where the weights are, parity on the logits and the worst
cache leaf (max error / the leaf's scale), latency (median and 95% interval: per token for decode, time to first
token for prefill), tokens/s, export time, artifact size, and the peak RSS of the export and run workers as a
multiple of the weights. The compare's own wall time and timeline are in DIR/FUNCTION/results.json; this script's
summary is DIR/llm.json. `--native` also runs each native consumer (PJRT C API, ORT C API, ...) on the same files.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from multiexport.system.descendants import vm_hwm

VAL_RANGES = {"decode": ("token", "pos"), "prefill": ("tokens",)}


def compare_argv(size: str, function: str, out: Path, backends: str, native: bool, timeout: float) -> list[str]:
    """The compare command line of one function (value ranges from the config: token ids, positions)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.real_models.llm import CONFIGS

    cfg = CONFIGS[size]
    ranges = {"token": (0, cfg.vocab), "tokens": (0, cfg.vocab), "pos": (cfg.prompt, cfg.max_len)}
    argv = [sys.executable, "-m", "multiexport", "compare", f"benchmarks.real_models.llm:llm_{size}_{function}_baked",
            "--backends", backends, "--out-dir", str(out / function), "--trials", "1", "--bench-time", "2",
            "--min-iters", "5", "--warmup", "2", "--timeout", f"{timeout:g}"]
    for leaf in VAL_RANGES[function]:
        lo, hi = ranges[leaf]
        argv += ["--val-range", f"{leaf}={lo}:{hi}"]
    return argv + (["--native"] if native else [])


def rows_of(results_path: Path, function: str) -> list[dict[str, Any]]:
    """One row per format (and the jax.jit reference) from a compare's results.json."""
    from multiexport.report.tables import storage_text
    from multiexport.results import load_results

    res = load_results(results_path)
    weights = max(int(res.signature.weights.baked_bytes), int(res.signature.weights.input_bytes))
    rows = []
    for name, r in res.backends.items():
        size = r.first_measured()
        lat = size.latency if size else None
        run_peak = r.bench.memory.get("peak_rss_bytes") if r.bench else None
        logits, cache = _parity(r.parity)
        native = r.native
        rows.append({
            "function": function, "backend": name, "status": r.status.value, "reason": r.reason[:200],
            "stored": storage_text(r.weights or {}), "weights_bytes": weights,
            "logits_err": logits, "cache_err": cache,
            "p50_ms": lat.p50_ms if lat else None, "ci_low_ms": lat.ci95_low_ms if lat else None,
            "ci_high_ms": lat.ci95_high_ms if lat else None, "n": lat.n if lat else None,
            "export_s": r.export_seconds, "artifact_bytes": r.artifact_bytes,
            "export_peak_x": r.export_peak_rss_bytes / weights if r.export_peak_rss_bytes and weights else None,
            "run_peak_x": run_peak / weights if run_peak and weights else None,
            "load_s": r.bench.load_s if r.bench else None,
            "native": _native(native),
        })
    ref = res.reference.bench
    lat = ref.sizes[0].latency if ref and ref.sizes else None
    peak = ref.memory.get("peak_rss_bytes") if ref else None
    rows.append({"function": function, "backend": "jax.jit", "status": "reference", "reason": "", "stored": "-",
                 "weights_bytes": weights, "logits_err": None, "cache_err": None,
                 "p50_ms": lat.p50_ms if lat else None, "ci_low_ms": lat.ci95_low_ms if lat else None,
                 "ci_high_ms": lat.ci95_high_ms if lat else None, "n": lat.n if lat else None, "export_s": None,
                 "artifact_bytes": None, "export_peak_x": None, "run_peak_x": peak / weights if peak else None,
                 "load_s": ref.load_s if ref else None, "native": None})
    return rows


def _parity(parity) -> tuple[float | None, float | None]:
    """The worst error / scale on the logits and over the cache leaves (None when not compared)."""
    if parity is None:
        return None, None
    logits = [leaf.stats.err_scale for leaf in parity.leaves if leaf.name == "out.logits" and leaf.stats.compared]
    cache = [leaf.stats.err_scale for leaf in parity.leaves if leaf.name.startswith("out.cache.")
             and leaf.stats.compared]
    return (max(logits) if logits else None), (max(cache) if cache else None)


def _native(native) -> dict[str, Any] | None:
    if native is None:
        return None
    data = native.to_json() if hasattr(native, "to_json") else dict(vars(native))
    keep = ("consumer", "status", "reason", "timing", "passed")
    return {k: data.get(k) for k in keep if k in data}


def table(rows: list[dict[str, Any]]) -> str:
    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    lines = ["| function | format | status | weights stored | logits err/scale | worst cache err/scale | "
             "latency ms p50 [95% CI] | tokens/s | export s | artifact | export peak RSS | run peak RSS |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        status = r["status"] if r["status"] in ("ok", "reference") else f"**{r['status']}**: {r['reason']}"
        latency = "-" if r["p50_ms"] is None else f"{r['p50_ms']:.1f} [{r['ci_low_ms']:.1f}, {r['ci_high_ms']:.1f}]"
        per_s = "-" if r["p50_ms"] is None or r["function"] != "decode" else f"{1e3 / r['p50_ms']:.1f}"
        artifact = f(r["artifact_bytes"] and r["artifact_bytes"] / 2**30, "{:.2f} GiB")
        lines.append(f"| {r['function']} | {r['backend']} | {status} | {r['stored'] or '-'} | "
                     f"{f(r['logits_err'], '{:.1e}')} | {f(r['cache_err'], '{:.1e}')} | {latency} | {per_s} | "
                     f"{f(r['export_s'], '{:.0f}')} | {artifact} | {f(r['export_peak_x'], '{:.2f}x')} | "
                     f"{f(r['run_peak_x'], '{:.2f}x')} |")
    return "\n".join(lines)


MIN_AVAILABLE = 3 << 30  # a child is stopped when the machine's available memory falls under this


def _available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 1 << 62


def child(argv: list[str], log: Path, timeout: float) -> dict[str, Any]:
    """Run argv to completion (stdout and stderr to `log`); its exit code, wall seconds and peak RSS (its VmHWM,
    sampled every 0.2 s: wait4's ru_maxrss would also count the parent's pages the fork copied before the exec),
    stopped with a reason past `timeout` or when available memory falls under 3 GiB."""
    import os
    import signal

    t0 = time.perf_counter()
    stopped = ""
    peak = 0
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while True:
            peak = max(peak, vm_hwm(proc.pid) or 0)  # its own address space since exec; gone: 0
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if not stopped and time.perf_counter() - t0 > timeout:
                stopped = f"stopped after {timeout:g} s"
            elif not stopped and _available() < MIN_AVAILABLE:
                stopped = f"stopped: the machine's available memory fell under {MIN_AVAILABLE >> 30} GiB"
            if stopped:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    return {"rc": proc.returncode, "seconds": time.perf_counter() - t0, "peak_rss_bytes": peak,
            "stopped": stopped, "last": [line for line in text.splitlines() if line.strip()][-1:] or [""],
            "stdout": text}


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _latency(times_ms: list[float]) -> dict[str, float]:
    """Median and an interval of the median with at least 95% coverage: the order statistics t[j], t[n-1-j] for the
    largest j with P(Binomial(n, 1/2) < j+1) <= 2.5% (exact; with n <= 5 it is the whole range)."""
    import math

    t = sorted(times_ms)
    n = len(t)
    j, tail = 0, 0.0
    while j < n // 2:
        tail += math.comb(n, j) / 2**n  # P(X = j): the median lies below t[j] only if at most j samples do
        if tail > 0.025:
            break
        j += 1
    j = max(0, j - 1)  # the last j whose tail stayed within 2.5%
    return {"p50_ms": float(np.median(t)), "ci_low_ms": t[j], "ci_high_ms": t[n - 1 - j], "n": n}


def per_format(size: str, function: str, out: Path, backends: list[str], timeout: float, iters: int
               ) -> list[dict[str, Any]]:
    """The memory-light route: one process at a time (the jax.jit reference, then per format its export and its
    run from disk), each one's own peak RSS, parity of the example's outputs against the reference."""
    from multiexport.measure.parity import compare_leaf
    from multiexport.measure.tolerance import default_tolerance

    spec = f"benchmarks.real_models.llm:llm_{size}_{function}_baked"
    work = out / function
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    done = work / "reference.json"
    if done.is_file():  # a finished reference of an earlier run in this directory: its outputs and figures
        ref = json.loads(done.read_text())
    else:
        print(f"[llm] {function}: jax.jit reference", file=sys.stderr, flush=True)
        ref = child([py, "-m", "benchmarks.llm_worker", "reference", spec, str(work), str(iters)],
                    work / "reference.log", timeout)
        if ref["rc"] != 0:
            raise SystemExit(f"the reference failed: {ref['stopped'] or ref['last'][0]} (see {work / 'reference.log'})")
        done.write_text(json.dumps(ref))
    info = json.loads(ref["stdout"].strip().splitlines()[-1])
    weights = info["weights_bytes"]
    expected = dict(np.load(work / "ref.npz"))
    rows = [{"function": function, "backend": "jax.jit", "status": "reference", "reason": "", "stored": "-",
             "weights_bytes": weights, "logits_err": None, "cache_err": None, **_latency(info["times_ms"]),
             "export_s": None, "artifact_bytes": None, "export_peak_x": None,
             "run_peak_x": max(ref["peak_rss_bytes"], info["peak_rss_bytes"]) / weights, "load_s": info["load_s"],
             "native": None}]
    for backend in backends:
        print(f"[llm] {function}: {backend} export", file=sys.stderr, flush=True)
        artifact = work / backend
        exp = child([py, "-m", "benchmarks.llm_worker", "export", spec, backend, str(artifact)],
                    work / f"{backend}.export.log", timeout)
        row: dict[str, Any] = {"function": function, "backend": backend, "status": "ok", "reason": "", "stored": "-",
                               "weights_bytes": weights, "logits_err": None, "cache_err": None, "p50_ms": None,
                               "ci_low_ms": None, "ci_high_ms": None, "n": None, "export_s": exp["seconds"],
                               "artifact_bytes": None, "export_peak_x": exp["peak_rss_bytes"] / weights,
                               "run_peak_x": None, "load_s": None, "native": None}
        rows.append(row)
        if exp["rc"] != 0:
            row.update(status="export-failed", reason=exp["stopped"] or exp["last"][0][:300])
            continue
        own = json.loads(exp["stdout"].strip().splitlines()[-1])  # the worker's own VmHWM at its end: exact
        row["export_peak_x"] = max(exp["peak_rss_bytes"], own["peak_rss_bytes"]) / weights
        row["artifact_bytes"] = _dir_bytes(artifact)
        manifest = json.loads((artifact / "manifest.json").read_text())
        row["stored"] = _stored(manifest.get("weights") or {})
        print(f"[llm] {function}: {backend} run", file=sys.stderr, flush=True)
        got_path = work / f"{backend}.got.npz"
        run = child([py, "-m", "benchmarks.llm_worker", "run", str(artifact), str(work / "feed.npz"), str(got_path),
                     str(iters)], work / f"{backend}.run.log", timeout)
        row["run_peak_x"] = run["peak_rss_bytes"] / weights
        if run["rc"] != 0:
            row.update(status="run-failed", reason=run["stopped"] or run["last"][0][:300])
            continue
        result = json.loads(run["stdout"].strip().splitlines()[-1])
        row.update(_latency(result["times_ms"]), load_s=result["load_s"],
                   run_peak_x=max(run["peak_rss_bytes"], result["peak_rss_bytes"]) / weights)
        got = dict(np.load(got_path))
        verdicts = [compare_leaf(name, got.get(name), ref_value, ref_value.dtype.name,
                                 default_tolerance(ref_value.dtype.name)) for name, ref_value in expected.items()]
        failed = [v for v in verdicts if not v.passed]
        logits = [v.stats.err_scale for v in verdicts if v.name == "out.logits" and v.stats.compared]
        cache = [v.stats.err_scale for v in verdicts if v.name.startswith("out.cache.") and v.stats.compared]
        row.update(logits_err=max(logits) if logits else None, cache_err=max(cache) if cache else None)
        if failed:  # not a verdict: compare widens the defaults to the rounding floor it measures, this mode does not
            row.update(status="beyond-defaults", reason="beyond the plain float32 defaults on "
                       + ", ".join(v.name for v in failed[:3]) + "; the rounding floor compare widens them to is "
                       "not measured in this mode: no verdict")
        if artifact.exists() and not KEEP:
            import shutil

            shutil.rmtree(artifact, ignore_errors=True)  # GiBs each: one format's files at a time
    return rows


KEEP = False


def _stored(weights: dict[str, Any]) -> str:
    from multiexport.report.tables import storage_text

    return storage_text(weights)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny", help="llm.py config: tiny, mid (448 MB of weights) or 1b")
    parser.add_argument("--functions", default="decode,prefill", help="comma-separated: decode, prefill")
    parser.add_argument("--backends", default="all")
    parser.add_argument("--out", type=Path, default=Path("multiexport-out/llm"))
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per worker")
    parser.add_argument("--native", action="store_true", help="also run each format's native consumer")
    parser.add_argument("--table", type=Path, help="print the tables of a finished run in this directory")
    parser.add_argument("--per-format", action="store_true",
                        help="no compare: one process at a time (the jax.jit reference, then each format's export and "
                             "its run from disk), for a model whose compare does not fit in this machine's memory")
    parser.add_argument("--iters", type=int, default=10, help="timed calls per format (--per-format)")
    parser.add_argument("--keep", action="store_true", help="keep each format's artifact (--per-format)")
    args = parser.parse_args(argv)
    global KEEP
    KEEP = args.keep
    out = args.table or args.out
    functions = [f for f in args.functions.split(",") if f]
    walls: dict[str, float] = {}
    if args.per_format:
        from multiexport.exporting.registry import default_names

        backends = default_names() if args.backends == "all" else args.backends.split(",")
        rows = []
        for function in functions:
            t0 = time.perf_counter()
            rows += per_format(args.size, function, out, backends, args.timeout, args.iters)
            walls[function] = time.perf_counter() - t0
            (out / "llm.json").write_text(json.dumps({"size": args.size, "mode": "per-format",
                                                      "wall_s": walls, "rows": rows}, indent=1))
        print(table(rows))
        return 0
    if not args.table:
        out.mkdir(parents=True, exist_ok=True)
        for function in functions:
            cmd = compare_argv(args.size, function, out, args.backends, args.native, args.timeout)
            print(f"[llm] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            with open(out / f"{function}.log", "w") as log:
                code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
            walls[function] = time.perf_counter() - t0
            print(f"[llm] {function}: exit {code} in {walls[function]:.0f} s", file=sys.stderr, flush=True)
    rows = []
    for function in functions:
        path = out / function / "results.json"
        if path.is_file():
            rows += rows_of(path, function)
    summary = {"size": args.size, "compare_wall_s": walls, "rows": rows}
    if not args.table:
        (out / "llm.json").write_text(json.dumps(summary, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
