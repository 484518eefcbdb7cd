"""The two ONNX routes side by side: jax2onnx and multiexport's StableHLO converter, on ONNX Runtime.

For every model of the real-model zoo (benchmarks/real_models) and every case of the shared registry
(tests/cases.py): export with `route=jax2onnx` and with `route=stablehlo` (a symbolic model at its example
sizes, so both graphs have the same static shapes), check each against jax.jit on the example inputs,
and time the models both routes convert in one process, paired: the same session options and threads,
rounds alternating which route goes first, the median per-call time of each, and the ratio
stablehlo / jax2onnx per model with their geometric mean (the target: at most 1.25).

Run from the repository root:
    .venv/bin/python -m benchmarks.onnx_routes [--models NAME,NAME] [--no-cases] [--threads 1] [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROUTES = ("jax2onnx", "stablehlo")


def _reference(target, sig, feed) -> dict[str, np.ndarray]:
    import jax

    outs = jax.jit(sig.flat_function(target.fn))(*[feed[leaf.name] for leaf in sig.inputs])
    return {leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, outs)}


def _static(sig):
    """The signature at its example sizes (unchanged when it has no symbolic dimension)."""
    from multiexport.exporting.static_fallback import specialize

    sizes = sig.example_sizes()
    return specialize(sig, sizes) if sig.symbolic_dims and sizes else sig


def convert_and_check(target, root: Path, threads: int) -> dict[str, Any]:
    """Per route: its runner and feed, or the failure's category and words; and parity against jax.jit."""
    from multiexport import ExportError
    from multiexport.backends.onnx import OnnxBackend
    from multiexport.exporting import ExportOptions, RunOptions
    from multiexport.leaves import build_signature
    from multiexport.measure.parity import compare_leaf
    from multiexport.measure.tolerance import default_tolerance

    sig = _static(build_signature(target))
    feed = sig.example_feed()
    want = _reference(target, sig, feed)
    out: dict[str, Any] = {}
    for route in ROUTES:
        try:
            artifact = OnnxBackend().export(target.fn, sig, root / route,
                                            ExportOptions(backend_options={"route": route}, check_load=False))
            runner = OnnxBackend().load(artifact.directory, RunOptions(device="cpu", threads=threads))
            got = runner(feed)
        except ExportError as exc:
            out[route] = {"status": exc.category, "why": " ".join(str(exc).split())[:160]}
            continue
        except Exception as exc:  # a runtime failure: the row says so, the other models go on
            out[route] = {"status": getattr(exc, "category", "run-failed"), "why": " ".join(str(exc).split())[:160]}
            continue
        failed = [leaf.name for leaf in sig.outputs if not compare_leaf(
            leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype)).passed]
        out[route] = {"status": "parity-failed" if failed else "ok", "why": ", ".join(failed), "runner": runner,
                      "feed": feed, "nodes": _node_count(artifact.directory / "model.onnx")}
    return out


