"""The command line's arguments, built by one function (`build_parser`; the docs' CLI reference is made
from it). Defaults come from the Python API's dataclasses (CompareConfig, BenchConfig, ExportOptions), and
the format lists in help texts from the backend registry, so the CLI and the API cannot drift apart and a
new backend needs no edit here. Options are grouped per concern in `--help` (flags.py names the groups and
the one meaning of each flag name)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..exporting.precision import PRECISIONS
from ..exporting.registry import describe_all
from .compare_parser import compare_parser
from .flags import (
    DEVICES,
    FORMATS,
    GATE,
    OUTPUT,
    SECURITY,
    TARGET,
    TIMING,
    WRITE,
    deprecated,
    groups,
    regression_options,
)
from .help_texts import CALIBRATION_HELP, EXTERNAL_WEIGHTS_HELP, OPTION_HELP, PRECISION_HELP, TARGET_HELP
from .load_parser import load_parser
from .locate_parser import locate_parser
from .sweep_parser import sweep_parsers

__all__ = ["CALIBRATION_HELP", "build_parser", "formats"]


def formats() -> str:
    try:
        return describe_all()
    except Exception:  # help must work even when a third-party backend is broken
        return "see 'multiexport backends'"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multiexport",
        description=("Export one JAX function to several deployment formats with every input and output leaf named "
                     f"(foo.bar, params.Dense_0.kernel), and see which leaves each format keeps. Formats: {formats()}."),
        epilog=("Exit codes: 0 every backend faithful, 1 a parity failure or regression, 2 a user mistake (one line), "
                "3 a backend failed, 70 a bug in multiexport (traceback saved to a file the message names), "
                "128+N stopped by signal N. Run 'multiexport COMMAND --help' for a command's options."),
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _signature_parser(sub)
    _export_parser(sub)
    _run_parser(sub)
    _native_parser(sub)
    compare_parser(sub, formats())
    _report_parser(sub)
    _diff_parser(sub)
    sweep_parsers(sub)
    load_parser(sub)
    locate_parser(sub)
    p = sub.add_parser("backends", help="list backends, whether each is installed, and their options")
    p.set_defaults(handler="cmd_backends")
    return parser


def _signature_parser(sub) -> None:
    p = sub.add_parser("signature", help="show the named input/output leaves and which become XLA parameters",
                       description=("Flatten TARGET's inputs and outputs into named leaves and show, for the XLA "
                                    "export, which leaves the module reads (used) and their argument position; unused "
                                    "leaves are pruned by XLA unless --keep-unused. Prints the producer versions."))
    g = groups(p, TARGET, OUTPUT)
    g[TARGET].add_argument("target", nargs="?", help=TARGET_HELP)
    g[TARGET].add_argument("--keep-unused", action="store_true",
                           help="make every leaf a module parameter, even unread ones")
    g[OUTPUT].add_argument("--json", action="store_true", help="print the table as JSON (stdout holds only the JSON)")
    p.set_defaults(handler="cmd_signature")


def _export_parser(sub) -> None:
    p = sub.add_parser("export", help="export TARGET with one backend into an artifact directory",
                       description=("Write an artifact directory: the model files and a manifest.json mapping every "
                                    "leaf to its parameter. An existing directory is replaced only when it is an "
                                    "artifact whose every file its export wrote. The installed runtime of the format "
                                    f"loads and runs the result before it is kept. Formats: {formats()}."))
    g = groups(p, TARGET, WRITE, FORMATS, DEVICES)
    g[TARGET].add_argument("target", nargs="?", help=TARGET_HELP)
    g[TARGET].add_argument("--keep-unused", action="store_true", help="make every leaf a parameter, even unread ones")
    g[TARGET].add_argument("--external-weights", choices=["auto", "always", "never"], default="auto",
                           help=EXTERNAL_WEIGHTS_HELP)
    g[WRITE].add_argument("--out-dir", type=Path, metavar="DIR", help="the artifact directory to write (required)")
    g[FORMATS].add_argument("--backend", default="xla", help="backend name (default: xla); see 'multiexport backends'")
    g[FORMATS].add_argument("--precision", default="fp32", choices=list(PRECISIONS),
                            help="the one precision of this artifact (default: fp32). " + PRECISION_HELP)
    g[FORMATS].add_argument("--calibration", type=Path, metavar="FILE.npz", help=CALIBRATION_HELP)
    g[FORMATS].add_argument("--backend-option", action="append", default=[], metavar="BACKEND.NAME=VALUE",
                            help=OPTION_HELP)
    g[FORMATS].add_argument("--static-sizes", action="append", default=[], metavar="DIM=N,N",
                            help="also write modules refined to static shapes for these sizes (what PJRT needs), "
                                 "e.g. b=1,8,64")
    g[DEVICES].add_argument("--platforms", help="comma-separated platforms to lower for, e.g. cpu,cuda (default: cpu)")
    g[DEVICES].add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                            help="gpu: build the artifact for the GPU too (XLA/SavedModel lower for cpu,cuda; IREE "
                                 "compiles for cuda)")
    deprecated(p, "export")
    p.set_defaults(handler="cmd_export")


def _run_options(p, what: str) -> dict:
    """The options `run` and `native` share, with the same names and meanings."""
    g = groups(p, OUTPUT, DEVICES, TIMING, SECURITY)
    p.add_argument("artifact", type=Path, metavar="DIR", help="artifact directory written by 'multiexport export'")
    g[OUTPUT].add_argument("--inputs", type=Path, metavar="FILE.npz",
                           help=".npz of named input arrays (default: the artifact's example_inputs.npz); unused "
                                "leaves may be omitted")
    g[OUTPUT].add_argument("--save-outputs", type=Path, metavar="FILE.npz",
                           help="write the outputs to this .npz file, keyed by leaf name (default: print a table)")
    g[SECURITY].add_argument("--trust-artifact", action="store_true",
                             help=f"{what} a format that carries code (a SavedModel) without checking its graph first; "
                                  "only for artifacts you trust like your own code")
    return g


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="run an artifact directory on named inputs",
                       description=("Load DIR from disk alone (no original function needed), check the inputs against "
                                    "its manifest and run it. Inputs and outputs are .npz files keyed by leaf name."))
    g = _run_options(p, "load")
    g[DEVICES].add_argument("--device", default="cpu", choices=["cpu", "gpu", "tpu"],
                            help="device to run on (default: cpu); tpu: an XLA artifact exported with --platforms "
                                 "cpu,tpu")
    g[TIMING].add_argument("--threads", type=int, help="intra-op threads for the runtime (default: the usable cores)")
    deprecated(p, "run")
    p.set_defaults(handler="cmd_run")


def _native_parser(sub) -> None:
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
    g = _run_options(p, "run")
    g[OUTPUT].add_argument("--print-command", action="store_true",
                           help="print the shell line that does the same run with no Python (under env -i, from the "
                                "artifact directory, on its example inputs in inputs/) and exit")
    g[OUTPUT].add_argument("--bundle", type=Path, metavar="DIR",
                           help="instead of running, write a relocatable folder to copy to a server: the program, every "
                                "library it loads from outside the system's directories, the runtime's plugins, the "
                                "artifact and DIR/run.sh (DIR: a new or empty directory; proven by one run under env -i "
                                "here). For an onnx-web artifact: a static folder for the browser instead (index.html, "
                                "the pinned onnxruntime-web files, the model, serve.py with the COOP/COEP headers wasm "
                                "threads need), proven by running its example inputs in headless Chromium")
    g[DEVICES].add_argument("--device", choices=["auto", "cpu", "gpu", "tpu"], default="auto",
                            help="the device the consumer runs on (XLA: which installed PJRT plugin; default auto: the "
                                 "TPU when this machine has one and libtpu is installed, else the CPU)")
    g[DEVICES].add_argument("--pjrt-plugin", type=Path, metavar="SO",
                            help="the PJRT plugin .so the XLA consumer loads (default: $MULTIEXPORT_PJRT_PLUGIN, else "
                                 "the installed one)")
    g[TIMING].add_argument("--iters", type=int, default=0,
                           help="also time this many calls inside the program and print them")
    g[TIMING].add_argument("--warmup", type=int, default=5, help="untimed calls before --iters (default: 5)")
    g[TIMING].add_argument("--threads", type=int, help="intra-op threads for the runtime (default: its own choice)")
    g[TIMING].add_argument("--timeout", type=float, default=300.0,
                           help="seconds before the program (or the bundle's proving run) is stopped with everything "
                                "it started (default: 300)")
    deprecated(p, "native")
    p.set_defaults(handler="cmd_native")


def _report_parser(sub) -> None:
    p = sub.add_parser("report", help="re-render report.md and report.html from a results.json (no backend needed)",
                       description="Render report.md and report.html from a results.json written by 'multiexport compare'.")
    g = groups(p, WRITE)
    p.add_argument("results", type=Path, help="results.json")
    g[WRITE].add_argument("--out-dir", type=Path, metavar="DIR",
                          help="directory for the reports (default: beside results.json)")
    g[WRITE].add_argument("--screenshot", type=Path, metavar="PNG",
                          help="also render report.html to this PNG with headless Chromium")
    deprecated(p, "report")
    p.set_defaults(handler="cmd_report")


def _diff_parser(sub) -> None:
    p = sub.add_parser("diff", help="compare two results.json files without running anything; exit 1 on a regression",
                       description=("Per backend and batch size: a slowdown is flagged when the p50 ratio exceeds "
                                    "--max-slowdown and the 95% intervals of the two medians do not overlap; a backend "
                                    "that passed and now fails, or a leaf whose worst error grew more than "
                                    "--max-parity-drift times, is flagged too; a changed producer or consumer version "
                                    "is listed as 'changed'. A baseline written by multiexport 0.1 (schema 1) is read "
                                    "too; its parity is then compared element-wise (0.1 recorded no error relative to "
                                    "the leaf's scale)."))
    g = groups(p, GATE)
    p.add_argument("baseline", type=Path, help="the earlier results.json (this version's, or 0.1's)")
    p.add_argument("current", type=Path, help="the new results.json")
    g[GATE].add_argument("--sweep", action="store_true",
                         help="BASELINE and CURRENT are sweep directories: every model gated, latency per backend over "
                              "the sweep (geometric mean of its p50 ratios); a model missing from CURRENT is a regression")
    regression_options(g[GATE])
    p.set_defaults(handler="cmd_diff")
