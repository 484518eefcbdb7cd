"""Format x precision on real models of the zoo: one `multiexport compare --precision` per model (every row timed
in the same paired rounds), printed as the README's table (the report's "Format x precision" rows, fp32 rows
beside them).

Run: `.venv/bin/python -m benchmarks.precision_table [--models haiku_resnet_baked,hf_bert_baked] [--out DIR]
[--bench-time 1]` (about 3 minutes per model on 2 cores). Each compare's full report stays in OUT/MODEL.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.real_models import select
from multiexport.report.precision import PRECISION_HEADER, precision_rows
from multiexport.results import load_results

BACKENDS = "xla,onnx,litert,openvino,iree"
PRECISIONS = "fp32,fp16,int8-dynamic,int8"
SHOWN = ("format", "precision", "status", "p50 ms (95% CI)", "vs its fp32", "size", "vs fp32 size", "cosine", "SQNR dB",
         "top-1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="haiku_resnet_baked,hf_bert_baked", help="zoo model names")
    parser.add_argument("--out", type=Path, help="where each compare writes (default: a temporary directory)")
    parser.add_argument("--bench-time", default="1", help="seconds of timed calls per runner (default 1)")
    args = parser.parse_args(argv)
    models = select(args.models.split(","))
    out = args.out or Path(tempfile.mkdtemp(prefix="multiexport-precision-"))
    for model in models:
        where = out / model.name
        command = [sys.executable, "-m", "multiexport", "compare", model.target, "--backends", BACKENDS,
                   "--precisions", PRECISIONS, "--out-dir", str(where), "--trials", "3", "--bench-time", args.bench_time,
                   "--rounds", "5", *model.compare_flags()]
        print(f"$ {' '.join(command[2:])}", file=sys.stderr)
        subprocess.run(command, capture_output=True, timeout=3600)  # exit 1/3: a row failed, still a table
        results = load_results(where / "results.json")
        rows = [row for row in precision_rows(results) if row[2] != "unsupported-precision"]
        keep = [PRECISION_HEADER.index(h) for h in SHOWN]
        print(f"\n{model.name}:\n")
        print("| " + " | ".join(SHOWN) + " |")
        print("|" + "---|" * len(SHOWN))
        for row in rows:
            print("| " + " | ".join(row[i] for i in keep) + " |")
        missing = sorted({r[0] + "@" + r[1] for r in precision_rows(results) if r[2] == "unsupported-precision"})
        print(f"\nunsupported-precision: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
