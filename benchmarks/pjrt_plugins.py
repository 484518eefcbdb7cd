"""Which PJRT CPU plugin should the XLA native consumer load? Every installed one, side by side, in one run.

For each model: export the XLA artifact once, then for each plugin (a) parity of `pjrt_run` with that plugin
against jax.jit on the example inputs (bit-exact or the largest difference in ulps), and (b) per-call latency
inside the program, timed in interleaved rounds (each round runs every plugin once, the order rotating), every
call's time pooled into the p50 with its 95 % interval (the statistic `compare` uses). Beside them: each
plugin's size, its package's own description of where it comes from, and the PJRT API and StableHLO range the
plugin reports (`pjrt_run --info`).

Run: `.venv/bin/python -m benchmarks.pjrt_plugins [--models seed,mlp,cnn] [--rounds 5] [--calls 200]`
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.measure.bench import summarize
from multiexport.measure.pairing import round_orders
from multiexport.native.build import build
from multiexport.native.run import run as native_run
from multiexport.native.runtimes import package_dir

# (distribution, module directory, plugin file inside it)
PLUGINS = {
    "xla-cpu-pjrt": ("xla_cpu_pjrt", "xla_plugins", "xla_cpu_pjrt/xla_cpu_pjrt.so"),
    "lammps-jax-pjrt-cpu": ("lammps_jax_pjrt_cpu", "lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so"),
}


def installed() -> dict[str, Path]:
    found = {}
    for name, (_, module, file) in PLUGINS.items():
        directory = package_dir(module)
        if directory is not None and (directory / file).is_file():
            found[name] = (directory / file).resolve()
    return found


def provenance(name: str) -> str:
    meta = importlib.metadata.metadata(PLUGINS[name][0])
    who = meta.get("Author") or meta.get("Author-email") or "no author given"
    return f"{meta['Version']}, {who}: {meta.get('Summary') or ''}".strip()


def plugin_info(plugin: Path) -> str:
    out = subprocess.run([str(build("pjrt_run")), "--plugin", str(plugin), "--info"], env={},
                         capture_output=True, text=True, timeout=120)
    try:
        info = json.loads(out.stdout)
    except json.JSONDecodeError:
        return " ".join((out.stdout or out.stderr).split())[:200]
    return (f"PJRT API {info.get('pjrt_api_version')}, StableHLO {info.get('stablehlo_minimum_version')} to "
            f"{info.get('stablehlo_current_version')}")


def ulps(got: np.ndarray, want: np.ndarray) -> int:
    """The largest distance in units in the last place between two float arrays of the same dtype."""
    if got.dtype.kind != "f":
        return 0 if np.array_equal(got, want) else -1
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
    a, b = got.view(bits).astype(np.int64), want.view(bits).astype(np.int64)
    a = np.where(a < 0, np.iinfo(bits).min - a, a)  # sign-magnitude to a monotonic integer line
    b = np.where(b < 0, np.iinfo(bits).min - b, b)
    return int(np.max(np.abs(a - b))) if a.size else 0


def measure(model: str, plugins: dict[str, Path], rounds: int, calls: int, threads: int, root: Path) -> list[dict]:
    import jax

    target = getattr(examples, model)()
    sig = build_signature(target)
    feed = sig.example_feed()
    artifact = get_backend("xla").export(target.fn, sig, root / model)
    leaves = [leaf.name for leaf in sig.outputs]
    want = dict(zip(leaves, jax.tree_util.tree_leaves(jax.jit(target.fn)(*target.args, **target.kwargs))))
    rows = {}
    for name, plugin in plugins.items():
        got = native_run(artifact.directory, feed, plugin=plugin, threads=threads).outputs
        worst = max(ulps(np.asarray(got[leaf]), np.asarray(want[leaf])) for leaf in leaves)
        rows[name] = {"model": model, "plugin": name, "ulps": worst, "slices": []}
    for order in round_orders(list(plugins), rounds):
        for name in order:
            done = native_run(artifact.directory, feed, plugin=plugins[name], threads=threads, iters=calls, warmup=20)
            rows[name]["slices"].append(done.samples_ns)
    for row in rows.values():
        stats = summarize(np.concatenate(row.pop("slices")))
        row.update(p50_us=stats.p50_ms * 1e3, ci95_us=[stats.ci95_low_ms * 1e3, stats.ci95_high_ms * 1e3],
                   calls=stats.n)
    return list(rows.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp,cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per plugin per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    plugins = installed()
    if not plugins:
        raise SystemExit("no PJRT CPU plugin installed: pip install 'multiexport[native]'")
    print("| plugin | size MiB | package (version, author: summary) | pjrt_run --info |")
    print("|---|---|---|---|")
    for name, path in plugins.items():
        print(f"| {name} | {path.stat().st_size / 2**20:.0f} | {provenance(name)} | {plugin_info(path)} |")
    print()
    print("| model | plugin | parity vs jax.jit (max ulps) | p50 us [95% CI] | calls |")
    print("|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for row in measure(model, plugins, args.rounds, args.calls, args.threads, Path(tmp)):
                rows.append(row)
                parity = "bit-exact" if row["ulps"] == 0 else f"{row['ulps']} ulps"
                print(f"| {model} | {row['plugin']} | {parity} | {row['p50_us']:.1f} "
                      f"[{row['ci95_us'][0]:.1f}, {row['ci95_us'][1]:.1f}] | {row['calls']} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
