"""One exception root with typed subclasses.

Every error a user can cause carries an exit code so the CLI can turn it into one clear line
(exit 2 for user mistakes, 3 for a backend that failed) instead of a traceback.
"""

from __future__ import annotations


class MultiexportError(Exception):
    """Root of every error multiexport raises on purpose."""

    exit_code = 3


class UsageError(MultiexportError):
    """Bad command-line usage or option values."""

    exit_code = 2


class TargetError(MultiexportError):
    """The target could not be loaded, or its example arguments could not be traced."""

    exit_code = 2


class SignatureError(MultiexportError):
    """The inputs or outputs cannot be flattened into named array leaves."""

    exit_code = 2


class InputError(MultiexportError):
    """A feed given to a runner does not match the artifact's manifest (name, shape, dtype)."""

    exit_code = 2


class ArtifactError(MultiexportError):
    """An artifact directory is missing, incomplete or not readable."""

    exit_code = 2


class BackendUnavailable(MultiexportError):
    """A backend's libraries are not installed, or the backend name is unknown."""

    exit_code = 3


class ExportError(MultiexportError):
    """A backend failed to export the function; `category` says why in one word."""

    exit_code = 3

    def __init__(self, message: str, *, backend: str = "", category: str = "export-failed"):
        super().__init__(message)
        self.backend = backend
        self.category = category


class RunError(MultiexportError):
    """A runner failed to load or execute an artifact; `category` says why in one word."""

    exit_code = 3

    def __init__(self, message: str, *, backend: str = "", category: str = "run-failed"):
        super().__init__(message)
        self.backend = backend
        self.category = category


def leaf_message(kind: str, name: str, got: object, expected: object) -> str:
    """The house shape of a per-leaf message: "Input 'foo.bar' | got float64, expected float32"."""
    return f"{kind} '{name}' | got {got}, expected {expected}"
