"""The native consumers, one table per format: parity with `multiexport run`, native vs Python latency, bundle size.

For each model, one `compare --native` over every backend (paired mode: each native consumer takes a slice per
round beside its Python runner, so the speed-up carries an interval over the same rounds); then, per artifact
that compare wrote, `multiexport run` and `multiexport native` on the example inputs, each in a fresh process,
compared leaf by leaf (bit-exact, or the largest distance in ulps); and, for the first model, the size of
`multiexport native DIR --bundle OUT`.

Run: `.venv/bin/python -m benchmarks.native_table [--models seed,mlp,cnn] [--backends ...] [--bench-time 1]`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.pjrt_plugins import ulps
from multiexport import examples
from multiexport.comparison import compare
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.measure.bench import BenchConfig

BACKENDS = ("xla", "savedmodel", "onnx", "iree", "litert", "openvino")


def parity(directory: Path, feed: dict, work: Path) -> str:
    """`multiexport run` vs `multiexport native` on `feed`, each in its own process: bit-exact or max ulps."""
    save_npz(work / "in.npz", feed)
    for command, out in (("run", "python.npz"), ("native", "native.npz")):
        subprocess.run([sys.executable, "-m", "multiexport", command, str(directory), "--inputs", str(work / "in.npz"),
                        "--out", str(work / out)], check=True, capture_output=True, timeout=900)
    python, native = load_npz(work / "python.npz"), load_npz(work / "native.npz")
    worst = max(ulps(np.asarray(native[k]), np.asarray(python[k])) for k in python)
    return "bit-exact" if worst == 0 else f"{worst} ulps"


def bundle_mib(directory: Path, out: Path) -> float:
    from multiexport.native.bundle import bundle

    return bundle(directory, out).size / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp,cnn")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--bench-time", type=float, default=1.0)
    args = parser.parse_args()
    print("| model | format | consumer | native vs `multiexport run` | native p50 ms [95% CI] | Python p50 ms "
          "| native speed-up [95% CI] | bundle MiB |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for k, model in enumerate(args.models.split(",")):
            target = getattr(examples, model)()
            out = Path(tmp) / model
            results = compare(target, backends=args.backends.split(","), out_dir=out, trials=1, native=True,
                              bench=BenchConfig(bench_time=args.bench_time))
            feed = build_signature(target).example_feed()
            for name, row in results.backends.items():
                native = row.native
                if native is None:
                    print(f"| {model} | {name} | – | no native consumer | | | | |")
                    continue
                work = Path(tmp) / f"{model}-{name}"
                work.mkdir()
                agree = parity(out / name, feed, work) if native.status.value == "ok" else native.status.value
                size = f"{bundle_mib(out / name, work / 'bundle'):.0f}" if k == 0 else ""
                for s in native.sizes or [None]:
                    if s is None or s.latency is None:
                        print(f"| {model} | {name} | {native.consumer} | {agree} | {native.reason[:60]} | | | {size} |")
                        continue
                    lat = s.latency
                    ratio = ""
                    if s.speedup is not None:
                        ratio = f"{s.speedup:.2f}x"
                        if s.ratio is not None:
                            lo, hi = s.ratio.ci95_low, s.ratio.ci95_high
                            if not s.ratio.faster.endswith(" native"):
                                lo, hi = 1 / hi, 1 / lo
                            ratio += f" [{lo:.2f}, {hi:.2f}]"
                    print(f"| {model} | {name} | {native.consumer} | {agree} | {lat.p50_ms:.4g} "
                          f"[{lat.ci95_low_ms:.4g}, {lat.ci95_high_ms:.4g}] | {s.python_p50_ms:.4g} | {ratio} "
                          f"({s.measured}) | {size} |", flush=True)
                if size:
                    import shutil

                    shutil.rmtree(work / "bundle", ignore_errors=True)


if __name__ == "__main__":
    main()
