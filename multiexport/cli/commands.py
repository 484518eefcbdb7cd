"""One function per command. Every option is validated (by the API's own dataclasses) before any work."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..api import BUILD_STEP, describe, export, load, target_spec
from ..comparison import CompareConfig, compare
from ..comparison.baseline import gate_inputs
from ..comparison.timing import start_early
from ..errors import BackendUnavailable, MultiexportError, UsageError
from ..exporting.manifest import Manifest
from ..exporting.options import check_run_device
from ..exporting.precision import split_variant
from ..exporting.registry import backend_class, default_names, names as backend_names, registered
from ..files.npz import load_npz, save_npz
from ..files.owned import check_overwritable
from ..files.paths import safe_component
from ..files.text import visible
from ..leaves import load_target as load_named_target
from ..leaves.factory_cache import FactoryCache
from ..leaves.target import DEFAULT_TARGET, top_level_packages
from ..measure.accuracy import parse_accuracy
from ..measure.bench import BenchConfig
from ..measure.inputs import parse_dim_sizes, parse_val_ranges
from ..measure.timeline import Timeline
from ..measure.tolerance import parse_tolerances
from ..native.bundle import bundle
from ..native.run import print_command, run as run_native
from ..preflight import check_jax_environment
from ..report.deploy_report import consumer_backends, deploy_lines
from ..report.regression import check_thresholds, diff_results, publish
from ..report.render import write_reports
from ..report.screenshot import screenshot
from ..results import load_results
from ..run.devices import keep_jax_off_the_tpu
from ..system.orphans import adopt_orphans, stop_leftovers
from .flags import batch_sizes as parse_batch_sizes
from .output import console, err_console, plain, print_export, print_outputs, print_results, print_signature
from .sweep_commands import diff_sweep_dirs


@contextlib.contextmanager
def target_output_to_stderr():
    """A target that prints while it is imported or traced must not pollute stdout (JSON, tables, pipes)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def load_target(spec: str | None, cache=None):
    """The TARGET; with `cache` (a FactoryCache), what its factory compiles is recorded for the workers."""
    check_jax_environment()
    with target_output_to_stderr():
        return load_named_target(spec) if cache is None else cache.load(spec)


def split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def backend_options(specs: list[str], backends: list[str]) -> dict[str, dict[str, str]]:
    """`["onnx.opset=21"]` -> {"onnx": {"opset": "21"}} (values validated by each backend's declared options)."""
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        backend, dot, name = key.partition(".")
        if not sep or not dot or not backend or not name:
            raise UsageError(f"Option '--backend-option {spec}' | expected BACKEND.NAME=VALUE, e.g. onnx.opset=21")
        if backend not in backends:
            raise UsageError(f"Option '--backend-option {spec}' | names backend '{backend}', expected one of "
                             f"{', '.join(backends)}")
        out.setdefault(backend, {})[name] = value
    return out


def cmd_signature(args) -> int:
    target = load_target(args.target)
    with target_output_to_stderr():
        data = describe(target, keep_unused=args.keep_unused)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print_signature(data, args.keep_unused)
    return 0


def cmd_export(args) -> int:
    if args.out_dir is None:
        raise UsageError("Option '--out-dir' | missing, expected the artifact directory to write: --out-dir DIR")
    backend_class(args.backend)  # an unknown name is a usage error before any work
    platforms = split(args.platforms) if args.platforms else None
    if args.device == "gpu":
        platforms = sorted(set(platforms or ["cpu"]) | {"cuda"})
    base = split_variant(args.backend)[0]  # `--backend onnx@int8` takes onnx's options
    if keep_jax_off_the_tpu().attached and platforms is None and base == "xla":  # lowering needs no chip: XLA for both
        platforms = ["cpu", "tpu"]
    options = backend_options(args.backend_option, [base]).get(base, {})
    static = parse_dim_sizes(args.static_sizes)
    target = load_target(args.target)
    with target_output_to_stderr():
        artifact = export(target, out_dir=args.out_dir, backend=args.backend, keep_unused=args.keep_unused, platforms=platforms,
                          external_weights=args.external_weights, static_sizes=static, backend_options=options,
                          precision=args.precision, calibration=args.calibration)
    print_export(artifact)
    return 0


