"""`multiexport compare`'s options, grouped per concern (what to export, where to write, formats, parity,
timing, native consumers, devices, processes, regression gate)."""

from __future__ import annotations

from pathlib import Path

from ..comparison import CompareConfig
from ..measure.bench import BenchConfig
from .flags import (
    DEVICES,
    FORMATS,
    GATE,
    NATIVE,
    PARITY,
    PROCESSES,
    TARGET,
    TIMING,
    WRITE,
    deprecated,
    groups,
    regression_options,
)
from .help_texts import CALIBRATION_HELP, EXTERNAL_WEIGHTS_HELP, OPTION_HELP, PRECISION_HELP, TARGET_HELP
from .load_parser import compare_load_options
from .locate_parser import compare_locate_option


def compare_parser(sub, formats: str) -> None:
    p = sub.add_parser(
        "compare", help="export TARGET with every backend and check each one's numbers against JAX",
        description=("Export TARGET with each backend, run every artifact from disk in its own worker process, and "
                     "compare each named output leaf against jax.jit(fn) with dtype-aware tolerances; time every "
                     "backend the same way, with the same threads, all loaded at once and timed in interleaved rounds "
                     "(ratios with 95% intervals; --sequential when they do not fit in memory). Writes "
                     f"DIR/results.json, report.md, report.html (DIR: --out-dir). Formats: {formats}."))
    g = groups(p, TARGET, WRITE, FORMATS, PARITY, TIMING, NATIVE, DEVICES, PROCESSES, GATE)
    _target(g[TARGET])
    g[WRITE].add_argument("--out-dir", type=Path, metavar="DIR",
                          help="output directory (default: multiexport-out/<target name>)")
    _formats(g[FORMATS])
    _parity(g[PARITY])
    compare_locate_option(g[PARITY])  # --locate (cli.locate_parser)
    _timing(g[TIMING])
    compare_load_options(g[TIMING])  # --load (cli.load_parser)
    g[NATIVE].add_argument("--native", action="store_true",
                           help="also run each artifact in its native, Python-free consumer (XLA: PJRT C API, "
                                "SavedModel: TF C API, ONNX: ONNX Runtime C API, OpenVINO and LiteRT: their C APIs, "
                                "IREE: iree-run-module): parity against jax.jit and the latency measured inside the "
                                "program")
    g[NATIVE].add_argument("--pjrt-plugin", type=Path, metavar="SO",
                           help="the PJRT plugin .so the XLA consumer loads with --native (default: the installed one)")
    _devices(g[DEVICES])
    d = CompareConfig.__dataclass_fields__
    g[PROCESSES].add_argument("--timeout", type=float, default=d["timeout"].default,
                              help=f"seconds before a backend's worker is stopped (default: {d['timeout'].default:g})")
    g[PROCESSES].add_argument("--export-jobs", type=int,
                              help="exports to run at once (default: as many as cores and memory allow)")
    g[PROCESSES].add_argument("--allow-fail", default="", metavar="NAME,NAME",
                              help="backends whose export or run failures do not make the exit code 3 (they still "
                                   "show as rows)")
    _gate(g[GATE])
    deprecated(p, "compare")
    p.set_defaults(handler="cmd_compare")


def _target(g) -> None:
    g.add_argument("target", nargs="?", help=TARGET_HELP)
    g.add_argument("--keep-unused", action="store_true", help="make every leaf a parameter in every format")
    g.add_argument("--external-weights", choices=["auto", "always", "never"], default="auto", help=EXTERNAL_WEIGHTS_HELP)


def _formats(g) -> None:
    g.add_argument("--backends", default="all",
                   help="comma-separated backends, or 'all' for every registered one but the opt-in onnx-web, which starts "
                        "a headless browser: name it to run it (default: all)")
    g.add_argument("--precisions", default="fp32", metavar="P,P",
                   help="precisions to make of every backend, e.g. fp32,fp16,int8-dynamic,int8 (default: fp32). Each "
                        "reduced one adds a row BACKEND@P judged by its accuracy budget (cosine, SQNR, top-k vs "
                        "jax.jit), 'unsupported-precision' where the format has no such variant. " + PRECISION_HELP)
    g.add_argument("--calibration", type=Path, metavar="FILE.npz", help=CALIBRATION_HELP)
    g.add_argument("--backend-option", action="append", default=[], metavar="BACKEND.NAME=VALUE", help=OPTION_HELP)
    g.add_argument("--deploy", action="append", default=[], metavar="TARGET",
                   help="where the model will run (repeatable): cpp-server, python-server, tf-serving, mobile (android), "
                        "browser, node. The compare adds what each target's consumers need (its backends, e.g. onnx-web "
                        "for browser, and --native where they are C programs) and the report gives one verdict per target, "
                        "judged only on the consumers that exist there, each on its own latency (the C program's for a "
                        "C++ server). Without it the report still shows the table of every target beside the verdict")


