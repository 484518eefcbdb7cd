"""`multiexport locate`'s arguments: where parity breaks, op by op, for one trial."""

from __future__ import annotations

from pathlib import Path

from .flags import FORMATS, OUTPUT, PARITY, TARGET, WRITE, groups
from .help_texts import OPTION_HELP, TARGET_HELP


def locate_parser(sub) -> None:
    p = sub.add_parser(
        "locate", help="find the first operation where an artifact parts from jax.jit, its source line and who is at fault",
        description=("For one trial, pair every StableHLO op's value in the reference (the exported module with every "
                     "op result returned, run by XLA on the CPU and checked against jax.jit) with the artifact's value "
                     "for it (ONNX and OpenVINO: the shipped graph with those tensors added as outputs; XLA and IREE: "
                     "the shipped module re-compiled with every op result returned; LiteRT: the shipped .tflite run with every "
                     "tensor kept, tensors paired with ops by the names the converter gives them; SavedModel: the module "
                     "inside its XlaCallModule re-compiled by TensorFlow with every op result returned), and report the first op whose "
                     "output is beyond tolerance while its inputs agree, whether the artifact computes that op "
                     "differently (it is replayed alone on the artifact's own inputs) or amplifies a rounding-level "
                     "difference, its source file:line and module path, and the diverging ops downstream. Writes "
                     "DIR/locate.json. Exit 1 when an artifact fails parity and computes an op differently, 0 otherwise."))
    g = groups(p, TARGET, WRITE, FORMATS, PARITY, OUTPUT)
    g[TARGET].add_argument("target", nargs="?", help=TARGET_HELP)
    g[WRITE].add_argument("--out-dir", type=Path, metavar="DIR",
                          help="where locate.json, the artifacts it exports and --reduce's repros go (required)")
    g[FORMATS].add_argument("--backend", required=True, metavar="NAME[,NAME]",
                            help="the backend(s) whose artifact to examine, comma-separated (e.g. onnx,openvino)")
    g[FORMATS].add_argument("--artifact", action="append", default=[], metavar="[BACKEND=]DIR",
                            help="examine this artifact directory (written by 'multiexport export') as shipped instead "
                                 "of exporting one; BACKEND= when several backends are named")
    g[FORMATS].add_argument("--backend-option", action="append", default=[], metavar="BACKEND.NAME=VALUE",
                            help=OPTION_HELP + " (for the artifacts locate exports; an ONNX graph maps to ops only "
                                 "when written by the stablehlo route: onnx.route=stablehlo)")
    g[PARITY].add_argument("--trial", metavar="NAME",
                           help="the trial to examine: 'example', 'random0', 'random1 b=5' ... as compare names them "
                                "(default: the first trial on which an artifact fails parity, else the example)")
    g[PARITY].add_argument("--trials", type=int, default=2, metavar="N",
                           help="seeded random trials per size setting, as compare's --trials (default 2)")
    g[PARITY].add_argument("--seed", type=int, default=0, help="the trials' seed, as compare's --seed (default 0)")
    g[PARITY].add_argument("--val-range", action="append", default=[], metavar="LEAF=LOW:HIGH",
                           help="the trials' value range for input leaves, as compare's (the same trials as its run)")
    g[PARITY].add_argument("--dim-sizes", action="append", default=[], metavar="DIM=N,N",
                           help="the sizes of symbolic dims the trials use, as compare's")
    g[PARITY].add_argument("--leaf", metavar="OUTPUT",
                           help="look only at the ops this output leaf depends on (default: every output)")
    g[PARITY].add_argument("--tolerance", action="append", default=[], metavar="LEAF=rtol:X,atol:Y",
                           help="an output leaf's tolerance for deciding whether a trial fails, as compare's")
    g[OUTPUT].add_argument("--cone", type=int, default=5, metavar="N",
                           help="how many diverging ops downstream of the located one to list (default 5)")
    g[OUTPUT].add_argument("--reduce", action="store_true",
                           help="write the located op as a standalone repro into DIR/reduced/: the op alone as "
                                "StableHLO (op.mlir, op.mlirbc), its inputs as the artifact computed them (inputs.npz), "
                                "XLA's and the artifact's results, the versions and a README for a bug report")
    g[OUTPUT].add_argument("--json", action="store_true", help="print locate.json to stdout instead of the summary")
    p.set_defaults(handler="cmd_locate")


def compare_locate_option(g) -> None:
    """`compare --locate`: locate runs for every row that fails parity, after the compare."""
    g.add_argument("--locate", action="store_true",
                   help="for every backend that fails parity, run 'multiexport locate' on its artifact and failing "
                        "trial: writes DIR/locate/BACKEND/locate.json and adds a 'Where parity breaks' section to "
                        "the reports (an ONNX or OpenVINO graph maps to ops when written by the stablehlo route)")