def _runs_on_jax(backend: str) -> bool:
    """Whether the backend's runner imports JAX (its `runtime_modules`), so XLA_FLAGS and JAX_PLATFORMS are checked
    before it starts; an unknown backend is left to `load`, which says so."""
    try:
        return "jax" in backend_class(backend).runtime_modules
    except BackendUnavailable:
        return False


def _check_save_outputs(path: Path | None) -> None:
    """Before any work: --save-outputs names a file, and never one of the user's that it would replace."""
    if path is not None and path.is_dir():
        raise UsageError(f"Option '--save-outputs' | '{path}' is a directory, expected a file name such as out.npz")
    if path is not None:
        check_overwritable(path, "Option '--save-outputs'")


def _wrote(path: Path, outputs: dict) -> None:
    save_npz(path, outputs)
    print(visible(f"wrote {len(outputs)} outputs to {path}: {', '.join(outputs)}"))


def cmd_run(args) -> int:
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"Option '--threads' | got {args.threads}, expected an integer >= 1")
    _check_save_outputs(args.save_outputs)
    manifest = Manifest.read(args.artifact)
    check_run_device(manifest, args.device, f"Artifact '{args.artifact}'")  # one line before any runtime loads
    if _runs_on_jax(manifest.backend):
        check_jax_environment()
    inputs_path = args.inputs
    if inputs_path is None:
        if "example_inputs" not in manifest.files:
            raise UsageError(f"Artifact '{args.artifact}' | has no example_inputs.npz, expected --inputs FILE.npz")
        inputs_path = manifest.path(args.artifact, "example_inputs")
    feed = load_npz(inputs_path)
    runner = load(args.artifact, device=args.device, threads=args.threads, trust_artifact=args.trust_artifact)
    outputs = runner(feed)
    if args.save_outputs:
        _wrote(args.save_outputs, outputs)
        return 0
    print_outputs(manifest, outputs)
    return 0


def cmd_native(args) -> int:
    for name in ("iters", "warmup"):
        if getattr(args, name) < 0:
            raise UsageError(f"Option '--{name}' | got {getattr(args, name)}, expected an integer >= 0")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"Option '--threads' | got {args.threads}, expected an integer >= 1")
    if args.bundle is not None:
        return _native_bundle(args)
    _check_save_outputs(args.save_outputs)
    kwargs = dict(threads=args.threads, plugin=args.pjrt_plugin, trust_artifact=args.trust_artifact, device=args.device)
    if args.print_command:
        if args.inputs or args.save_outputs or args.iters:
            raise UsageError("Option '--print-command' | got --inputs/--save-outputs/--iters too, expected it alone: the line "
                             "runs on the artifact's example inputs in inputs/ (put your own .npy files there)")
        print(visible(print_command(args.artifact, **kwargs), keep_newlines=True))
        return 0
    manifest = Manifest.read(args.artifact)
    if args.inputs is None:
        if "example_inputs" not in manifest.files:
            raise UsageError(f"Artifact '{args.artifact}' | has no example_inputs.npz, expected --inputs FILE.npz")
        args.inputs = manifest.path(args.artifact, "example_inputs")
    result = run_native(args.artifact, load_npz(args.inputs), iters=args.iters, warmup=args.warmup, timeout=args.timeout,
                 **kwargs)
    if args.save_outputs:
        _wrote(args.save_outputs, result.outputs)
    else:
        print_outputs(manifest, result.outputs)
    if result.timing:
        t = result.timing
        print(f"native {visible(t.get('consumer', ''))}: {t.get('calls')} calls, median {t['median_ms']:.4g} ms, "
              f"p90 {t['p90_ms']:.4g} ms, min {t['min_ms']:.4g} ms (measured inside the program)")
    return 0


def _native_bundle(args) -> int:
    if args.inputs or args.save_outputs or args.iters or args.print_command or args.threads:
        raise UsageError("Option '--bundle' | got --inputs/--save-outputs/--iters/--threads/--print-command too, "
                         "expected it alone (or with --pjrt-plugin, --trust-artifact): DIR/run.sh passes its arguments "
                         "to the program")
    made = bundle(args.artifact, args.bundle, plugin=args.pjrt_plugin, trust_artifact=args.trust_artifact, timeout=args.timeout)
    print(visible(made.summary()))
    return 0


