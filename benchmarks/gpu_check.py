"""The GPU check: what the lent device machine can verify, in one process, with what it has installed.

    python -m benchmarks.gpu_check OUT_DIR [--models seed,mlp_dynamic,transformer_dynamic] [--bench-time S]
    python -m benchmarks.gpu_check --summarize OUT_DIR/results.json   # rewrite summary.md from a results file

Run by benchmarks/gpu_check.sh, which installs multiexport with --no-deps over the machine's packages first.
Per model, against jax.jit of the same function on the same device:

- GPU: the XLA artifact (jax.export, lowered for cpu and cuda) through jax.jit(Exported.call) on the GPU,
  and the same artifact through the native PJRT consumer (pjrt_run, C++) loading the CUDA PJRT plugin jax
  itself loads, a symbolic batch through the static modules refined at export;
- CPU, for comparison: jax.jit, the XLA artifact, the native consumer with a CPU PJRT plugin (where one is
  installed) and ONNX Runtime's CPU build;
- a `not-available` row for each other format, naming what is missing.

Parity is per output leaf with multiexport's default tolerances, on the example and one seeded trial per
batch size. Latency is p50 per call with inputs already on the device and the call synchronised
(block_until_ready; the native program waits on PJRT's completion event); host->device (jax.device_put of
the inputs) and device->host (np.asarray of fresh device outputs) are timed apart. Without a GPU the GPU
rows are `no-gpu` rows with JAX's reason: the rehearsal on a CPU machine runs every other row the same way.
Writes OUT_DIR/results.json (schema below) and OUT_DIR/summary.md (one page).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

SCHEMA = "multiexport.gpu_check/1"
MODELS = ("seed", "mlp_dynamic", "transformer_dynamic")
BATCH_SIZES = (1, 8, 64)
PACKAGES = (
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "flax",
    "numpy",
    "onnx",
    "onnxruntime",
    "onnx-ir",
    "jax2onnx",
    "multiexport",
)
# What the device machine lacks for each other format (its own backend's reason is added when it has one).
MISSING_RUNTIME = {
    "savedmodel": "TensorFlow",
    "iree": "IREE (iree-base-compiler/runtime)",
    "litert": "LiteRT (ai-edge-litert) and TensorFlow",
    "openvino": "OpenVINO",
}


@dataclass(frozen=True)
class CheckConfig:
    """What one check runs.

    out: the output directory (results.json, summary.md, artifacts/).
    models: names from MODELS.
    batch_sizes: sizes of the symbolic batch `b` to check and time (models without one run at their own).
    bench_time: seconds of timed calls per row and size (at least min_iters calls).
    min_iters: the fewest timed calls per row and size.
    native: whether to build and run the native PJRT consumer.
    artifacts: where the exported artifacts go (default: OUT/artifacts); the device script puts them in a
        temporary directory, since only 8 files come back from the device machine's OUT.
    """

    out: Path
    models: tuple[str, ...] = MODELS
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    bench_time: float = 0.5
    min_iters: int = 20
    native: bool = True
    artifacts: Path | None = None


@dataclass
class Row:
    """One line of the check: a format on a runtime and device, for one model.

    model: the example's name ("" for the per-format not-available rows).
    format: "jax.jit" (the reference), "xla", "xla native", "onnx", or another backend's name.
    runtime: what ran it, in words.
    device: "gpu" or "cpu".
    status: "ok", "parity-failed", "no-gpu", "not-available", "not-checked" (a format this machine has but
        the device machine lacks) or "failed".
    reason: why, when not ok (or a note when ok).
    parity: output leaf -> {passed, max_abs, max_rel, err_scale, trials}: the worst over the trials.
    sizes: "b=8" (or "static") -> latency figures in ms: p50_ms, p90_ms, calls, and where measured h2d_ms,
        d2h_ms (p50 of the transfers), compile_ms (the native program's compile).
    """

    model: str
    format: str
    runtime: str
    device: str
    status: str = "ok"
    reason: str = ""
    parity: dict[str, dict[str, Any]] = field(default_factory=dict)
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)


def make_target(name: str):
    from multiexport import examples

    if name == "seed":
        return examples.seed()
    if name == "mlp_dynamic":
        return examples.mlp_dynamic()
    if name == "transformer_dynamic":
        return examples.transformer(symbolic_batch=True)
    raise SystemExit(f"error: Model '{name}' | unknown, expected one of {', '.join(MODELS)}")


def environment() -> dict[str, Any]:
    """Versions, devices and the GPU's own words (nvidia-smi), for the summary's header."""
    from importlib import metadata

    import jax

    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    smi = ""
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        smi = f"nvidia-smi: {exc}"
    from jax import export

    return {
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "versions": versions,
        "jax_devices": [str(d) for d in jax.devices()],
        "export_platform": export.default_export_platform(),
        "nvidia_smi": smi,
    }


def gpu_device() -> tuple[Any, str]:
    """(JAX's first GPU, "") or (None, why there is none)."""
    import jax

    try:
        return jax.devices("gpu")[0], ""
    except RuntimeError as exc:
        return None, f"JAX {jax.__version__} sees no GPU: {' '.join(str(exc).split())[:300]}"


def time_p50(call: Callable[[], Any], config: CheckConfig, setup: Callable[[], Any] | None = None) -> dict[str, Any]:
    """p50/p90 of `call` in ms over `config.bench_time` seconds (at least min_iters calls, 3 untimed first);
    with `setup`, each call gets setup()'s fresh result, made outside the timed region."""
    times: list[int] = []
    start = time.perf_counter_ns()
    for i in range(3 + 100_000):
        value = setup() if setup else None
        t0 = time.perf_counter_ns()
        call(value) if setup else call()
        if i >= 3:
            times.append(time.perf_counter_ns() - t0)
            if len(times) >= config.min_iters and time.perf_counter_ns() - start > config.bench_time * 1e9:
                break
    ms = np.sort(np.asarray(times, dtype=np.float64)) / 1e6
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)), "calls": int(ms.size)}


