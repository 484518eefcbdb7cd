"""`multiexport` command line: signature, export, run, native, compare, report, diff, sweep, history, backends.

User mistakes (bad target, input, artifact, option) print one line and exit 2; a backend that fails exits
3; a bug in multiexport itself exits 70 with its traceback saved to a file the message names; a signal
exits 128+N after writing what finished. `--debug` shows tracebacks. Heavy libraries load only inside the
command that needs them, so `multiexport --help` works with the core alone.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Sequence

from ..errors import INTERNAL_EXIT, Interrupted, MultiexportError
from ..exporting.outdir import path_error
from ..files.temporary import remove_orphaned
from ..files.text import visible
from ..system.exits import TargetExited, exit_now, target_cannot_exit
from ..system.process import stop_on_signals
from ..versions import __version__
from . import commands, sweep_commands
from .parser import build_parser


def entry() -> None:
    """The `multiexport` command: `main`, then exit at once. Every result is written and closed by then;
    the interpreter's teardown of the frameworks (~0.7 s for jax) would only make the shell wait."""
    code = main()
    logging.shutdown()
    exit_now(code)


def main(argv: Sequence[str] | None = None) -> int:
    _tolerant_streams()

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"multiexport {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    handler = getattr(commands, args.handler, None) or getattr(sweep_commands, args.handler)
    remove_orphaned()  # what an earlier run killed outright (kill -9) could not remove itself
    _absolute_paths(args)
    try:
        # SIGTERM, SIGHUP, SIGINT: children killed, temporaries removed, 128+N; the target's os._exit an error
        with stop_on_signals(), target_cannot_exit():
            try:
                return handler(args) or 0
            except SystemExit as exc:  # the target's sys.exit (argparse is done): never read as a verdict
                raise TargetExited(f"Target | called sys.exit({exc.code!r}) while multiexport was running it, "
                                   "expected it to return: nothing was checked") from None
    except MultiexportError as exc:
        if args.debug:
            raise
        print(f"multiexport: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        print(f"multiexport: {exc}; finished results (if any) were written before stopping", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("multiexport: interrupted; finished results (if any) were written before stopping", file=sys.stderr)
        return 130
    except OSError as exc:
        mapped = path_error(exc)
        if args.debug or not isinstance(mapped, MultiexportError):
            return _internal(args, exc)
        print(f"multiexport: error: {_one_line(mapped)}", file=sys.stderr)
        return mapped.exit_code
    except Exception as exc:
        return _internal(args, exc)


def _absolute_paths(args) -> None:
    """The paths of a command that builds a target made absolute now, against the directory the command
    started in (args.cwd): the target's factory may change the working directory (os.chdir), and must not
    move --out-dir (or the default one) with it. The TARGET file the workers import: see commands.spec."""
    args.cwd = Path.cwd()
    if args.command not in ("compare", "export", "signature"):
        return  # nothing of the user's runs before their paths are used
    for name, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, name, Path(os.path.abspath(value.expanduser())))


def _tolerant_streams() -> None:
    """A terminal that cannot show a character (LANG=C, an ASCII console) gets it as an escape (\\u200f),
    not a UnicodeEncodeError that would end the command as a bug in multiexport (exit 70)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a closed or detached stream: nothing to print to anyway
                pass


def _internal(args, exc: BaseException) -> int:
    """A bug in multiexport: never a verdict about the model, never a bare traceback. Called while `exc`
    is being handled, so its traceback is the current one."""
    if args.debug:
        raise exc
    where = _save_traceback()
    print(f"multiexport: internal error (a bug in multiexport, not in your model or the format): "
          f"{type(exc).__name__}: {_one_line(exc)}; traceback saved to {where}; please report it "
          "(--debug prints it)", file=sys.stderr)
    return INTERNAL_EXIT


def _one_line(exc: BaseException) -> str:
    """The error as one line, every control or bidirectional character in a name it quotes escaped."""
    return " ".join(visible(exc).split())


def _save_traceback() -> str:
    text = traceback.format_exc()
    try:
        fd, path = tempfile.mkstemp(prefix=f"multiexport-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(f"multiexport {' '.join(sys.argv[1:])}\n\n{text}")
        return path
    except OSError:
        print(text, file=sys.stderr)
        return "(could not save it: printed above)"
