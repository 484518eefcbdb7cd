"""`multiexport` command line: signature, export, run.

User mistakes (bad target, bad input, bad artifact) print one line and exit 2; a backend that fails
exits 3; `--debug` shows the traceback. Heavy libraries load only inside the command that needs them,
so `multiexport --help` works with the core alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .errors import MultiexportError, UsageError

TARGET_HELP = (
    "what to export: path/to/file.py:attr or package.module:attr, where attr is a multiexport.Target "
    "or a zero-argument function returning one (attr defaults to 'target'); omitted: the built-in "
    "seed example, fn(foo) = sum(foo.baz) on a flax.struct dataclass Foo(bar, baz)"
)


EXTERNAL_WEIGHTS_HELP = (
    "where weights the target closes over go: auto (default: out of the module once they reach 16 MiB: "
    "XLA/IREE a weights.safetensors beside it, SavedModel tf.Variables in variables/, ONNX external data in "
    "model.onnx.data), always (the same at any size), never (embedded as constants; ONNX refuses past its "
    "2 GB protobuf limit)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multiexport",
        description=(
            "Export one JAX function to several deployment formats with every input and output leaf "
            "named (foo.bar, params.Dense_0.kernel), and see which leaves each format keeps."
        ),
        epilog="Run 'multiexport COMMAND --help' for a command's options.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "signature",
        help="show the named input/output leaves and which become XLA parameters",
        description=(
            "Flatten TARGET's inputs and outputs into named leaves and show, for the XLA export, which "
            "leaves the module reads (used) and their parameter index; unused leaves are pruned by XLA "
            "unless --keep-unused."
        ),
    )
    p.add_argument("target", nargs="?", help=TARGET_HELP)
    p.add_argument("--keep-unused", action="store_true", help="make every leaf a module parameter, even unread ones")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(handler=cmd_signature)

    p = sub.add_parser(
        "export",
        help="export TARGET with one backend into an artifact directory",
        description="Write an artifact directory: the model files and a manifest.json mapping every leaf to its parameter.",
    )
    p.add_argument("target", nargs="?", help=TARGET_HELP)
    p.add_argument("--backend", default="xla", help="backend name (default: xla); see 'multiexport backends'")
    p.add_argument("--out", required=True, type=Path, help="artifact directory to write (replaced if it is an artifact)")
    p.add_argument("--keep-unused", action="store_true", help="make every leaf a parameter, even unread ones")
    p.add_argument("--external-weights", choices=["auto", "always", "never"], default="auto", help=EXTERNAL_WEIGHTS_HELP)
    p.add_argument(
        "--platforms",
        help="XLA/SavedModel: comma-separated platforms to lower for, e.g. cpu,cuda (default: this machine's)",
    )
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="gpu: build the artifact for the GPU too (XLA/SavedModel lower for cpu,cuda; IREE compiles for cuda)")
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser(
        "run",
        help="run an artifact directory on named inputs",
        description=(
            "Load DIR from disk alone (no original function needed), check the inputs against its manifest "
            "and run it. Inputs and outputs are .npz files keyed by leaf name."
        ),
    )
    p.add_argument("artifact", type=Path, metavar="DIR", help="artifact directory written by 'multiexport export'")
    p.add_argument(
        "--inputs", type=Path,
        help=".npz of named input arrays (default: the artifact's example_inputs.npz); unused leaves may be omitted",
    )
    p.add_argument("--out", type=Path, help="write outputs to this .npz (default: print a table)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="device to run on (default: cpu)")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser(
        "compare",
        help="export TARGET with every backend and check each one's numbers against JAX",
        description=(
            "Export TARGET with each backend, run every artifact from disk in its own worker process, and "
            "compare each named output leaf against jax.jit(fn) with dtype-aware tolerances. Writes "
            "OUT/results.json. Exit 0 when every backend is faithful, 1 on a parity failure, 2 on a usage "
            "or target error, 3 when a backend failed to export or run."
        ),
    )
    p.add_argument("target", nargs="?", help=TARGET_HELP)
    p.add_argument(
        "--backends", default="all",
        help="comma-separated backends, or 'all' for every registered one (default); a backend that is not "
             "installed shows as an 'unavailable' row",
    )
    p.add_argument("--out", type=Path, help="output directory (default: multiexport-out/<target name>)")
    p.add_argument("--trials", type=int, default=2, help="random input trials per size setting (default: 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    p.add_argument(
        "--val-range", action="append", default=[], metavar="LEAF=LOW:HIGH",
        help="value range for matching input leaves (glob patterns allowed), e.g. 'batch.tokens=0:1000'; repeatable",
    )
    p.add_argument(
        "--dim-sizes", action="append", default=[], metavar="DIM=N,N",
        help="concrete sizes for a symbolic dimension, e.g. b=1,8,64 (default: 1,5); repeatable",
    )
    p.add_argument(
        "--tol", action="append", default=[], metavar="LEAF=rtol:R,atol:A[,scale:S]",
        help="tolerance override for matching output leaves: pass when |got-ref| <= atol + scale*max|ref| + rtol*|ref|, e.g. 'out.logits=rtol:1e-3,atol:1e-4' (unset keys are 0); repeatable",
    )
    p.add_argument("--inputs", type=Path, help=".npz of named inputs to use instead of generated trials")
    p.add_argument(
        "--reference", choices=["jax", "float64"], default="jax",
        help="float64: also report each backend's error against the function run in float64 (the true value)",
    )
    p.add_argument("--keep-unused", action="store_true", help="make every leaf a parameter in every format")
    p.add_argument("--external-weights", choices=["auto", "always", "never"], default="auto", help=EXTERNAL_WEIGHTS_HELP)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before a backend's worker is stopped")
    p.add_argument(
        "--allow-fail", default="", metavar="NAME,NAME",
        help="backends whose export or run failures do not make the exit code 3 (they still show as rows)",
    )
    _regression_options(p)
    p.add_argument("--baseline", type=Path, metavar="RESULTS_JSON",
                   help="compare to a previous results.json; exit 1 on a regression (Markdown diff printed)")
    p.add_argument(
        "--device", choices=["cpu", "gpu", "auto"], default="cpu",
        help="cpu (default); gpu: every backend on the GPU, those that cannot use it are reported as 'no-gpu' rows; "
             "auto: the GPU when every selected backend sees one, else the CPU (the report says what each found)",
    )
    p.add_argument("--include-transfers", action="store_true",
                   help="time host-to-host calls (input copies to the device and outputs back) instead of device-resident ones")
    p.add_argument("--no-bench", action="store_true", help="check parity only, measure no latency")
    p.add_argument("--bench-time", type=float, default=1.0, help="seconds of timed calls per batch size (default: 1)")
    p.add_argument("--min-iters", type=int, default=20, help="at least this many timed calls per batch size (default: 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing (default: 5)")
    p.add_argument(
        "--batch-sizes", metavar="N,N",
        help="benchmark these sizes of the symbolic batch dimension from the same artifact, e.g. 1,8,64",
    )
    p.set_defaults(handler=cmd_compare)

    p = sub.add_parser(
        "report",
        help="re-render report.md and report.html from a results.json (no backend needed)",
        description="Render report.md and report.html from a results.json written by 'multiexport compare'.",
    )
    p.add_argument("results", type=Path, help="results.json")
    p.add_argument("--out", type=Path, help="directory for the reports (default: beside results.json)")
    p.add_argument("--screenshot", type=Path, metavar="PNG", help="also render report.html to this PNG with headless Chromium")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser(
        "diff",
        help="compare two results.json files without running anything; exit 1 on a regression",
        description=(
            "Per backend and batch size: a slowdown is flagged when the p50 ratio exceeds --max-slowdown and the 95% "
            "intervals of the two medians do not overlap; a backend that passed and now fails, or a leaf whose "
            "worst relative error grew more than --max-parity-drift times, is flagged too."
        ),
    )
    p.add_argument("baseline", type=Path, help="the earlier results.json")
    p.add_argument("current", type=Path, help="the new results.json")
    _regression_options(p)
    p.set_defaults(handler=cmd_diff)

    p = sub.add_parser("backends", help="list backends and whether each is installed")
    p.set_defaults(handler=cmd_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from . import __version__

        print(f"multiexport {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.handler(args) or 0
    except MultiexportError as exc:
        if args.debug:
            raise
        print(f"multiexport: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("multiexport: interrupted; finished results (if any) were written before stopping", file=sys.stderr)
        return 130


def _console():
    from rich.console import Console

    # Off a terminal rich assumes 80 columns and would wrap leaf names; logs and pipes get room.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def cmd_signature(args) -> int:
    from .api import describe
    from .signature import shape_text
    from .summary import human_bytes
    from .target import load_target

    data = describe(load_target(args.target), keep_unused=args.keep_unused)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    from rich.table import Table

    console = _console()
    table = Table(title=f"inputs of '{data['name']}'" + (" (--keep-unused)" if args.keep_unused else ""))
    for col in ("leaf", "shape", "dtype", "used", "xla param", "alias"):
        table.add_column(col, no_wrap=True)
    for row in data["inputs"]:
        used = "[green]yes[/]" if row["used"] else "[red]no[/]"
        param = "-" if row["xla_param"] is None else str(row["xla_param"])
        table.add_row(row["name"], shape_text(row["shape"]), row["dtype"], used, param, row["alias"])
    console.print(table)
    table = Table(title="outputs")
    for col in ("leaf", "shape", "dtype", "xla result", "alias"):
        table.add_column(col, no_wrap=True)
    for row in data["outputs"]:
        table.add_row(row["name"], shape_text(row["shape"]), row["dtype"], str(row["xla_result"]), row["alias"])
    console.print(table)
    dropped = [row["name"] for row in data["inputs"] if not row["used"]]
    n_used = len(data["inputs"]) - len(dropped)
    console.print(f"XLA module parameters: {n_used} of {len(data['inputs'])} input leaves, in the order above.")
    if dropped:
        console.print(
            f"Pruned (the function never reads them): {', '.join(dropped)}. "
            "Pass --keep-unused to make every leaf a parameter."
        )
    if data["symbolic_dims"]:
        console.print(f"Symbolic dimensions: {', '.join(data['symbolic_dims'])}")
    w = data["weights"]
    console.print(f"Weights: {'baked in (closed over)' if w['mode'] == 'baked' else 'input leaves'} "
                  f"(constants {human_bytes(w['baked_bytes'])} in {w['baked_arrays']} arrays; inputs {human_bytes(w['input_bytes'])})")
    if w["mode"] == "baked":
        from .weights import AUTO_MIN_BYTES

        where = ("out of the module (XLA/IREE: weights.safetensors, SavedModel: variables/, ONNX: model.onnx.data)"
                 if w["baked_bytes"] >= AUTO_MIN_BYTES else "as constants in the module")
        console.print(f"Export stores them {where} by default; --external-weights always|never chooses.")
    for warning in data["warnings"]:
        console.print(f"[yellow]note:[/] {_esc(warning)}")
    return 0


def cmd_export(args) -> int:
    from .api import export
    from .summary import human_bytes
    from .target import load_target

    platforms = _split(args.platforms) if args.platforms else None
    if args.device == "gpu":
        platforms = sorted(set(platforms or ["cpu"]) | {"cuda"})
    artifact = export(load_target(args.target), args.out, args.backend, keep_unused=args.keep_unused, platforms=platforms,
                      external_weights=args.external_weights)
    m = artifact.manifest
    console = _console()
    console.print(f"[bold]{m.backend}[/] artifact for '{m.target}' written to {artifact.directory}")
    for role, name in m.files.items():
        size = (artifact.directory / name).stat().st_size
        console.print(f"  {name:<24} {human_bytes(size):>10}  {role}")
    dropped = [leaf.name for leaf in m.unused_inputs]
    console.print(
        f"  parameters: {len(m.used_inputs)} of {len(m.inputs)} input leaves"
        + (f"; dropped (not read): {', '.join(dropped)}" if dropped else "")
    )
    for warning in m.warnings:
        console.print(f"  [yellow]note:[/] {_esc(warning)}")
    return 0


def cmd_run(args) -> int:
    from .api import load
    from .arrays_io import load_npz, save_npz
    from .manifest import Manifest

    manifest = Manifest.read(args.artifact)
    inputs_path = args.inputs
    if inputs_path is None:
        if "example_inputs" not in manifest.files:
            raise UsageError(f"Artifact '{args.artifact}' | has no example_inputs.npz, expected --inputs FILE.npz")
        inputs_path = args.artifact / manifest.files["example_inputs"]
    feed = load_npz(inputs_path)
    runner = load(args.artifact, device=args.device)
    outputs = runner(feed)
    if args.out:
        save_npz(args.out, outputs)
        print(f"wrote {len(outputs)} outputs to {args.out}: {', '.join(outputs)}")
        return 0
    from rich.table import Table

    table = Table(title=f"{manifest.backend} outputs of '{manifest.target}'")
    for col in ("output", "shape", "dtype", "values"):
        table.add_column(col, no_wrap=col != "values")
    for name, value in outputs.items():
        table.add_row(name, str(tuple(value.shape)), value.dtype.name, _preview(value))
    _console().print(table)
    return 0


def cmd_compare(args) -> int:
    import time

    from .arrays_io import load_npz
    from .bench import BenchConfig
    from .comparison import compare
    from .inputs import parse_dim_sizes, parse_val_ranges
    from .registry import names as backend_names
    from .target import load_target
    from .tolerance import parse_tolerances

    if args.trials < 1:
        raise UsageError(f"Option '--trials' | got {args.trials}, expected >= 1")
    if args.bench_time < 0 or args.min_iters < 1 or args.warmup < 0:
        raise UsageError("Options '--bench-time/--min-iters/--warmup' | expected bench-time >= 0, min-iters >= 1, warmup >= 0")
    batch_sizes = None
    if args.batch_sizes:
        try:
            batch_sizes = [int(x) for x in _split(args.batch_sizes)]
        except ValueError:
            batch_sizes = []
        if not batch_sizes or min(batch_sizes) < 1:
            raise UsageError(f"Option '--batch-sizes' | got '{args.batch_sizes}', expected sizes >= 1 such as 1,8,64")
    bench = None if args.no_bench else BenchConfig(warmup_iters=args.warmup, min_iters=args.min_iters,
                                                    bench_time=args.bench_time, include_transfers=args.include_transfers)
    val_ranges, dim_sizes = parse_val_ranges(args.val_range), parse_dim_sizes(args.dim_sizes)
    tolerances = parse_tolerances(args.tol)
    inputs = load_npz(args.inputs) if args.inputs else None
    target = load_target(args.target)
    backends = backend_names() if args.backends == "all" else _split(args.backends)

    err = _console_err()
    start = time.perf_counter()
    status = err.status("starting") if err.is_terminal else None  # a live line on terminals, plain lines in logs

    def progress(message: str) -> None:
        err.print(f"[dim]{time.perf_counter() - start:6.1f}s[/] {_esc(message)}")
        if status is not None:
            status.update(message)

    if status is not None:
        status.start()
    try:
        results = compare(
            target, backends=backends, out_dir=args.out, trials=args.trials, seed=args.seed,
            val_ranges=val_ranges, dim_sizes=dim_sizes, tolerances=tolerances, inputs=inputs,
            reference=args.reference, keep_unused=args.keep_unused, external_weights=args.external_weights,
            timeout=args.timeout, device=args.device,
            bench=bench, batch_sizes=batch_sizes, target_spec=args.target or "multiexport.examples:seed",
            progress=progress,
        )
    finally:
        if status is not None:
            status.stop()
    _print_results(results)
    code = results.exit_code_allowing(_split(args.allow_fail))
    if args.baseline:
        code = max(code, _gate(args.baseline, results.to_json(), args))
    return code


def _regression_options(p) -> None:
    p.add_argument("--max-slowdown", type=float, default=1.10, help="p50 ratio that counts as a slowdown (default: 1.10)")
    p.add_argument("--max-parity-drift", type=float, default=10.0,
                   help="growth factor of a leaf's worst relative error that counts as drift (default: 10)")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML, one test case per backend x check")


def _gate(baseline: Path, current: dict, args) -> int:
    """Diff against a baseline, print and publish it; returns 1 on a regression."""
    from .regression import diff_results, publish
    from .report import load_results

    if args.max_slowdown < 1 or args.max_parity_drift < 1:
        raise UsageError("Options '--max-slowdown/--max-parity-drift' | expected values >= 1")
    d = diff_results(load_results(baseline), current, max_slowdown=args.max_slowdown,
                     max_parity_drift=args.max_parity_drift)
    print(publish(d, args.junit))
    return d.exit_code


def cmd_diff(args) -> int:
    from .report import load_results

    return _gate(args.baseline, load_results(args.current), args)


def cmd_report(args) -> int:
    from .report import load_results, write_reports

    md, page = write_reports(load_results(args.results), args.out or args.results.parent)
    print(f"wrote {md} and {page}")
    if args.screenshot:
        from .screenshot import screenshot

        requests = screenshot(page, args.screenshot)
        print(f"wrote {args.screenshot}" + (f"; the page requested {requests}" if requests else "; no network requests"))
    return 0


def _print_results(results) -> None:
    from rich.table import Table

    from .summary import summary_rows

    console = _console()
    rows = summary_rows(results.to_json())
    table = Table(title=f"'{results.target}': parity against jax.jit over {len(results.trials)} trials, latency per call")
    columns = ("backend", "status", "batch", "max rel err", "p50 ms", "p99 ms", "vs jax", "throughput",
               "cold start s", "size", "native ms")
    for col in columns:
        table.add_column(col, no_wrap=col not in ("status",), justify="right" if col in ("p50 ms", "p99 ms", "vs jax") else "left")
    for row in rows:
        style = "green" if row["status"] == "ok" else ("dim" if row["backend"] == "jax" else "red")
        name = f"[bold]{row['backend']}[/]" if row.get("fastest") else row["backend"]
        table.add_row(name, f"[{style}]{row['status']}[/]", *[row[c] for c in columns[2:]])
    console.print(table)
    from .report import binding_table

    header, brows = binding_table(results.to_json())
    if len(header) > 3:
        btable = Table(title="which input leaves each format takes (parameter, or dropped)")
        for col in header:
            btable.add_column(col, no_wrap=True)
        for brow in brows:
            btable.add_row(*[f"[dim]{c}[/]" if c == "dropped" else c for c in brow])
        console.print(btable)
    for name, r in results.backends.items():
        if r.status != "ok":
            console.print(f"[red]{name}[/]: {r.status}: {_esc(r.reason)}")
        if r.error_vs_float64:
            errs = ", ".join(f"{k} {v:.2e}" for k, v in r.error_vs_float64.items())
            console.print(f"{name} error vs float64 truth (max abs / max |truth|): {errs}")
    if "jax_error_vs_float64" in results.reference:
        errs = ", ".join(f"{k} {v:.2e}" for k, v in results.reference["jax_error_vs_float64"].items())
        console.print(f"jax.jit error vs float64 truth: {errs}")
    fastest = [row for row in rows if row.get("fastest")]
    for row in fastest:
        at = "the exported shapes" if row["batch"] == "-" else f"batch {row['batch']}"
        console.print(f"fastest faithful backend at {at}: [bold]{row['backend']}[/] ({row['p50 ms']} ms p50)")
    out = Path(results.out_dir)
    plan = results.device or {}
    if plan.get("requested", "cpu") != "cpu":
        console.print(f"device: requested {plan['requested']}, ran on {plan['chosen']}"
                      + (f" ({_esc(plan['note'])})" if plan.get("note") else ""))
        for name, found in plan.get("found", {}).items():
            console.print(f"  {name}: {'GPU' if found['gpu'] else 'no GPU'}: {_esc(found['reason'])}")
    console.print(f"results: {out / 'results.json'}; reports: {out / 'report.md'}, {out / 'report.html'}")


def _console_err():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def cmd_backends(args) -> int:
    from .registry import get_backend, registered

    for name, where in registered().items():
        try:
            status = get_backend(name).available()
            state = "available" if status.ok else f"unavailable: {status.reason}"
        except MultiexportError as exc:
            state = f"broken: {exc}"
        print(f"{name:<12} {state}  ({where})")
    return 0


def _esc(text: str) -> str:
    """Text from runtimes and users printed through rich: `[gpu]` is a pip extra, not a style tag."""
    from rich.markup import escape

    return escape(str(text))


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _preview(value) -> str:
    import numpy as np

    flat = np.asarray(value).reshape(-1)
    head = ", ".join(f"{v:.6g}" if np.issubdtype(flat.dtype, np.floating) else str(v) for v in flat[:6].tolist())
    return f"[{head}{', ...' if flat.size > 6 else ''}]"
