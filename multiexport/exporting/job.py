"""The typed job the export driver hands a backend's export hook: everything one export needs, and nothing to do.

The driver (`exporting.pipeline`) owns the staging directory, the manifest, the static-size fallback, the
symbolic check, the load check and replacing an old artifact; the hook writes the format's files into
`out_dir` and returns a `FormatResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from .artifact import Artifact
from .options import ExportOptions

if TYPE_CHECKING:
    from ..leaves import Signature

OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class ExportJob(Generic[OptionsT]):
    """One export of one function by one backend.

    fn: the function, called on the signature's leaves (its pytree flattened by `signature`).
    signature: the named input and output leaves, their shapes (symbolic dims by name), dtypes and examples.
    out_dir: the empty staging directory the format's files go in; the driver moves it into place.
    options: the export's common options (platforms, precision, keep_unused, external weights, ...).
    backend_options: the backend's own options, validated: an instance of its `options_type` dataclass.
    stage: the export of the backend this one builds on (`builds_on`), finished and loaded; None otherwise.
    """

    fn: Callable[..., Any]
    signature: "Signature"
    out_dir: Path
    options: ExportOptions
    backend_options: OptionsT
    stage: Artifact | None = None