def worst_parity(verdict) -> dict[str, dict[str, Any]]:
    """Per output leaf: passed on every trial, and the largest errors over them."""
    out: dict[str, dict[str, Any]] = {}
    for v in verdict.leaves:
        leaf = out.setdefault(
            v.name, {"passed": True, "max_abs": 0.0, "max_rel": 0.0, "err_scale": 0.0, "trials": 0, "reasons": []}
        )
        leaf["passed"] = leaf["passed"] and v.passed
        leaf["trials"] += 1
        for key in ("max_abs", "max_rel", "err_scale"):
            leaf[key] = max(leaf[key], float(getattr(v.stats, key)))
        leaf["reasons"] += v.reasons[:1]
    return out


class ModelCheck:
    """Everything one model's rows need: its signature, trials, batch feeds and exported artifacts."""

    def __init__(self, name: str, config: CheckConfig, gpu, gpu_reason: str):
        from multiexport.leaves import build_signature
        from multiexport.measure.inputs import make_trials

        self.name, self.config, self.gpu, self.gpu_reason = name, config, gpu, gpu_reason
        self.target = make_target(name)
        self.sig = build_signature(self.target)
        symbols = list(self.sig.symbolic_dims)
        sizes = {s: config.batch_sizes for s in symbols}
        self.trials = make_trials(self.sig.inputs, examples=self.sig.example_feed(), trials=1, dim_sizes=sizes)
        self.feeds: dict[str, dict[str, np.ndarray]] = {}  # "b=8" -> a feed at that size, for timing
        for trial in self.trials:
            key = ",".join(f"{k}={v}" for k, v in sorted(trial.dims.items())) or "static"
            if trial.name != "example" or not symbols:
                self.feeds.setdefault(key, trial.feed)
        self.static_sizes = {s: tuple(sorted(set(config.batch_sizes))) for s in symbols}
        self.rows: list[Row] = []
        self.artifacts = (config.artifacts or config.out / "artifacts") / name

    def export(self, backend: str) -> Path:
        from multiexport import api

        platforms = ("cpu", "cuda") if self.gpu is not None and backend == "xla" else None
        directory = self.artifacts / backend
        api.export(self.target, directory, backend, platforms=platforms, static_sizes=self.static_sizes or None)
        return directory

    def references(self, device: str) -> tuple[Any, list[dict[str, np.ndarray]]]:
        from multiexport.measure.reference import ReferenceRunner

        runner = ReferenceRunner(self.target, self.sig, device=device)
        return runner, [runner(t.feed) for t in self.trials]

    def parity(
        self, label: str, got: list[dict[str, np.ndarray]], want: list[dict[str, np.ndarray]], trials=None
    ) -> dict[str, dict[str, Any]]:
        from multiexport.measure.parity import check_parity

        trials = trials if trials is not None else self.trials
        verdict = check_parity(label, got, want, self.sig.outputs, [t.name for t in trials])
        return worst_parity(verdict)

    def python_row(self, fmt: str, runtime: str, device: str, runner, want) -> Row:
        """A Python runner's row: parity against `want` (the same device's jax.jit), p50 per size."""
        row = Row(self.name, fmt, runtime, device)
        row.parity = self.parity(fmt, [runner(t.feed) for t in self.trials], want)
        for key, feed in self.feeds.items():
            prepared = runner.prepare(feed)
            row.sizes[key] = time_p50(lambda p=prepared: runner.run_prepared(p), self.config)
        return row

    def transfers(self, device, row: Row) -> None:
        """h2d and d2h p50 of each size's inputs and outputs on `device`, added to `row.sizes`."""
        import jax

        for key, feed in self.feeds.items():
            arrays = [np.asarray(feed[leaf.name]) for leaf in self.sig.inputs]
            outputs = [np.asarray(v) for v in row_reference_outputs(self, feed).values()]
            h2d = time_p50(lambda: jax.block_until_ready([jax.device_put(a, device) for a in arrays]), self.config)
            d2h = time_p50(
                lambda fresh: [np.asarray(o) for o in fresh],
                self.config,
                setup=lambda: jax.block_until_ready([jax.device_put(o, device) for o in outputs]),
            )
            row.sizes.setdefault(key, {}).update(h2d_ms=h2d["p50_ms"], d2h_ms=d2h["p50_ms"])

    def native_row(self, device: str, xla_dir: Path, want, python_row: Row | None) -> Row:
        """pjrt_run on the artifact: parity on every trial it has a module for, p50 measured inside it."""
        from multiexport.backends.xla.runtime import find_pjrt_plugin
        from multiexport.errors import MultiexportError
        from multiexport.measure.plan import native_supports
        from multiexport.native.run import run as native_run

        plugin = find_pjrt_plugin(device=device)
        runtime = f"pjrt_run (PJRT C API) + {plugin.name}"
        row = Row(self.name, "xla native", runtime, device)
        manifest_native = json.loads((xla_dir / "manifest.json").read_text())["native"]
        pjrt_platform = "cuda" if device == "gpu" else "cpu"
        lowered = {p for m in manifest_native.get("static_modules", {}).values() for p in m.get("platforms", [])}
        if lowered and pjrt_platform not in lowered:
            row.status = "not-available"
            row.reason = (
                f"the artifact's static modules are refined for {', '.join(sorted(lowered))} (this machine's "
                f"export platform), not {pjrt_platform}"
            )
            return row
        usable = [(t, w) for t, w in zip(self.trials, want) if native_supports(manifest_native, t.dims) is None]
        try:
            got = [native_run(xla_dir, t.feed, device=device, timeout=300).outputs for t, _ in usable]
        except MultiexportError as exc:
            row.status, row.reason = "failed", str(exc)[:1500]
            return row
        row.parity = self.parity("xla native", got, [w for _, w in usable], [t for t, _ in usable])
        for key, feed in self.feeds.items():
            p50 = (python_row.sizes.get(key, {}).get("p50_ms") if python_row else None) or 1.0
            calls = int(max(self.config.min_iters, min(5000, self.config.bench_time * 1e3 / max(p50, 1e-3))))
            try:
                timing = native_run(xla_dir, feed, iters=calls, warmup=3, device=device, timeout=300).timing or {}
            except MultiexportError as exc:
                row.sizes[key] = {"error": str(exc)[:500]}
                continue
            row.sizes[key] = {
                "p50_ms": timing.get("median_ms"),
                "p90_ms": timing.get("p90_ms"),
                "calls": timing.get("calls"),
                "compile_ms": timing.get("compile_ms"),
            }
        return row


