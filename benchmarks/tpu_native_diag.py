"""Why the native consumer on the TPU differs from jax.jit on the chip (1.3e-3 of max|ref| on the transformer block,
bit-exact on the seed, the MLP and the conv net): its compile options, or the module it compiles?

    python -m benchmarks.tpu_native_diag OUT [--models transformer,mlp] [--platform tpu|cpu] [--timeout S]

(on the lent TPU machine through `TPU_CHECK_DIAG=1 bash benchmarks/tpu_check.sh OUT`, in the check's venv; with
--platform cpu it rehearses on a CPU machine with a PJRT CPU plugin). Per model, two XLA artifacts are exported on
the CPU (JAX kept off the chip): lowered for the device's platform alone, and for cpu and it (what compare and
tpu_check ship). One child process owns the chip: multiexport's XLA runner runs each artifact there (jax.jit of
Exported.call, the row that is bit-identical to jax.jit on the TPU) while jax's own compile is watched: the
serialized CompileOptions jax passes to the PJRT client (`jax._src.compiler.backend_compile_and_load`) and the
module it compiles are written beside the artifact. After it exits, pjrt_run runs each artifact on the device's
plugin four ways: A the manifest's program and CompileOptionsProto (what `multiexport native` runs today), B the
manifest's program with jax's options (--compile-options), C jax's module with the manifest's options (--program;
single-platform artifact only: the same arguments), D jax's module and options. Each against the runner's outputs:
error / max|ref| and whether bit-exact. If B is bit-exact where A is not, the options are the cause (carry jax's
in the manifest); if only C/D are, the module jax wraps around the export is. Writes OUT/native_diag.json and
OUT/native_diag.md; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

VARIANTS = {"A manifest program + manifest options": (False, False), "B manifest program + jax's options": (False, True),
            "C jax's module + manifest options": (True, False), "D jax's module + jax's options": (True, True)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tpu_native_diag", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory for native_diag.json, native_diag.md and the artifacts")
    p.add_argument("--models", default="transformer,mlp", help="benchmarks.tpu_models names (default transformer,mlp)")
    p.add_argument("--platform", choices=["tpu", "cpu"], default="tpu", help="the device (cpu: a rehearsal)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per pjrt_run and for the child (default 120)")
    p.add_argument("--variants", default="ABCD", help="which of the variants A-D to run (default ABCD; A alone: what "
                   "`multiexport native` runs)")
    p.add_argument("--kinds", default="alone,both", help="which artifacts: alone (lowered for the device's platform), "
                   "both (cpu and it); default alone,both")
    args = p.parse_args(argv)
    from benchmarks.tpu_models import MODELS

    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in args.models if m not in MODELS]
    if bad or not args.models:
        p.error(f"--models: got {','.join(bad) or 'none'}, expected names among {', '.join(MODELS)}")
    return args


def export_all(models: list[str], platform: str, work: Path, wanted: tuple[str, ...] = ("alone", "both")
               ) -> dict[str, dict[str, Path]]:
    """Per model: {"alone": lowered for `platform` only, "both": for cpu and `platform`} (one for the CPU)."""
    from benchmarks import tpu_models
    from multiexport import api

    made: dict[str, dict[str, Path]] = {}
    for name in models:
        target = getattr(tpu_models, name)()
        kinds = {"alone": [platform]} if platform == "cpu" else {"alone": [platform], "both": ["cpu", platform]}
        kinds = {k: v for k, v in kinds.items() if k in wanted} or kinds
        made[name] = {}
        for kind, platforms in kinds.items():
            directory = work / f"{name}-{kind}"
            api.export(target, directory, "xla", platforms=platforms)
            made[name][kind] = directory
    return made


def child(job_path: str) -> int:
    """The process that owns the device: the XLA runner on each artifact, jax's compile watched."""
    job = json.loads(Path(job_path).read_text())
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    seen: list[dict[str, Any]] = []
    original = compiler.backend_compile_and_load

    def watched(backend, module, executable_devices, options, host_callbacks):
        seen.append({"name": ir.StringAttr(module.operation.attributes["sym_name"]).value,
                     "bytecode": mlir.module_to_bytecode(module), "options": options.SerializeAsString()})
        return original(backend, module, executable_devices, options, host_callbacks)

    compiler.backend_compile_and_load = watched
    from multiexport import api
    from multiexport.exporting.manifest import Manifest
    from multiexport.files.npz import load_npz, save_npz

    report: dict[str, Any] = {}
    for artifact in job["artifacts"]:
        directory = Path(artifact)
        manifest = Manifest.read(directory)
        feed = load_npz(manifest.path(directory, "example_inputs"), "example inputs")
        seen.clear()
        runner = api.load(directory, device=job["device"], trust_artifact=True)
        outputs = {k: np.asarray(v) for k, v in runner(feed).items()}
        save_npz(directory.parent / f"{directory.name}.runner.npz", outputs)
        # the executable of Exported.call: the largest module compiled for the call (not a transfer's helper)
        chosen = max(seen, key=lambda s: len(s["bytecode"])) if seen else None
        if chosen is not None:
            (directory.parent / f"{directory.name}.jax_options.pb").write_bytes(chosen["options"])
            (directory.parent / f"{directory.name}.jax_module.mlirbc").write_bytes(chosen["bytecode"])
        report[directory.name] = {"compiled": [s["name"] for s in seen], "chosen": chosen["name"] if chosen else None,
                                  "options_bytes": len(chosen["options"]) if chosen else 0}
    Path(job["report"]).write_text(json.dumps(report, indent=1))
    return 0


