"""What `multiexport locate` costs against one `multiexport compare` of the same model and backend (#48: within 5x).

    python -m benchmarks.locate_cost [--target benchmarks/realistic/models.py:bert_b1] [--backend onnx]
                                     [--rounds 1] [--route stablehlo|default] --out-dir DIR

Each round runs, as whole processes with the same flags, `multiexport compare TARGET --backends B` and
`multiexport locate TARGET --backend B` (compare first, then locate, so machine noise falls on both alike),
both with B's artifact written by the same route: `--route stablehlo` (the default here: multiexport's own converter,
which records the tensor of every StableHLO op, the most locate maps) or `--route default` (ONNX's jax2onnx route,
mapped through its equation table). Prints and writes DIR/locate_cost.md and .json: the wall seconds
of each run, the ratio locate/compare per round and its median, and locate's own figures (op results mapped).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from multiexport.system.process import run_command

ROUTE = {"onnx": ["--backend-option", "onnx.route=stablehlo"],
         "openvino": ["--backend-option", "openvino.onnx_route=stablehlo"]}


def timed(args: list[str], log: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = run_command([sys.executable, "-m", "multiexport", *args], timeout=3600)
    seconds = time.perf_counter() - t0
    log.write_text(f"$ multiexport {' '.join(args)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return seconds, done.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="benchmarks/realistic/models.py:bert_b1")
    p.add_argument("--backend", default="onnx")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--route", choices=("stablehlo", "default"), default="stablehlo",
                   help="the ONNX route both runs export with (default: stablehlo, the most ops mapped)")
    p.add_argument("--out-dir", type=Path, required=True)
    a = p.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    extra = ROUTE.get(a.backend, []) if a.route == "stablehlo" else []
    rows = []
    for r in range(a.rounds):
        compare_dir, locate_dir = a.out_dir / f"compare{r}", a.out_dir / f"locate{r}"
        c, c_rc = timed(["compare", a.target, "--backends", a.backend, *extra, "--out-dir", str(compare_dir)],
                        a.out_dir / f"compare{r}.log")
        lo, l_rc = timed(["locate", a.target, "--backend", a.backend, *extra, "--out-dir", str(locate_dir)],
                         a.out_dir / f"locate{r}.log")
        found = json.loads((locate_dir / "locate.json").read_text()) if (locate_dir / "locate.json").is_file() else {}
        b = (found.get("backends") or [{}])[0]
        rows.append({"round": r, "compare_s": round(c, 1), "compare_exit": c_rc, "locate_s": round(lo, 1),
                     "locate_exit": l_rc, "ratio": round(lo / c, 2), "mapped": b.get("mapped"), "total": b.get("total"),
                     "verdict": b.get("verdict", b.get("error", ""))})
        print(json.dumps(rows[-1]), flush=True)
    median = statistics.median(r["ratio"] for r in rows)
    lines = [f"# locate's cost: {a.target}, backend {a.backend}, route {a.route}", "",
             "| round | compare s | locate s | locate / compare | op results mapped |", "|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['compare_s']} | {r['locate_s']} | {r['ratio']} | {r['mapped']} of {r['total']} |"
              for r in rows]
    lines += ["", f"median locate / compare: {median} (the issue's bound: 5)", ""]
    (a.out_dir / "locate_cost.md").write_text("\n".join(lines))
    (a.out_dir / "locate_cost.json").write_text(json.dumps({"rows": rows, "median_ratio": median}, indent=1))
    print("\n".join(lines))
    return 0 if median <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