def row_reference_outputs(check: ModelCheck, feed) -> dict[str, np.ndarray]:
    """The CPU reference's outputs on `feed`: only their shapes and dtypes matter to the transfer timing."""
    if not hasattr(check, "_cpu_ref"):
        from multiexport.measure.reference import ReferenceRunner

        check._cpu_ref = ReferenceRunner(check.target, check.sig, device="cpu")  # type: ignore[attr-defined]
    return check._cpu_ref(feed)  # type: ignore[attr-defined]


def guarded(
    rows: list[Row],
    model: str,
    fmt: str,
    runtime: str,
    device: str,
    make: Callable[[], Row | list[Row]],
    log: Callable[[str], None],
) -> list[Row]:
    """Run `make`; a failure becomes that row's `failed` (an exception) or `not-available` (a missing piece)."""
    from multiexport.errors import BackendUnavailable

    started = time.monotonic()
    try:
        made = make()
        new = made if isinstance(made, list) else [made]
    except BackendUnavailable as exc:
        new = [Row(model, fmt, runtime, device, "not-available", str(exc)[:1500])]
    except Exception as exc:  # one failed row must not lose the others: the check runs once on a lent machine
        new = [Row(model, fmt, runtime, device, "failed", f"{type(exc).__name__}: {' '.join(str(exc).split())[:1500]}")]
        log(traceback.format_exc())
    for row in new:
        if row.status == "ok" and any(not leaf["passed"] for leaf in row.parity.values()):
            row.status = "parity-failed"
            row.reason = "; ".join(r for leaf in row.parity.values() for r in leaf["reasons"])[:1500]
        log(
            f"[{time.monotonic() - started:6.1f} s] {row.model:20} {row.format:10} {row.device}: {row.status} "
            f"{row.reason[:160]}"
        )
    rows.extend(new)
    return new


