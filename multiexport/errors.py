"""One exception root with typed subclasses, and a separate class for multiexport's own bugs.

Every error a user can cause carries an exit code so the CLI turns it into one clear line instead of a
traceback: 2 for a user mistake (bad target, input, artifact, option), 3 for a backend that failed.
`InternalError` is deliberately *not* a `MultiexportError`: a bug in multiexport must never be
mistaken for a verdict about the user's model; the CLI saves its traceback and exits `INTERNAL_EXIT`.
"""

from __future__ import annotations

from typing import TypeVar

from .status import Status

T = TypeVar("T")

USAGE_EXIT = 2
BACKEND_EXIT = 3
INTERNAL_EXIT = 70  # EX_SOFTWARE (sysexits.h): an internal software error


class MultiexportError(Exception):
    """Root of every error multiexport raises on purpose."""

    exit_code = BACKEND_EXIT


class UsageError(MultiexportError):
    """Bad command-line usage or option values."""

    exit_code = USAGE_EXIT


class TargetError(MultiexportError):
    """The target could not be loaded, or its example arguments could not be traced."""

    exit_code = USAGE_EXIT


class SignatureError(MultiexportError):
    """The inputs or outputs cannot be flattened into named array leaves."""

    exit_code = USAGE_EXIT


class InputError(MultiexportError):
    """A feed or file given to multiexport does not match what was expected (name, shape, dtype, format)."""

    exit_code = USAGE_EXIT


class ArtifactError(MultiexportError):
    """An artifact directory is missing, incomplete, not multiexport's, or its manifest is malformed."""

    exit_code = USAGE_EXIT


class EnvironmentProblem(MultiexportError):
    """The environment multiexport runs in cannot work as set (a variable, a full disk): the message names
    what to change. Exit 2, like a user mistake: nothing about the model or a backend is known yet."""

    exit_code = USAGE_EXIT


class BackendUnavailable(MultiexportError):
    """A backend's libraries are not installed, or the backend name is unknown."""

    exit_code = BACKEND_EXIT


class CategorizedError(MultiexportError):
    """An error with a status category saying in one word why it happened.

    category: a `Status` (or its value); `status` is it as the enum, `category` as its value. A category
    that is no Status is multiexport's own bug, raised here as InternalError, not later read as a verdict.
    """

    default_category = "export-failed"

    def __init__(self, message: str, *, backend: str = "", category: Status | str | None = None):
        super().__init__(message)
        self.backend = backend
        try:
            self.status = Status(category or self.default_category)
        except ValueError:
            raise InternalError(f"{type(self).__name__} | category {category!r}, expected a Status value "
                                f"({message})") from None
        self.category = self.status.value


class ExportError(CategorizedError):
    """A backend failed to export the function; `category` says why in one word."""

    default_category = "export-failed"
    # declared only: set where a compiler's own words are known (IREE's compile), read with getattr
    diagnostics: str


class RunError(CategorizedError):
    """A runner failed to load or execute an artifact; `category` says why in one word."""

    default_category = "run-failed"


class Interrupted(BaseException):
    """A signal (SIGINT, SIGTERM, SIGHUP) asked multiexport to stop; finished work is kept.

    A BaseException, like KeyboardInterrupt, so `except Exception` in converter code cannot swallow it.
    """

    def __init__(self, signum: int):
        import signal

        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class InternalError(Exception):
    """A bug in multiexport itself (an invariant broke), never a verdict about the user's model."""


def present(value: T | None, why: str) -> T:
    """`value`, which an invariant of multiexport says is set (`why` states it); None is multiexport's bug,
    raised as InternalError (unlike `assert`, it holds under `python -O`)."""
    if value is None:
        raise InternalError(f"multiexport bug: expected a value here ({why}), got None")
    return value


def leaf_message(kind: str, name: str, got: object, expected: object) -> str:
    """The house shape of a per-leaf message: "Input 'foo.bar' | got float64, expected float32"."""
    return f"{kind} '{name}' | got {got}, expected {expected}"