def compare_config(args, backends_known: bool = True):
    """The CompareConfig the options describe (validated there, before anything runs).

    backends_known=False validates every other option first, before the target is imported (a target file
    may register backends of its own, so names are checked once it is loaded).
    """
    batch_sizes = parse_batch_sizes(args.batch_sizes)
    bench = None if args.no_bench else BenchConfig(warmup_iters=args.warmup, min_iters=args.min_iters,
                                                    max_iters=args.max_iters, bench_time=args.bench_time,
                                                    include_transfers=args.include_transfers)
    backends = requested_backends(args)
    if not backends_known:
        if not backends:
            raise UsageError(f"Option 'backends' | got {args.backends!r}, expected at least one of: {', '.join(backend_names())}")
        backends = ["xla"]
    if args.inputs and not hasattr(args, "loaded_inputs"):
        args.loaded_inputs = load_npz(args.inputs)
    inputs = getattr(args, "loaded_inputs", None)
    return CompareConfig(
        backends=tuple(backends), out_dir=args.out_dir, trials=args.trials, seed=args.seed,
        val_ranges=parse_val_ranges(args.val_range), dim_sizes=parse_dim_sizes(args.dim_sizes),
        tolerances=parse_tolerances(args.tol), inputs=inputs, reference=args.reference,
        keep_unused=args.keep_unused, external_weights=args.external_weights,
        backend_options=backend_options(args.backend_option, [*backends, *consumer_backends(args.deploy)])
        if backends_known else {},
        device=args.device, matmul_precision=args.matmul_precision, platforms=tuple(split(args.platforms or '')) or None,
        threads=args.threads, timeout=args.timeout, bench=bench, batch_sizes=batch_sizes, export_jobs=args.export_jobs,
        native=args.native, native_plugin=str(args.pjrt_plugin) if args.pjrt_plugin else None,
        paired=not args.sequential, rounds=args.rounds, floor=args.floor,
        precisions=tuple(split(args.precisions)), calibration=args.calibration,
        accuracy=dict(parse_accuracy(a) for a in args.accuracy), deploy=tuple(args.deploy))


def cmd_compare(args) -> int:
    keep_jax_off_the_tpu()  # one process owns a TPU: this one and the CPU workers run JAX on the CPU
    check_thresholds(args.max_slowdown, args.max_parity_drift)
    pre = compare_config(args, backends_known=False)  # every option but the backend names, before the target loads
    start = time.perf_counter()
    # The paired workers of the backends known now start first: their runtimes import on the other core
    # while this process builds the target (its module may register more backends: those start later).
    known = [name for name in requested_backends(args) if name in backend_names()]
    early_workers = start_early(dataclasses.replace(pre, backends=tuple(known)), spec(args)) if known else None
    timeline = Timeline(start)
    timeline.mark(BUILD_STEP)
    spared = adopt_orphans()  # what the target starts and leaves (double-forked too) is stopped when the compare ends
    try:
        before = top_level_packages()
        with FactoryCache() as cache:  # the export workers build the target from the programs this load compiles
            built = load_target(args.target, cache)
            return _compare(args, built, start, early_workers, timeline, top_level_packages() - before)
    finally:
        if early_workers is not None:
            early_workers.close()  # if the compare did not adopt them (the target failed to load)
        stop_leftovers(spared)


def spec(args) -> str:
    """The TARGET string for the workers: a file made absolute against where the command started (the
    workers start wherever the target's factory left the working directory)."""
    return target_spec(args.target or DEFAULT_TARGET, getattr(args, "cwd", None))


def requested_backends(args) -> list[str]:
    return default_names() if args.backends == "all" else split(args.backends)


