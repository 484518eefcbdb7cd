"""A target's code may not end the process that runs it: os._exit from a factory, a trace or a worker's
export is an error with a message, never an exit code that reads as a verdict.

`os._exit(0)` in a factory ended `multiexport compare` with 0, the code for "every backend faithful", with
nothing checked; `os._exit(3)` looked like a backend failure with no word said. While `target_cannot_exit`
is open, os._exit raises `TargetExited` (a usage error in the command, an export-failed row in a worker);
multiexport's own exits go through `exit_now`, which keeps the real one. A process forked meanwhile (a
library's own child) exits as it asked.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator, NoReturn

from ..errors import TargetError
from ..telemetry import remove_framework_temporaries

_real_exit = os._exit


class TargetExited(TargetError):
    """The target's code called os._exit (or sys.exit) while multiexport was running it."""

    category = "export-failed"


@contextlib.contextmanager
def target_cannot_exit() -> Iterator[None]:
    """For the block, os._exit in this process raises TargetExited instead of ending it."""
    pid = os.getpid()

    def refused(status: int) -> NoReturn:
        if os.getpid() != pid:  # a child forked meanwhile: its exit is its own
            _real_exit(status)
        raise TargetExited(f"Target | called os._exit({status!r}) while multiexport was running it (its module, factory "
                           "or function), expected it to return: nothing was checked")

    os._exit = refused
    try:
        yield
    finally:
        os._exit = _real_exit


def exit_now(code: int) -> NoReturn:
    """End this process now, its output streams flushed. For a worker (or the CLI) whose results are all
    written and closed: the runtimes' interpreter teardown (TensorFlow's alone ~1.7 s, jax's ~0.7 s) would
    only delay whoever waits for this exit. The teardown's one useful part, removing the files autograph
    wrote to $TMPDIR, is done here."""

    remove_framework_temporaries()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _real_exit(code)
