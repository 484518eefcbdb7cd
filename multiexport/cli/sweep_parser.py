"""`multiexport sweep` and `multiexport history`'s options, grouped per concern."""

from __future__ import annotations

from pathlib import Path

from .flags import GATE, OUTPUT, PROCESSES, ROWS, TARGET, WRITE, deprecated, groups, regression_options


def sweep_parsers(sub) -> None:
    p = sub.add_parser(
        "sweep", help="compare every target of a TOML spec, locally or on a Ray cluster, into one sweep directory",
        description=("Run `multiexport compare` on every target of SPEC, each in a process of its own (one failing "
                     "model never stops the sweep), and write DIR/matrix.md, matrix.html and summary.json (model x "
                     "backend) as rows finish (DIR: --out-dir). local: a pool sized to the cores and memory, timing "
                     "phases one at a time per machine; ray: each compare a Ray task with its resources (pip install "
                     "'multiexport[sweep]'). A killed sweep continues with --resume: finished rows are kept, the "
                     "rest re-run. Every row goes into an SQLite history (`multiexport history`). The spec's "
                     "format: python -c 'import multiexport.sweeps.spec as s; print(s.__doc__)'."))
    g = groups(p, TARGET, WRITE, PROCESSES, GATE)
    g[TARGET].add_argument("spec", type=Path, nargs="?", help="the sweep's TOML spec")
    g[TARGET].add_argument("--only", metavar="NAME,TAG", help="only the targets with these names or tags")
    g[TARGET].add_argument("--shard", metavar="I/N", help="this run's share: every N-th target from the I-th (CI matrices)")
    g[TARGET].add_argument("--list", action="store_true", help="print each selected target's compare command and exit")
    g[WRITE].add_argument("--out-dir", type=Path, metavar="DIR",
                          help="the sweep's directory (default: multiexport-out/sweep-<name>)")
    g[WRITE].add_argument("--resume", action="store_true", help="continue the sweep in --out-dir: keep its finished rows")
    g[WRITE].add_argument("--history", type=Path, metavar="SQLITE",
                          help="record every row here (default: DIR/history.sqlite); one file across sweeps keeps a "
                               "history")
    g[WRITE].add_argument("--merge", nargs="+", type=Path, metavar="DIR",
                          help="instead of running a SPEC: merge these sweep directories (the shards of one sweep) into "
                               "--out-dir, a sweep directory like any other (results and reports copied, not artifacts)")
    g[PROCESSES].add_argument("--executor", choices=["local", "ray"], default="local",
                              help="local (default): a pool on this machine; ray: tasks on the cluster at --ray-address")
    g[PROCESSES].add_argument("--ray-address",
                              help="the Ray cluster to join (default: $RAY_ADDRESS, else a local one started)")
    g[PROCESSES].add_argument("--jobs", type=int,
                              help="local: compares at once (default: one per 2 cores and 4 GiB available)")
    g[GATE].add_argument("--baseline-sweep", type=Path, metavar="DIR",
                         help="gate the sweep against an earlier sweep directory; exit 1 on a regression")
    regression_options(g[GATE])
    deprecated(p, "sweep")
    p.set_defaults(handler="cmd_sweep")

    p = sub.add_parser("history", help="query the result history of sweeps (SQLite): a model's rows over time, "
                                       "when a row changed status",
                       description=("Read the history a sweep records (DIR/history.sqlite, or its --history): every "
                                    "model x backend of every sweep with status, error, p50 with its interval, versions, "
                                    "machine, commit and time."))
    g = groups(p, ROWS, GATE, OUTPUT)
    p.add_argument("db", type=Path, help="the history file")
    g[ROWS].add_argument("--add", nargs="+", type=Path, metavar="SWEEP_DIR", help="record these sweep directories first")
    g[ROWS].add_argument("--model", help="only this model (a task name)")
    g[ROWS].add_argument("--backend", help="only this backend")
    g[ROWS].add_argument("--changes", action="store_true",
                           help="only the changes of status from one sweep to the next, with the versions that changed, "
                                "and the sweeps where latency or parity moved (change points over each model x backend)")
    g[GATE].add_argument("--gate", action="store_true",
                         help="exit 1 when the last change point of a model x backend made it slower (1.1x) or its "
                              "parity worse (2x): a gate against the history rather than one baseline")
    g[GATE].add_argument("--junit", type=Path, metavar="FILE", help="with --gate: JUnit XML, one test case per change")
    g[OUTPUT].add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler="cmd_history")