def _node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def paired_latency(runners: dict[str, Any], feeds: dict[str, Any], rounds: int, budget_s: float) -> dict[str, float]:
    """Median per-call milliseconds of each runner, timed in alternating rounds of about `budget_s` each."""
    prepared = {r: runners[r].prepare(feeds[r]) for r in runners}
    for r in runners:  # warm up: first calls allocate
        for _ in range(3):
            runners[r].run_prepared(prepared[r])
    calls = {}
    for r in runners:
        t0 = time.perf_counter()
        runners[r].run_prepared(prepared[r])
        calls[r] = max(3, min(2000, int(budget_s / max(time.perf_counter() - t0, 1e-6))))
    samples: dict[str, list[float]] = {r: [] for r in runners}
    order = list(runners)
    for i in range(rounds):
        for r in (order if i % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            for _ in range(calls[r]):
                runners[r].run_prepared(prepared[r])
            samples[r].append((time.perf_counter() - t0) / calls[r] * 1e3)
    return {r: statistics.median(v) for r, v in samples.items()}


def _models(names: list[str] | None):
    from benchmarks.real_models import REAL_MODELS

    chosen = [m for m in REAL_MODELS if not names or m.name in names]
    return sorted(chosen, key=lambda m: "x64" in m.tags)  # x64 turns 64-bit mode on for the process: last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnx_routes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="", help="comma-separated zoo model names (default: all)")
    parser.add_argument("--no-cases", action="store_true", help="skip the parity pass over tests/cases.py")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-s", type=float, default=0.1, help="seconds per route per round")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="multiexport-onnx-routes-"))
    rows = []
    try:
        if not args.no_cases:
            rows += _cases(root)
        for model in _models([n for n in args.models.split(",") if n]):
            try:
                target = model.factory()
            except ImportError as exc:  # an optional library the zoo model needs is not installed
                print(f"{model.name}: skipped ({exc})")
                continue
            got = convert_and_check(target, root / model.name, args.threads)
            row = {"model": model.name, **{r: got[r] for r in ROUTES}}
            if all(got[r]["status"] == "ok" for r in ROUTES):
                ms = paired_latency({r: got[r]["runner"] for r in ROUTES}, {r: got[r]["feed"] for r in ROUTES},
                                    args.rounds, args.round_s)
                row["ms"] = ms
            rows.append(row)
            _print_row(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _summary(rows, args.threads)
    return 0


def _cases(root: Path) -> list[dict]:
    """The StableHLO route's parity on every case of tests/cases.py (the registry every backend runs)."""
    import jax

    try:
        from tests.cases import CASES
    except ImportError:
        print("tests/cases.py not importable (run from the repository root): case registry skipped")
        return []
    rows = []
    for c in CASES:
        with jax.enable_x64(True) if c.x64 else contextlib.nullcontext():
            got = convert_and_check(c.make(), root / f"case-{c.name}", 1)
        row = {"model": f"case:{c.name}", **got}
        rows.append(row)
        _print_row(row)
    return rows


def _print_row(row: dict) -> None:
    cells = [row["model"]]
    for r in ROUTES:
        info = row[r]
        cells.append(info["status"] + (f" ({info['nodes']} nodes)" if "nodes" in info else ""))
    ms = row.get("ms")
    if ms:
        cells += [f"{ms['jax2onnx']:.4f}", f"{ms['stablehlo']:.4f}", f"{ms['stablehlo'] / ms['jax2onnx']:.2f}"]
    else:
        cells += ["", "", ""]
        why = next((row[r]["why"] for r in ROUTES if row[r]["status"] != "ok" and row[r]["why"]), "")
        cells.append(why)
    print(" | ".join(cells), flush=True)


def _summary(rows: list[dict], threads: int) -> None:
    print()
    print("| model | jax2onnx | stablehlo | jax2onnx ms | stablehlo ms | ratio |")
    print("|---|---|---|---:|---:|---:|")
    ratios = []
    for row in rows:
        ms = row.get("ms")
        ratio = ms["stablehlo"] / ms["jax2onnx"] if ms else None
        if ratio:
            ratios.append(ratio)
        print(f"| {row['model']} | {row['jax2onnx']['status']} | {row['stablehlo']['status']} | "
              f"{ms['jax2onnx']:.4f} | {ms['stablehlo']:.4f} | {ratio:.2f} |" if ms else
              f"| {row['model']} | {row['jax2onnx']['status']} | {row['stablehlo']['status']} | | | |")
    shlo_ok = sum(row["stablehlo"]["status"] == "ok" for row in rows)
    j2o_ok = sum(row["jax2onnx"]["status"] == "ok" for row in rows)
    either = sum(row["stablehlo"]["status"] == "ok" or row["jax2onnx"]["status"] == "ok" for row in rows)
    print(f"\nstablehlo ok on {shlo_ok}/{len(rows)}, jax2onnx ok on {j2o_ok}/{len(rows)}, either (auto) {either}"
          f"/{len(rows)}; threads={threads}")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"latency stablehlo / jax2onnx over {len(ratios)} models both convert: geometric mean {geo:.3f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}; target <= 1.25)")


if __name__ == "__main__":
    raise SystemExit(main())
