"""The command line's arguments. Defaults come from the Python API's dataclasses (CompareConfig,
BenchConfig, ExportOptions), and the format lists in help texts from the backend registry, so the CLI
and the API cannot drift apart and a new backend needs no edit here."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..comparison import CompareConfig
from ..exporting.precision import PRECISIONS
from ..measure.bench import BenchConfig

TARGET_HELP = (
    "what to export: path/to/file.py:attr or package.module:attr, where attr is a multiexport.Target "
    "or a zero-argument function returning one (attr defaults to 'target'); omitted: the built-in "
    "seed example, fn(foo) = sum(foo.baz) on a dataclass Foo(bar, baz)"
)
EXTERNAL_WEIGHTS_HELP = (
    "where weights the target closes over go: auto (default: out of the module once they reach 16 MiB), "
    "always (the same at any size), never (embedded as constants; ONNX refuses past its 2 GB protobuf limit)")
PRECISION_HELP = ("fp16: float16 weights (and math where the runtime does it); int8-dynamic: int8 weights, "
                  "activations quantized per call; int8: static int8 calibrated from sample inputs. Each format uses "
                  "its own toolchain (ONNX Runtime's quantizer, the TFLite converter, OpenVINO, iree-compile)")
CALIBRATION_HELP = (".npz of sample inputs for int8: one array per input leaf, keyed by leaf name, with a leading "
                    "sample axis of at most 1024 samples, finite values (default: 16 synthetic samples in the "
                    "example's domain)")
OPTION_HELP = ("a backend's own option, BACKEND.NAME=VALUE, e.g. onnx.opset=21 (repeatable; `multiexport backends` "
               "lists each backend's options)")


def _formats() -> str:
    from ..exporting.registry import describe_all

    try:
        return describe_all()
    except Exception:  # help must work even when a third-party backend is broken
        return "see 'multiexport backends'"


def build_parser() -> argparse.ArgumentParser:
    from . import commands

    parser = argparse.ArgumentParser(
        prog="multiexport",
        description=("Export one JAX function to several deployment formats with every input and output leaf named "
                     f"(foo.bar, params.Dense_0.kernel), and see which leaves each format keeps. Formats: {_formats()}."),
        epilog=("Exit codes: 0 every backend faithful, 1 a parity failure or regression, 2 a user mistake (one line), "
                "3 a backend failed, 70 a bug in multiexport (traceback saved to a file the message names), "
                "128+N stopped by signal N. Run 'multiexport COMMAND --help' for a command's options."),
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("signature", help="show the named input/output leaves and which become XLA parameters",
                       description=("Flatten TARGET's inputs and outputs into named leaves and show, for the XLA "
                                    "export, which leaves the module reads (used) and their argument position; unused "
                                    "leaves are pruned by XLA unless --keep-unused. Prints the producer versions."))
    p.add_argument("target", nargs="?", help=TARGET_HELP)
    p.add_argument("--keep-unused", action="store_true", help="make every leaf a module parameter, even unread ones")
    p.add_argument("--json", action="store_true", help="print the table as JSON (stdout holds only the JSON)")
    p.set_defaults(handler=commands.cmd_signature)

    p = sub.add_parser("export", help="export TARGET with one backend into an artifact directory",
                       description=("Write an artifact directory: the model files and a manifest.json mapping every "
                                    "leaf to its parameter. An existing directory is replaced only when it is an "
                                    "artifact whose every file its export wrote. The installed runtime of the format "
                                    f"loads and runs the result before it is kept. Formats: {_formats()}."))
    p.add_argument("target", nargs="?", help=TARGET_HELP)
    p.add_argument("--backend", default="xla", help="backend name (default: xla); see 'multiexport backends'")
    p.add_argument("--out", required=True, type=Path, help="artifact directory to write")
    p.add_argument("--keep-unused", action="store_true", help="make every leaf a parameter, even unread ones")
    p.add_argument("--external-weights", choices=["auto", "always", "never"], default="auto", help=EXTERNAL_WEIGHTS_HELP)
    p.add_argument("--platforms", help="comma-separated platforms to lower for, e.g. cpu,cuda (default: cpu)")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="gpu: build the artifact for the GPU too (XLA/SavedModel lower for cpu,cuda; IREE compiles for cuda)")
    p.add_argument("--static-sizes", action="append", default=[], metavar="DIM=N,N",
                   help="also write modules refined to static shapes for these sizes (what PJRT needs), e.g. b=1,8,64")
    p.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.NAME=VALUE", help=OPTION_HELP)
    p.add_argument("--precision", default="fp32", choices=list(PRECISIONS), help=PRECISION_HELP)
    p.add_argument("--calibration", type=Path, metavar="FILE.npz", help=CALIBRATION_HELP)
    p.set_defaults(handler=commands.cmd_export)

    p = sub.add_parser("run", help="run an artifact directory on named inputs",
                       description=("Load DIR from disk alone (no original function needed), check the inputs against "
                                    "its manifest and run it. Inputs and outputs are .npz files keyed by leaf name."))
    p.add_argument("artifact", type=Path, metavar="DIR", help="artifact directory written by 'multiexport export'")
    p.add_argument("--inputs", type=Path,
                   help=".npz of named input arrays (default: the artifact's example_inputs.npz); unused leaves may be omitted")
    p.add_argument("--out", type=Path, help="write outputs to this .npz file (default: print a table)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu", "tpu"],
                   help="device to run on (default: cpu); tpu: an XLA artifact exported with --platforms cpu,tpu")
    p.add_argument("--threads", type=int, help="intra-op threads for the runtime (default: the usable cores)")
    p.add_argument("--trust-artifact", action="store_true",
                   help="load a format that carries code (a SavedModel) without checking its graph first; only for "
                        "artifacts you trust like your own code")
    p.set_defaults(handler=commands.cmd_run)

    p = sub.add_parser(
        "native", help="run an artifact in its native, Python-free consumer (PJRT C API, TF C API, ONNX Runtime C API, "
             "OpenVINO C API, LiteRT C API, IREE's tools)",
        description=("Run DIR with a compiled program that reads only the artifact and its manifest: XLA through the "
                     "PJRT C API (a PJRT CPU plugin: pip install 'multiexport[native]'), a SavedModel through the TF "
                     "C API, ONNX through ONNX Runtime's C API (the onnxruntime wheel's libonnxruntime), OpenVINO "
                     "through its C API (the openvino wheel's headers and libopenvino_c), LiteRT through its C API "
                     "(the ai-edge-litert wheel's libLiteRt.so), IREE through its own iree-run-module. The C/C++ "
                     "programs are compiled on first use with the system compiler and cached per machine. Inputs and "
                     "outputs are .npz files keyed by leaf name. A symbolic XLA artifact runs at the sizes it has "
                     "refined static modules for ('multiexport export --static-sizes')."))
    p.add_argument("artifact", type=Path, metavar="DIR", help="artifact directory written by 'multiexport export'")
    p.add_argument("--inputs", type=Path, help=".npz of named inputs (default: the artifact's example inputs)")
    p.add_argument("--out", type=Path, help="write outputs to this .npz file (default: print a table)")
    p.add_argument("--print-command", action="store_true",
                   help="print the shell line that does the same run with no Python (under env -i, from the artifact "
                        "directory, on its example inputs in inputs/) and exit")
    p.add_argument("--iters", type=int, default=0, help="also time this many calls inside the program and print them")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before --iters (default: 5)")
    p.add_argument("--threads", type=int, help="intra-op threads for the runtime (default: its own choice)")
    p.add_argument("--plugin", type=Path, help="the PJRT plugin .so for XLA (default: $MULTIEXPORT_PJRT_PLUGIN, else "
                                                "the installed one)")
    p.add_argument("--device", choices=["auto", "cpu", "gpu", "tpu"], default="auto",
                   help="the device the consumer runs on (XLA: which installed PJRT plugin; default auto: the TPU when "
                        "this machine has one and libtpu is installed, else the CPU)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds before the program (or the bundle's proving run) is stopped with everything it "
                        "started (default: 300)")
    p.add_argument("--trust-artifact", action="store_true",
                   help="run a format that carries code (a SavedModel) without checking its graph first; only for "
                        "artifacts you trust like your own code (the program that runs it is always multiexport's)")
    p.add_argument("--bundle", type=Path, metavar="OUT",
                   help="instead of running, write a relocatable folder to copy to a server: the program, every "
                        "library it loads from outside the system's directories, the runtime's plugins, the artifact "
                        "and OUT/run.sh (OUT: a new or empty directory; proven by one run under env -i here)")
    p.set_defaults(handler=commands.cmd_native)

    _compare_parser(sub)

    p = sub.add_parser("report", help="re-render report.md and report.html from a results.json (no backend needed)",
                       description="Render report.md and report.html from a results.json written by 'multiexport compare'.")
    p.add_argument("results", type=Path, help="results.json")
    p.add_argument("--out", type=Path, help="directory for the reports (default: beside results.json)")
    p.add_argument("--screenshot", type=Path, metavar="PNG", help="also render report.html to this PNG with headless Chromium")
    p.set_defaults(handler=commands.cmd_report)

    p = sub.add_parser("diff", help="compare two results.json files without running anything; exit 1 on a regression",
                       description=("Per backend and batch size: a slowdown is flagged when the p50 ratio exceeds "
                                    "--max-slowdown and the 95% intervals of the two medians do not overlap; a backend "
                                    "that passed and now fails, or a leaf whose worst error grew more than "
                                    "--max-parity-drift times, is flagged too; a changed producer or consumer version "
                                    "is listed as 'changed'. A baseline written by multiexport 0.1 (schema 1) is read "
                                    "too; its parity is then compared element-wise (0.1 recorded no error relative to "
                                    "the leaf's scale)."))
    p.add_argument("baseline", type=Path, help="the earlier results.json (this version's, or 0.1's)")
    p.add_argument("current", type=Path, help="the new results.json")
    p.add_argument("--sweep", action="store_true",
                   help="BASELINE and CURRENT are sweep directories: every model gated, latency per backend over the "
                        "sweep (geometric mean of its p50 ratios); a model missing from CURRENT is a regression")
    regression_options(p)
    p.set_defaults(handler=commands.cmd_diff)

    _sweep_parsers(sub)

    p = sub.add_parser("backends", help="list backends, whether each is installed, and their options")
    p.set_defaults(handler=commands.cmd_backends)
    return parser


def _compare_parser(sub) -> None:
    from . import commands

    d, b = CompareConfig.__dataclass_fields__, BenchConfig()
    p = sub.add_parser(
        "compare", help="export TARGET with every backend and check each one's numbers against JAX",
        description=("Export TARGET with each backend, run every artifact from disk in its own worker process, and "
                     "compare each named output leaf against jax.jit(fn) with dtype-aware tolerances; time every "
                     "backend the same way, with the same threads, all loaded at once and timed in interleaved rounds "
                     "(ratios with 95% intervals; --sequential when they do not fit in memory). Writes OUT/results.json, report.md, report.html. "
                     f"Formats: {_formats()}."))
    p.add_argument("target", nargs="?", help=TARGET_HELP)
    p.add_argument("--backends", default="all", help="comma-separated backends, or 'all' for every registered one (default)")
    p.add_argument("--out", type=Path, help="output directory (default: multiexport-out/<target name>)")
    p.add_argument("--trials", type=int, default=d["trials"].default,
                   help=f"seeded trials per size setting, besides the example (default: {d['trials'].default})")
    p.add_argument("--seed", type=int, default=d["seed"].default, help="seed of the trials (default: 0)")
    p.add_argument("--val-range", action="append", default=[], metavar="LEAF=LOW:HIGH",
                   help="value range for matching input leaves (glob patterns allowed), e.g. 'batch.tokens=0:1000'")
    p.add_argument("--dim-sizes", action="append", default=[], metavar="DIM=N,N",
                   help="concrete sizes for a symbolic dimension, e.g. b=1,8,64 (default: 1,5)")
    p.add_argument("--tol", action="append", default=[], metavar="LEAF=rtol:R,atol:A[,scale:S]",
                   help="tolerance override for matching output leaves: pass when |got-ref| <= atol + scale*max|ref| + "
                        "rtol*|ref|, e.g. 'out.logits=rtol:1e-3,atol:1e-4' (unset keys are 0)")
    p.add_argument("--inputs", type=Path, help=".npz of named inputs to use instead of generated trials")
    p.add_argument("--reference", choices=["jax", "float64"], default=d["reference"].default,
                   help="float64: also report each backend's error against the function run in float64 (the true value)")
    p.add_argument("--matmul-precision", choices=["default", "high", "highest"], default="default",
                   help="jax.jit's matmul precision for the parity reference (and the TPU rows' reference): a TPU's "
                        "default runs float32 matmuls in bf16 passes (default: default)")
    p.add_argument("--platforms", help="comma-separated platforms the XLA artifact is lowered for, as export's, e.g. "
                                       "cpu,tpu (default: the device's; with TPU rows cpu,tpu)")
    p.add_argument("--keep-unused", action="store_true", help="make every leaf a parameter in every format")
    p.add_argument("--external-weights", choices=["auto", "always", "never"], default="auto", help=EXTERNAL_WEIGHTS_HELP)
    p.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.NAME=VALUE", help=OPTION_HELP)
    p.add_argument("--timeout", type=float, default=d["timeout"].default,
                   help=f"seconds before a backend's worker is stopped (default: {d['timeout'].default:g})")
    p.add_argument("--threads", type=int, help="intra-op threads for every runtime (default: the cores this process may use)")
    p.add_argument("--export-jobs", type=int, help="exports to run at once (default: as many as cores and memory allow)")
    p.add_argument("--precision", default="fp32", metavar="P,P",
                   help="precisions to make of every backend, e.g. fp32,fp16,int8-dynamic,int8 (default: fp32). Each "
                        "reduced one adds a row BACKEND@P judged by its accuracy budget (cosine, SQNR, top-k vs "
                        "jax.jit), 'unsupported-precision' where the format has no such variant. " + PRECISION_HELP)
    p.add_argument("--calibration", type=Path, metavar="FILE.npz", help=CALIBRATION_HELP)
    p.add_argument("--accuracy", action="append", default=[], metavar="LEAF=METRIC:V,...",
                   help="accuracy budget override for matching output leaves of reduced-precision rows, e.g. "
                        "'out.logits=top1:0.99,cos:0.999' (metrics: cos, err, sqnr, top1, top5; defaults per precision "
                        "in the README)")
    p.add_argument("--allow-fail", default="", metavar="NAME,NAME",
                   help="backends whose export or run failures do not make the exit code 3 (they still show as rows)")
    regression_options(p)
    p.add_argument("--baseline", type=Path, metavar="RESULTS_JSON",
                   help="compare to a previous results.json; exit 1 on a regression. Its artifacts, when still beside "
                        "it, are timed in the same rounds as the new ones (paired A/B); else latency is judged "
                        "cross-run, with a wider threshold")
    p.add_argument("--baseline-artifacts", type=Path, metavar="DIR",
                   help="a previous compare's output directory: its artifacts (DIR/BACKEND, read-only) are timed in "
                        "the same interleaved rounds as the new ones, and each latency verdict rests on that paired "
                        "ratio; exit 1 on a regression")
    p.add_argument("--device", choices=["cpu", "gpu", "tpu", "auto"], default=d["device"].default,
                   help="cpu (default); gpu: every backend on the GPU, those that cannot use it are reported as 'no-gpu' "
                        "rows; tpu: every row on the CPU plus TPU rows (jax.jit, xla, with --native its PJRT consumer) "
                        "in one TPU worker; auto: the TPU rows when a TPU is there, else the GPU when every selected "
                        "backend sees one, else the CPU")
    p.add_argument("--include-transfers", action="store_true",
                   help="time host-to-host calls (input copies to the device and outputs back) instead of device-resident ones")
    p.add_argument("--no-bench", action="store_true", help="check parity only, measure no latency")
    p.add_argument("--bench-time", type=float, default=b.bench_time,
                   help=f"seconds of timed calls per batch size (default: {b.bench_time:g})")
    p.add_argument("--min-iters", type=int, default=b.min_iters, help=f"at least this many timed calls (default: {b.min_iters})")
    p.add_argument("--max-iters", type=int, default=b.max_iters,
                   help=f"at most this many timed calls per size, even before --bench-time (default: {b.max_iters})")
    p.add_argument("--warmup", type=int, default=b.warmup_iters, help=f"untimed calls before timing (default: {b.warmup_iters})")
    p.add_argument("--batch-sizes", metavar="N,N",
                   help="benchmark these sizes of the symbolic batch dimension from the same artifact, e.g. 1,8,64")
    p.add_argument("--rounds", type=int, default=d["rounds"].default,
                   help=f"interleaved rounds per batch size when every runner is loaded at once (default: "
                        f"{d['rounds'].default}); each runner gets --bench-time / rounds per round")
    p.add_argument("--sequential", action="store_true",
                   help="time one runner after another instead of all loaded at once in interleaved rounds (the "
                        "default when they fit in memory together: ratios are then measured over the same seconds)")
    p.add_argument("--floor", action="store_true",
                   help="also time each runtime's per-call floor (one add on 8 floats through the same calling path), "
                        "so a small model's latency reads as overhead vs compute")
    p.add_argument("--native", action="store_true",
                   help="also run each artifact in its native, Python-free consumer (XLA: PJRT C API, SavedModel: TF C "
                        "API, ONNX: ONNX Runtime C API, OpenVINO and LiteRT: their C APIs, IREE: iree-run-module): "
                        "parity against jax.jit and the latency measured inside the program")
    p.add_argument("--native-plugin", type=Path, help="the PJRT plugin .so for --native (default: the installed one)")
    p.set_defaults(handler=commands.cmd_compare)


def _sweep_parsers(sub) -> None:
    from . import sweep_commands

    p = sub.add_parser(
        "sweep", help="compare every target of a TOML spec, locally or on a Ray cluster, into one sweep directory",
        description=("Run `multiexport compare` on every target of SPEC, each in a process of its own (one failing "
                     "model never stops the sweep), and write OUT/matrix.md, matrix.html and summary.json (model x "
                     "backend) as rows finish. local: a pool sized to the cores and memory, timing phases one at a "
                     "time per machine; ray: each compare a Ray task with its resources (pip install "
                     "'multiexport[sweep]'). A killed sweep continues with --resume: finished rows are kept, the "
                     "rest re-run. Every row goes into an SQLite history (`multiexport history`). The spec's "
                     "format: python -c 'import multiexport.sweeps.spec as s; print(s.__doc__)'."))
    p.add_argument("spec", type=Path, nargs="?", help="the sweep's TOML spec")
    p.add_argument("--out", type=Path, help="the sweep's directory (default: multiexport-out/sweep-<name>)")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local (default): a pool on this machine; ray: tasks on the cluster at --ray-address")
    p.add_argument("--ray-address", help="the Ray cluster to join (default: $RAY_ADDRESS, else a local one started)")
    p.add_argument("--jobs", type=int, help="local: compares at once (default: one per 2 cores and 4 GiB available)")
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out: keep its finished rows")
    p.add_argument("--only", metavar="NAME,TAG", help="only the targets with these names or tags")
    p.add_argument("--shard", metavar="I/N", help="this run's share: every N-th target from the I-th (CI matrices)")
    p.add_argument("--history", type=Path, metavar="SQLITE",
                   help="record every row here (default: OUT/history.sqlite); one file across sweeps keeps a history")
    p.add_argument("--baseline-sweep", type=Path, metavar="DIR",
                   help="gate the sweep against an earlier sweep directory; exit 1 on a regression")
    p.add_argument("--list", action="store_true", help="print each selected target's compare command and exit")
    p.add_argument("--merge", nargs="+", type=Path, metavar="DIR",
                   help="instead of running a SPEC: merge these sweep directories (the shards of one sweep) into --out, "
                        "a sweep directory like any other (results and reports copied, not artifacts)")
    regression_options(p)
    p.set_defaults(handler=sweep_commands.cmd_sweep)

    p = sub.add_parser("history", help="query the result history of sweeps (SQLite): a model's rows over time, "
                                       "when a row changed status",
                       description=("Read the history a sweep records (OUT/history.sqlite, or its --history): every "
                                    "model x backend of every sweep with status, error, p50 with its interval, versions, "
                                    "machine, commit and time."))
    p.add_argument("db", type=Path, help="the history file")
    p.add_argument("--add", nargs="+", type=Path, metavar="SWEEP_DIR", help="record these sweep directories first")
    p.add_argument("--model", help="only this model (a task name)")
    p.add_argument("--backend", help="only this backend")
    p.add_argument("--changes", action="store_true",
                   help="only the changes of status from one sweep to the next, with the versions that changed, "
                        "and the sweeps where latency or parity moved (change points over each model x backend)")
    p.add_argument("--gate", action="store_true",
                   help="exit 1 when the last change point of a model x backend made it slower (1.1x) or its parity "
                        "worse (2x): a gate against the history rather than one baseline")
    p.add_argument("--junit", type=Path, metavar="FILE", help="with --gate: JUnit XML, one test case per change")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=sweep_commands.cmd_history)


def regression_options(p) -> None:
    p.add_argument("--max-slowdown", type=float, default=None,
                   help="p50 ratio that counts as a slowdown, for every kind of comparison (default: the calibrated "
                        "thresholds: paired A/B 1.05, cross-run 1.5; wider under 30 us per call)")
    p.add_argument("--max-parity-drift", type=float, default=10.0,
                   help="growth factor of a leaf's worst error that counts as drift (default: 10)")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML, one test case per backend x check")