def _compare(args, target, start: float, early_workers, timeline, target_modules: frozenset[str] = frozenset()) -> int:
    if args.out_dir is None:  # the default beside where the command started, wherever the factory moved the cwd
        args.out_dir = getattr(args, "cwd", Path.cwd()) / "multiexport-out" / safe_component(target.name)
    config = compare_config(args)
    allow = split(args.allow_fail)
    unknown = [b for b in allow if b not in config.backends]
    if unknown:
        raise UsageError(f"Option '--allow-fail' | names '{unknown[0]}', expected one of {', '.join(config.backends)}")
    baseline, beside, said = gate_inputs(args.baseline, args.baseline_artifacts, config.backends, config.out_dir)
    gated = args.baseline is not None or args.baseline_artifacts is not None
    if beside is not None:  # the baseline's artifacts timed in the same rounds: the paired A/B
        config = dataclasses.replace(config, baseline_artifacts=beside)
    err = err_console()
    if said:
        err.print(plain(said))
    status = err.status("starting") if err.is_terminal else None  # a live line on terminals, plain lines in logs

    built = [f"{time.perf_counter() - start:6.1f}s target '{target.name}' built (its module imported, its arguments made)"]

    def progress(message: str) -> None:
        while built:  # said with the first step, after every check a usage error could fail (one line, then)
            err.print(plain(built.pop()))
        err.print(plain(f"{time.perf_counter() - start:6.1f}s {message}"))
        if status is not None:
            status.update(plain(message))

    if status is not None:
        status.start()
    try:
        with target_output_to_stderr():
            results = compare(target, config, target_spec=spec(args), progress=progress, early_workers=early_workers,
                              timeline=timeline, target_modules=target_modules)
    finally:
        if status is not None:
            status.stop()
    print_results(results)
    for line in deploy_lines(results):  # the verdict per deployment target, after today's single one
        console().print(plain(line))
    if getattr(args, "load", None):  # the load scenarios on this compare's faithful artifacts (cli.load_command)
        compare_load(results, config.batch_sizes, config.threads, args, progress)
    if getattr(args, "locate", False):  # the first diverging op of each failing row (cli.locate_command)
        compare_locate(results, target, config, progress)
    code = results.exit_code_allowing(allow)
    if gated:
        code = max(code, _gate(baseline, results, args))
    return code


def _gate(baseline, current, args) -> int:
    """Diff against a baseline, print and publish it; returns 1 on a regression."""
    d = diff_results(baseline, current, max_slowdown=args.max_slowdown, max_parity_drift=args.max_parity_drift)
    d = gate_load(d, *load_dirs(args, current))  # throughput, from load.json beside both runs (report.load)
    print(publish(d, args.junit))
    return d.exit_code


def cmd_diff(args) -> int:
    if args.sweep:
        return diff_sweep_dirs(args)
    check_thresholds(args.max_slowdown, args.max_parity_drift)
    # A baseline from multiexport 0.1 (schema 1) is read too: a diff across the upgrade is what it is for.
    return _gate(load_results(args.baseline, legacy=True), load_results(args.current, legacy=True), args)


def cmd_report(args) -> int:
    if args.screenshot:  # refused before the reports are written, not after
        check_overwritable(args.screenshot, "Option '--screenshot'")
    md, page = write_reports(load_results(args.results), args.out_dir or args.results.parent, source=args.results)
    print(visible(f"wrote {md} and {page}"))
    if args.screenshot:
        requests = screenshot(page, args.screenshot)
        print(f"wrote {args.screenshot}" + (f"; the page requested {requests}" if requests else "; no network requests"))
    return 0


def cmd_backends(args) -> int:
    for name, where in registered().items():
        try:
            cls = backend_class(name)
            status = cls().available()
            state = "available" if status.ok else f"unavailable: {status.reason}"
            options: Any = ", ".join(f"{o.name}={o.default!r} ({o.help})" for o in cls.options)
            precisions = ", ".join(cls.precisions)
        except MultiexportError as exc:
            state, options, precisions = f"broken: {exc}", "", ""
        print(f"{name:<12} {state}  ({where})")
        if precisions:
            example = f"; e.g. {name}@{cls.precisions[-1]}" if len(cls.precisions) > 1 else ""
            print(f"{'':<12} precisions: {precisions} (compare --precisions{example})")
        if options:
            print(f"{'':<12} options: {options}")
    return 0

from .load_command import cmd_load, compare_load, gate_load, load_dirs  # noqa: E402,F401 - load, compare --load, gate
from .locate_command import cmd_locate, compare_locate  # noqa: E402,F401 - `multiexport locate`, `compare --locate`
