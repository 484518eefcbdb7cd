"""IREE before/after issue 33, paired: the old configuration (host CPU flags only, local-task) vs the vendor's
(data tiling, im2col by the module's convolutions, the driver measured at export), same model, one process.

For each model: export twice (the old configuration through the backend options data_tiling=false,
im2col=off, driver=local-task; the new through the defaults), load both runners, then alternate blocks of
`run_prepared` on each, so machine noise hits both alike; outputs on the example inputs compared.
Models: multiexport.examples names (cnn, mlp, transformer, ...), `resnet_small` (a one-block-per-stage
ResNet at 64x64: ResNet-50's convolution shapes in seconds) and benchmarks.realistic's static ones
(`resnet_b1`, `bert_b1`, `gpt2_step_b1`: minutes to export on 2 cores).

Run: `.venv/bin/python -m benchmarks.iree_flags [--models cnn,resnet_small] [--rounds 5]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from multiexport import examples
from multiexport.exporting import ExportOptions, RunOptions
from multiexport.exporting.options import usable_cpus
from multiexport.exporting.registry import get_backend
from multiexport.leaves import Target, build_signature

OLD = {"data_tiling": False, "im2col": "off", "driver": "local-task"}


def resnet_small(size: int = 64) -> Target:
    import jax
    import jax.numpy as jnp

    from benchmarks.realistic.models import ResNet

    images = jax.random.normal(jax.random.key(1), (1, size, size, 3), jnp.float32)
    model = ResNet(stages=(1, 1, 1, 1), classes=10)
    variables = model.init(jax.random.key(0), images)

    def resnet_small(images):
        return {"logits": model.apply(variables, images)}

    return Target(resnet_small, args=(images,), name="resnet_small")


def target_for(name: str) -> Target:
    if name == "resnet_small":
        return resnet_small()
    if hasattr(examples, name):
        return getattr(examples, name)()
    from benchmarks.realistic import models

    return getattr(models, name)()


def pair(name: str, rounds: int, root: Path) -> dict:
    backend = get_backend("iree")
    target = target_for(name)
    sig = build_signature(target)
    feed = sig.example_feed()
    runs = {}
    for label, options in (("old", OLD), ("new", {})):
        start = time.perf_counter()
        artifact = backend.export(target.fn, sig, root / f"{name}-{label}", ExportOptions(backend_options=options))
        seconds = time.perf_counter() - start
        runner = backend.load(artifact.directory, RunOptions(threads=usable_cpus()))
        prepared = runner.prepare(feed)
        runs[label] = (artifact.manifest, runner, prepared, seconds, runner(feed))
    blocks = {}
    for label, (_, runner, prepared, _, _) in runs.items():
        runner.run_prepared(prepared)
        start = time.perf_counter()
        runner.run_prepared(prepared)
        blocks[label] = max(1, int(0.05 / max(time.perf_counter() - start, 1e-7)))
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, (_, runner, prepared, _, _) in runs.items():
            start = time.perf_counter()
            for _ in range(blocks[label]):
                runner.run_prepared(prepared)
            times[label].append((time.perf_counter() - start) / blocks[label])
    old, new = (statistics.median(times[k]) * 1e6 for k in ("old", "new"))
    diff = max(float(np.max(np.abs(np.asarray(runs["old"][4][k], np.float64) - np.asarray(runs["new"][4][k], np.float64))))
               for k in runs["old"][4])
    m = runs["new"][0].format
    return {"model": name, "old_us": old, "new_us": new, "speedup": old / new, "max_abs_diff": diff,
            "new_flags": " ".join(m["compile_flags"][1:]), "new_driver": m["drivers"]["llvm-cpu"],
            "driver_us": m.get("driver_choice", {}).get("median_us", {}),
            "export_s": (runs["old"][3], runs["new"][3])}


def _measured(driver_us: dict) -> str:
    """The export's driver measurement, as it chose: 'sync 0.80 / task 0.41 ms'."""
    return " / ".join(f"{d.removeprefix('local-')} {us / 1e3:.3g}" for d, us in driver_us.items()) + " ms" if driver_us else "not measured"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="cnn,mlp,transformer,resnet_small")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| model | old: host flags, local-task (us) | new (us) | old / new | new flags | new driver (measured at export) | "
          "max abs diff | export s old / new |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            r = pair(name, args.rounds, Path(tmp))
            print(f"| {r['model']} | {r['old_us']:.1f} | {r['new_us']:.1f} | {r['speedup']:.2f} | {r['new_flags']} | "
                  f"{r['new_driver']} ({_measured(r['driver_us'])}) | {r['max_abs_diff']:.2g} | {r['export_s'][0]:.0f} / {r['export_s'][1]:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
