"""The vocabulary of the command line: one name per meaning across every subcommand, the option groups
`--help` shows per concern, and the old spellings kept for one release.

One name, one meaning (as Polygraphy names its flags):
  --out-dir DIR         the directory a command writes (export: the artifact; compare: results, reports and
                        artifacts; report: the reports; sweep: the sweep), as the API's `out_dir=`
  --save-outputs FILE   the .npz a run writes the artifact's outputs to (run, native)
  --pjrt-plugin SO      the PJRT plugin .so the native XLA consumer loads (native, compare)
  --backend / --backends, --precision / --precisions: one name, several names (comma-separated)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import UsageError

# The groups of `--help`, one per concern; every subcommand uses these titles, in this order.
TARGET = "what to export"
WRITE = "where to write"
FORMATS = "formats"
PARITY = "parity"
TIMING = "timing"
NATIVE = "native consumers"
DEVICES = "devices"
PROCESSES = "processes"
GATE = "regression gate"
OUTPUT = "output"
SECURITY = "trust"
ROWS = "which rows"

# Old spelling -> new one, per subcommand: what `DeprecatedAlias` says and the help's epilog lists.
DEPRECATED: dict[str, dict[str, str]] = {
    "export": {"--out": "--out-dir"},
    "compare": {"--out": "--out-dir", "--native-plugin": "--pjrt-plugin", "--precision": "--precisions"},
    "report": {"--out": "--out-dir"},
    "sweep": {"--out": "--out-dir"},
    "run": {"--out": "--save-outputs"},
    "native": {"--out": "--save-outputs", "--plugin": "--pjrt-plugin"},
}


class DeprecatedAlias(argparse.Action):
    """An old spelling kept for one release: stores its value where the new flag does and says so in one
    line on stderr (a script keeps working, and learns the new name from its own log)."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"multiexport: warning: {option_string} is deprecated, use {self.new} (the old spelling goes in the "
              "next release)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def groups(parser: argparse.ArgumentParser, *titles: str) -> dict[str, Any]:
    """Argument groups of `parser` by title, made in the order given (the order `--help` shows)."""
    return {title: parser.add_argument_group(title) for title in titles}


def deprecated(parser: argparse.ArgumentParser, command: str, **kwargs: Any) -> None:
    """Add the old spellings of `command` (DEPRECATED) as hidden aliases of their new flags, each taking
    the new flag's `type` and `metavar` (more argparse keywords per old spelling in kwargs, e.g. out={...})."""
    for old, new in DEPRECATED[command].items():
        target = next(a for a in parser._actions if new in a.option_strings)
        extra = dict(kwargs.get(old.lstrip("-").replace("-", "_"), {}))
        if target.type is not None:
            extra.setdefault("type", target.type)
        parser.add_argument(old, dest=target.dest, action=DeprecatedAlias, new=new, help=argparse.SUPPRESS,
                            default=argparse.SUPPRESS, metavar=target.metavar, **extra)
    parser.epilog = "Deprecated spellings (they still work for one release): " + ", ".join(
        f"{old} (use {new})" for old, new in DEPRECATED[command].items()) + "."


def regression_options(group: Any) -> None:
    """The gate's thresholds and its JUnit file (compare, diff, sweep): same names, same meaning."""
    group.add_argument("--max-slowdown", type=float, default=None,
                       help="p50 ratio that counts as a slowdown, for every kind of comparison (default: the calibrated "
                            "thresholds: paired A/B 1.05, cross-run 1.5; wider under 30 us per call)")
    group.add_argument("--max-parity-drift", type=float, default=10.0,
                       help="growth factor of a leaf's worst error that counts as drift (default: 10)")
    group.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML, one test case per "
                       "backend x check")


def batch_sizes(text: str | None) -> tuple[int, ...] | None:
    """`--batch-sizes N,N` as compare and load take it (the flag means one thing in every command): sizes >= 1,
    or None when the flag was not given; anything else is one UsageError line."""
    if text is None:
        return None
    try:
        sizes = tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise UsageError(f"Option '--batch-sizes' | got '{text}', expected sizes >= 1 such as 1,8,64")
    return sizes
