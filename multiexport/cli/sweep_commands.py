"""The commands over many compares: `sweep`, `history`, and `diff --sweep`."""

from __future__ import annotations

import io
import json
import shlex
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from ..files.paths import safe_component
from ..files.text import visible
from ..report.regression import check_thresholds, publish
from ..sweeps.changepoints import describe, history_gate
from ..sweeps.gate import diff_sweeps, sweep_results
from ..sweeps.history import History, render_changes, render_rows
from ..sweeps.matrix import markdown
from ..sweeps.merge import merge
from ..sweeps.session import SweepConfig, run_sweep
from ..sweeps.spec import load_spec, select
from ..sweeps.state import DONE
from ..system.orphans import leaving_nothing_behind
from .parser import build_parser


def compare_refusal(argv: Sequence[str]) -> str | None:
    """Why `multiexport compare` would refuse these arguments (None: it would take them); its own parser."""

    argv = list(argv)
    err = io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(io.StringIO()):  # --help prints, then exits 0
            ns = build_parser().parse_args(argv)
    except SystemExit:
        last = (err.getvalue().strip().splitlines() or ["asks for help, not a compare"])[-1]
        return last.split("error: ", 1)[-1]
    # argparse takes abbreviations (--ou for --out): what the sweep sets must still be what it set (the sweep
    # writes --out-dir; a spec of the release before writes --out, its deprecated spelling)
    out = next(flag for flag in ("--out-dir", "--out") if flag in argv)
    given = {"out_dir": Path(argv[argv.index(out) + 1]), "backends": argv[argv.index("--backends") + 1],
             "baseline": None, "junit": None}
    moved = [name for name, value in given.items() if getattr(ns, name, None) != value]
    if moved:
        flags = ", ".join("--" + m.replace("_", "-") for m in moved)
        return f"sets {flags} (perhaps abbreviated), which the sweep sets itself"
    return None


def _say(message: str) -> None:
    print(f"[sweep] {visible(message)}", file=sys.stderr, flush=True)


def cmd_sweep(args) -> int:
    if args.merge:
        return _merge(args)
    if args.spec is None:
        raise UsageError("Sweep | no SPEC given, expected a sweep spec (TOML), or --merge DIR... --out-dir DIR")
    spec = load_spec(args.spec, check_args=compare_refusal)
    tasks = select(spec.tasks, args.only or "", args.shard or "")
    if args.list:
        for t in tasks:  # quoted: a line pasted into a shell runs that compare and nothing a spec smuggled in
            command = shlex.join(["multiexport", *t.compare_args(Path("OUT") / t.name)])
            print(visible(f"{t.name:28s} {','.join(t.tags):30s} {command}"))
        return 0
    if args.baseline_sweep is not None:  # refused now, not after hours of compares
        check_thresholds(args.max_slowdown, args.max_parity_drift)
        sweep_results(args.baseline_sweep)
    out = args.out_dir or Path("multiexport-out") / f"sweep-{safe_component(spec.name, 'sweep')}"
    config = SweepConfig(out=out, executor=args.executor, jobs=args.jobs, resume=args.resume, only=args.only or "",
                         shard=args.shard or "", history=args.history, ray_address=args.ray_address)
    with leaving_nothing_behind():  # what a compare's target left (double-forked out of its session) goes too
        result = run_sweep(spec, tasks, config, say=_say)
    print(result.markdown, end="")
    print(f"sweep: {len(result.ran)} compare(s) in {result.seconds:.0f} s; {out}/matrix.md, matrix.html, summary.json; "
          f"history {config.history or out / 'history.sqlite'}")
    code = result.exit_code
    if args.baseline_sweep is not None:
        d = diff_sweeps(args.baseline_sweep, out, args.max_slowdown, args.max_parity_drift)
        print(publish(d, args.junit))
        code = max(code, d.exit_code)
    return code


def _merge(args) -> int:
    if args.spec is not None or args.out_dir is None:
        raise UsageError("Option '--merge' | expected sweep directories and --out-dir, and no SPEC (merging runs "
                         "nothing)")
    rows = merge(args.merge, args.out_dir)
    print(markdown(rows), end="")
    print(f"sweep: merged {len(args.merge)} sweep(s), {len(rows)} row(s) into {args.out_dir}")
    return 0 if all(r.outcome.state == DONE for r in rows) else 3


def cmd_history(args) -> int:
    history = History(args.db)
    for directory in args.add or ():
        count = history.add(directory)
        print(f"recorded {count} row(s) of {directory}", file=sys.stderr)
    if args.add and not (args.model or args.backend or args.changes or args.json or getattr(args, "gate", False)):
        return 0
    if getattr(args, "gate", False):  # judged against the history's change points, not one baseline
        return history_gate(history.rows(args.model, args.backend), args.junit)
    if args.changes:
        changes = history.changes(args.model, args.backend)
        if args.json:
            print(json.dumps([asdict(c) for c in changes], indent=1))
        else:
            print(render_changes(changes) or "no rows recorded for that model and backend")
            moved = describe(history.rows(args.model, args.backend))  # where latency or parity moved
            if moved:
                print(moved)
        return 0
    rows = history.rows(args.model, args.backend)
    print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else render_rows(rows))
    return 0


def diff_sweep_dirs(args) -> int:
    check_thresholds(args.max_slowdown, args.max_parity_drift)
    d = diff_sweeps(args.baseline, args.current, args.max_slowdown, args.max_parity_drift)
    print(publish(d, args.junit))
    return d.exit_code