def check_model(name: str, config: CheckConfig, gpu, gpu_reason: str, log) -> list[Row]:
    check = ModelCheck(name, config, gpu, gpu_reason)
    rows: list[Row] = []
    xla_dir: list[Path] = []

    def export_xla() -> list[Row]:
        xla_dir.append(check.export("xla"))
        return []

    guarded(rows, name, "xla", "export", "cpu", export_xla, log)
    for device in ("gpu", "cpu"):
        if device == "gpu" and gpu is None:
            for fmt, runtime in (
                ("jax.jit", "jax.jit on the GPU"),
                ("xla", "jax.jit(Exported.call) on the GPU"),
                ("xla native", "pjrt_run + jax's CUDA PJRT plugin"),
            ):
                rows.append(Row(name, fmt, runtime, "gpu", "no-gpu", gpu_reason))
                log(f"{name:20} {fmt:10} gpu: no-gpu")
            continue
        refs: dict[str, Any] = {}

        def reference(device=device) -> Row:
            runner, want = check.references(device)
            refs["runner"], refs["want"] = runner, want
            row = Row(
                name,
                "jax.jit",
                f"jax.jit(fn) on the {device.upper()}",
                device,
                reason="the reference every other row on this device is checked against",
            )
            for key, feed in check.feeds.items():
                prepared = runner.prepare(feed)
                row.sizes[key] = time_p50(lambda p=prepared: runner.run_prepared(p), config)
            check.transfers(gpu if device == "gpu" else _cpu(), row)
            return row

        guarded(rows, name, "jax.jit", "jax.jit", device, reference, log)
        if "want" not in refs or not xla_dir:
            continue
        python_rows: list[Row] = []

        def xla_row(device=device) -> Row:
            from multiexport import api

            runner = api.load(xla_dir[0], device)
            row = check.python_row(
                "xla", f"jax.jit(Exported.call) on the {device.upper()}", device, runner, refs["want"]
            )
            python_rows.append(row)
            return row

        guarded(rows, name, "xla", "jax.jit(Exported.call)", device, xla_row, log)
        if config.native:
            guarded(
                rows,
                name,
                "xla native",
                "pjrt_run",
                device,
                lambda device=device: check.native_row(
                    device, xla_dir[0], refs["want"], python_rows[0] if python_rows else None
                ),
                log,
            )
        if device == "cpu":

            def onnx_row() -> Row:
                from multiexport import api
                from multiexport.exporting.registry import get_backend

                available = get_backend("onnx").available()
                if not available.ok:
                    return Row(name, "onnx", "ONNX Runtime (CPU build)", "cpu", "not-available", available.reason)
                import onnxruntime

                runner = api.load(check.export("onnx"), "cpu")
                return check.python_row(
                    "onnx",
                    f"ONNX Runtime {onnxruntime.__version__} ({', '.join(onnxruntime.get_available_providers())})",
                    "cpu",
                    runner,
                    refs["want"],
                )

            guarded(rows, name, "onnx", "ONNX Runtime", "cpu", onnx_row, log)
    return rows


def _cpu():
    import jax

    return jax.devices("cpu")[0]