def _parity(g) -> None:
    d = CompareConfig.__dataclass_fields__
    g.add_argument("--trials", type=int, default=d["trials"].default,
                   help=f"seeded trials per size setting, besides the example (default: {d['trials'].default})")
    g.add_argument("--seed", type=int, default=d["seed"].default, help="seed of the trials (default: 0)")
    g.add_argument("--inputs", type=Path, metavar="FILE.npz", help=".npz of named inputs to use instead of generated trials")
    g.add_argument("--val-range", action="append", default=[], metavar="LEAF=LOW:HIGH",
                   help="value range for matching input leaves (glob patterns allowed), e.g. 'batch.tokens=0:1000'")
    g.add_argument("--dim-sizes", action="append", default=[], metavar="DIM=N,N",
                   help="concrete sizes for a symbolic dimension, e.g. b=1,8,64 (default: 1,5)")
    g.add_argument("--tol", action="append", default=[], metavar="LEAF=rtol:R,atol:A[,scale:S]",
                   help="tolerance override for matching output leaves: pass when |got-ref| <= atol + scale*max|ref| + "
                        "rtol*|ref|, e.g. 'out.logits=rtol:1e-3,atol:1e-4' (unset keys are 0)")
    g.add_argument("--accuracy", action="append", default=[], metavar="LEAF=METRIC:V,...",
                   help="accuracy budget override for matching output leaves of reduced-precision rows, e.g. "
                        "'out.logits=top1:0.99,cos:0.999' (metrics: cos, err, sqnr, top1, top5; defaults per precision "
                        "in the README)")
    g.add_argument("--reference", choices=["jax", "float64"], default=d["reference"].default,
                   help="float64: also report each backend's error against the function run in float64 (the true value)")
    g.add_argument("--matmul-precision", choices=["default", "high", "highest"], default="default",
                   help="jax.jit's matmul precision for the parity reference (and the TPU rows' reference): a TPU's "
                        "default runs float32 matmuls in bf16 passes (default: default)")


def _timing(g) -> None:
    d, b = CompareConfig.__dataclass_fields__, BenchConfig()
    g.add_argument("--no-bench", action="store_true", help="check parity only, measure no latency")
    g.add_argument("--bench-time", type=float, default=b.bench_time,
                   help=f"seconds of timed calls per batch size (default: {b.bench_time:g})")
    g.add_argument("--min-iters", type=int, default=b.min_iters, help=f"at least this many timed calls (default: {b.min_iters})")
    g.add_argument("--max-iters", type=int, default=b.max_iters,
                   help=f"at most this many timed calls per size, even before --bench-time (default: {b.max_iters})")
    g.add_argument("--warmup", type=int, default=b.warmup_iters, help=f"untimed calls before timing (default: {b.warmup_iters})")
    g.add_argument("--batch-sizes", metavar="N,N",
                   help="benchmark these sizes of the symbolic batch dimension from the same artifact, e.g. 1,8,64")
    g.add_argument("--rounds", type=int, default=d["rounds"].default,
                   help=f"interleaved rounds per batch size when every runner is loaded at once (default: "
                        f"{d['rounds'].default}); each runner gets --bench-time / rounds per round")
    g.add_argument("--sequential", action="store_true",
                   help="time one runner after another instead of all loaded at once in interleaved rounds (the "
                        "default when they fit in memory together: ratios are then measured over the same seconds)")
    g.add_argument("--floor", action="store_true",
                   help="also time each runtime's per-call floor (one add on 8 floats through the same calling path), "
                        "so a small model's latency reads as overhead vs compute")
    g.add_argument("--include-transfers", action="store_true",
                   help="time host-to-host calls (input copies to the device and outputs back) instead of "
                        "device-resident ones")
    g.add_argument("--threads", type=int,
                   help="intra-op threads for every runtime (default: the cores this process may use)")


def _devices(g) -> None:
    d = CompareConfig.__dataclass_fields__
    g.add_argument("--device", choices=["cpu", "gpu", "tpu", "auto"], default=d["device"].default,
                   help="cpu (default); gpu: every backend on the GPU, those that cannot use it are reported as 'no-gpu' "
                        "rows; tpu: every row on the CPU plus TPU rows (jax.jit, xla, with --native its PJRT consumer) "
                        "in one TPU worker; auto: the TPU rows when a TPU is there, else the GPU when every selected "
                        "backend sees one, else the CPU")
    g.add_argument("--platforms", help="comma-separated platforms the XLA artifact is lowered for, as export's, e.g. "
                                       "cpu,tpu (default: the device's; with TPU rows cpu,tpu)")


def _gate(g) -> None:
    g.add_argument("--baseline", type=Path, metavar="RESULTS_JSON",
                   help="compare to a previous results.json; exit 1 on a regression. Its artifacts, when still beside "
                        "it, are timed in the same rounds as the new ones (paired A/B); else latency is judged "
                        "cross-run, with a wider threshold")
    g.add_argument("--baseline-artifacts", type=Path, metavar="DIR",
                   help="a previous compare's output directory: its artifacts (DIR/BACKEND, read-only) are timed in "
                        "the same interleaved rounds as the new ones, and each latency verdict rests on that paired "
                        "ratio; exit 1 on a regression")
    regression_options(g)