def err_scale(got: np.ndarray, want: np.ndarray) -> float:
    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b), initial=0.0)) / max(float(np.max(np.abs(b), initial=0.0)), 1e-300)


def native_variant(directory: Path, device: str, module: bool, options: bool, out: Path, timeout: float,
                   want: dict[str, np.ndarray]) -> dict[str, Any]:
    """pjrt_run on `directory` with the manifest's or jax's module and options, against the runner's outputs."""
    from multiexport.exporting.manifest import Manifest
    from multiexport.native.run import command

    jax_options = directory.parent / f"{directory.name}.jax_options.pb"
    jax_module = directory.parent / f"{directory.name}.jax_module.mlirbc"
    if (options and not jax_options.is_file()) or (module and not jax_module.is_file()):
        return {"status": "skipped", "reason": "jax compiled nothing for this artifact in the child"}
    argv, env = command(directory, outputs_dir=str(out), device=device, trust_artifact=True)
    argv += (["--compile-options", str(jax_options)] if options else []) + (["--program", str(jax_module)] if module
                                                                              else [])
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=directory, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"pjrt_run ran past {timeout:g} s"}
    seconds = round(time.perf_counter() - started, 2)
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:400]
        return {"status": "failed", "reason": said, "seconds": seconds}
    manifest = Manifest.read(directory)
    errors, exact = {}, True
    for result in (manifest.native or {}).get("results", []):
        if result.get("kind", "leaf") != "leaf":
            continue
        got = np.load(out / result["file"])
        errors[result["leaf"]] = err_scale(got, want[result["leaf"]])
        exact = exact and got.tobytes() == np.asarray(want[result["leaf"]]).tobytes()
    notes = [line for line in proc.stderr.splitlines() if "note:" in line]  # pjrt_run ran the multi-platform main
    return {"status": "ok", "err": errors, "bit_exact": exact, "seconds": seconds, "note": " ".join(notes)[:300]}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1])
    args = parse_args(argv)
    from multiexport.environment import keep_jax_off_the_tpu

    keep_jax_off_the_tpu()  # this process exports on the CPU; the child and pjrt_run take the chip in turn
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # the artifacts and jax's modules (tens of MB) stay out of OUT, which travels back from the device machine
    work = Path(tempfile.mkdtemp(prefix="tpu-native-diag-"))
    try:
        return _diag(args, out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _diag(args: argparse.Namespace, out: Path, work: Path) -> int:
    from multiexport.environment import tpu_worker_environment

    started = time.perf_counter()
    made = export_all(args.models, args.platform, work, tuple(k.strip() for k in args.kinds.split(",")))
    job = {"artifacts": [str(d) for kinds in made.values() for d in kinds.values()], "device": args.platform,
           "report": str(work / "child.json")}
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, **(tpu_worker_environment() if args.platform == "tpu" else {"JAX_PLATFORMS": "cpu"})}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.tpu_native_diag", "--child", str(work / "job.json")],
                          env=env, capture_output=True, text=True, timeout=args.timeout * 2)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        print(f"tpu_native_diag: the child that runs the XLA runner failed (exit {proc.returncode})", file=sys.stderr)
        return 3
    compiled = json.loads((work / "child.json").read_text())
    for pb in work.glob("*.jax_options.pb"):  # small: what jax compiled with, for the lead to decode
        shutil.copy(pb, out / pb.name)
    rows = []
    for name, kinds in made.items():
        for kind, directory in kinds.items():
            want = dict(np.load(work / f"{directory.name}.runner.npz"))
            for label, (module, options) in VARIANTS.items():
                if label[0] not in args.variants.upper() or (module and kind == "both"):
                    continue  # jax's module for one platform takes no platform index: other arguments
                res = native_variant(directory, args.platform, module, options, work / f"out-{directory.name}-{label[0]}",
                                     args.timeout, want)
                rows.append({"model": name, "artifact": kind, "variant": label, **res})
                print(f"[diag] {name} {kind} {label}: {res['status']} {res.get('err', res.get('reason', ''))} "
                      f"bit-exact {res.get('bit_exact')} {res.get('note', '')}", flush=True)
    result = {"platform": args.platform, "seconds": round(time.perf_counter() - started, 1), "rows": rows,
              "compiled": compiled}
    (out / "native_diag.json").write_text(json.dumps(result, indent=1))
    lines = [f"# Native consumer vs multiexport's XLA runner on the {args.platform} ({result['seconds']} s)", "",
             "Error: max|pjrt_run - runner| / max|runner| per output leaf. A: what `multiexport native` runs (for an artifact of several platforms, the program lowered for this one alone: native.platform_modules); B: jax's "
             "CompileOptions; C: jax's module; D: both.", "",
             "| model | artifact | variant | status | error | bit-exact | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = ", ".join(f"{leaf} {v:.2g}" for leaf, v in r.get("err", {}).items()) or "-"
        lines.append(f"| {r['model']} | {r['artifact']} | {r['variant']} | {r['status']} | {err} | "
                     f"{r.get('bit_exact', '-')} | {r.get('reason', '') or r.get('note', '')} |")
    lines += ["", "Compiled by jax per artifact (the chosen one's serialized CompileOptions are in OUT as NAME.jax_options.pb): "
              + "; ".join(f"{k}: {v['chosen']} ({v['options_bytes']} B of options)" for k, v in compiled.items())]
    (out / "native_diag.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