def unavailable_rows() -> list[Row]:
    """One row per other registered format: what this machine lacks to run it."""
    from multiexport.exporting import Availability
    from multiexport.exporting.registry import get_backend, names

    rows = []
    for name in names():
        if name in ("xla", "onnx"):
            continue
        missing = MISSING_RUNTIME.get(name, "its runtime")
        try:
            available = get_backend(name).available()
        except Exception as exc:  # a backend module that fails to import is reported, not raised
            available = Availability(False, f"{type(exc).__name__}: {exc}")
        if available.ok:  # a full development environment: the device machine still has none
            status = "not-checked"
            why = f"{missing} is installed here, but the device machine has none, so the check leaves it out"
        else:
            status = "not-available"
            why = f"not available here: no {missing} ({available.reason}); too large to carry to the device machine"
        rows.append(Row("", name, missing, "-", status, why))
    return rows


def native_info(device: str) -> dict[str, Any]:
    """How the native consumer is built here, and the PJRT plugin's own attributes (API version, XLA and
    StableHLO versions) from pjrt_run --info; the error where either is missing."""
    from multiexport.backends.xla.runtime import find_pjrt_header, find_pjrt_plugin, plugin_environment
    from multiexport.native.build import build

    info: dict[str, Any] = {}
    try:
        info["header"] = str(find_pjrt_header())
        info["program"] = str(build("pjrt_run"))
        plugin = find_pjrt_plugin(device=device)
        info["plugin"] = str(plugin)
        proc = subprocess.run(
            [info["program"], "--plugin", str(plugin), "--info"],
            capture_output=True,
            text=True,
            timeout=120,
            env=plugin_environment(plugin),
        )
        if proc.returncode != 0:
            info["error"] = f"pjrt_run --info exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}"
        else:
            info.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except Exception as exc:  # reported in the summary: the native rows say the same
        info["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
    return info


def run_check(config: CheckConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole check: every model's rows, the other formats, the environment; written to config.out."""
    started = time.monotonic()
    config.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    gpu, gpu_reason = gpu_device()
    log(f"GPU: {gpu if gpu is not None else gpu_reason}")
    native = {d: native_info(d) for d in ("gpu", "cpu")} if config.native else {}
    rows: list[Row] = []
    others = unavailable_rows()

    def write(complete: bool) -> dict[str, Any]:
        # After every model, so a run stopped by its time limit still leaves what it measured.
        results = {
            "schema": SCHEMA,
            "config": {**asdict(config), "out": str(config.out)},
            "environment": env,
            "gpu": str(gpu) if gpu is not None else None,
            "gpu_reason": gpu_reason,
            "native_plugins": native,
            "rows": [asdict(r) for r in rows + others],
            "seconds": round(time.monotonic() - started, 1),
            "complete": complete,
        }
        (config.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        (config.out / "summary.md").write_text(summary_markdown(results))
        return results

    for name in config.models:
        rows += check_model(name, config, gpu, gpu_reason, log)
        write(False)
    return write(True)


def _ms(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value * 1e3:.0f} us" if value < 1 else f"{value:.2f} ms"


def _parity_cell(parity: dict[str, dict[str, Any]]) -> str:
    if not parity:
        return "-"
    ok = sum(1 for leaf in parity.values() if leaf["passed"])
    worst = max(float(leaf["err_scale"]) for leaf in parity.values())
    return f"{ok}/{len(parity)} leaves, err {worst:.1e}"


def summary_markdown(results: dict[str, Any]) -> str:
    """One page: the machine, then one table row per model x format x device, then what could not run."""
    env = results.get("environment", {})
    versions = ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items())
    gpu = results.get("gpu") or f"none ({results.get('gpu_reason', '')})"
    lines = [
        "# GPU check" + ("" if results.get("complete", True) else " (incomplete: stopped before the last model)"),
        "",
        f"- GPU: {gpu}" + (f"; nvidia-smi: {env['nvidia_smi']}" if env.get("nvidia_smi") else ""),
        f"- Python {env.get('python', '?')} on {env.get('machine', '?')}; export platform "
        f"{env.get('export_platform', '?')}; {versions}",
        f"- Check took {results.get('seconds', '?')} s; parity: worst max|err|/max|ref| over the example and one "
        "trial per size, against jax.jit on the same device; p50 with inputs on the device, synchronised; "
        "h2d/d2h: the inputs' device_put and the outputs' copy back, timed apart",
    ]
    for device, info in (results.get("native_plugins") or {}).items():
        built = f"pjrt_run built against {info['header']}/pjrt_c_api.h; " if info.get("program") else ""
        if "error" in info:
            lines.append(f"- native {device}: {built}{info['error'][:300]}")
        else:
            lines.append(
                f"- native {device}: {Path(info.get('plugin', '?')).name}, PJRT C API "
                f"{info.get('pjrt_api_version', '?')}, StableHLO {info.get('stablehlo_minimum_version', '?')}"
                f"..{info.get('stablehlo_current_version', '?')}"
            )
    lines += [
        "",
        "| model | format | device | status | parity | size | p50 | h2d | d2h | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = results.get("rows", [])
    for r in rows:
        if not r["model"]:
            continue
        note = r["reason"] if r["status"] != "ok" else ""
        if r["status"] == "no-gpu" and note == results.get("gpu_reason"):
            note = "no GPU (see above)"
        sizes = list(r["sizes"].items()) or [("-", {})]
        for i, (size, figures) in enumerate(sizes):
            first = i == 0
            extra = f" (compile {_ms(figures['compile_ms'])})" if figures.get("compile_ms") and first else ""
            lines.append(
                f"| {r['model'] if first else ''} | {r['format'] if first else ''} | {r['device'] if first else ''} "
                f"| {r['status'] if first else ''} | {_parity_cell(r['parity']) if first else ''} | {size} "
                f"| {_ms(figures.get('p50_ms'))}{extra} | {_ms(figures.get('h2d_ms'))} | {_ms(figures.get('d2h_ms'))} "
                f"| {' '.join(note.split())[:200] if first else ''} |"
            )
    others = [r for r in rows if not r["model"]]
    if others:
        lines += ["", "Not available here:", ""]
        lines += [f"- **{r['format']}**: {' '.join(r['reason'].split())[:300]}" for r in others]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> tuple[CheckConfig | None, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", help="output directory (results.json, summary.md, artifacts/)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument(
        "--batch-sizes",
        default=",".join(map(str, BATCH_SIZES)),
        help="sizes of the symbolic batch to check and time (default: %(default)s)",
    )
    parser.add_argument("--bench-time", type=float, default=0.5, help="seconds of timed calls per row and size")
    parser.add_argument("--min-iters", type=int, default=20, help="fewest timed calls per row and size")
    parser.add_argument("--no-native", action="store_true", help="skip the native PJRT consumer")
    parser.add_argument("--artifacts", help="where the exported artifacts go (default: OUT_DIR/artifacts)")
    parser.add_argument("--summarize", metavar="RESULTS_JSON", help="only rewrite summary.md beside this results.json")
    args = parser.parse_args(argv)
    if args.summarize:
        return None, Path(args.summarize)
    if not args.out:
        parser.error("OUT_DIR is required (or --summarize RESULTS_JSON)")
    models = tuple(m for m in args.models.split(",") if m)
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        parser.error(f"--models: got {args.models!r}, expected names among {', '.join(MODELS)}")
    try:
        sizes = tuple(int(s) for s in args.batch_sizes.split(","))
    except ValueError:
        parser.error(f"--batch-sizes: got {args.batch_sizes!r}, expected sizes like 1,8,64")
    if not sizes or min(sizes) < 1:
        parser.error(f"--batch-sizes: got {args.batch_sizes!r}, expected sizes >= 1")
    if not args.bench_time > 0 or args.min_iters < 1:
        parser.error("--bench-time must be > 0 and --min-iters >= 1")
    artifacts = Path(args.artifacts) if args.artifacts else None
    config = CheckConfig(Path(args.out), models, sizes, args.bench_time, args.min_iters, not args.no_native, artifacts)
    return config, None


def main(argv: list[str] | None = None) -> int:
    config, summarize = parse_args(argv)
    if summarize is not None:
        results = json.loads(summarize.read_text())
        (summarize.parent / "summary.md").write_text(summary_markdown(results))
        return 0
    assert config is not None
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the native program shares the GPU
    config.out.mkdir(parents=True, exist_ok=True)
    with open(config.out / "log.txt", "a") as log_file:

        def log(text: str) -> None:
            print(text, flush=True)
            log_file.write(text + "\n")
            log_file.flush()

        results = run_check(config, log)
    print((config.out / "summary.md").read_text())
    bad = [r for r in results["rows"] if r["status"] in ("failed", "parity-failed")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
