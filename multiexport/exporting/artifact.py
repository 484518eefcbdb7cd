"""The plain values the contract hands around: whether a backend can run here, and an exported artifact."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .manifest import Manifest


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; if not, why and what to install (`reason`)."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Artifact:
    """An exported artifact on disk: its backend, directory and manifest."""

    backend: str
    directory: Path
    manifest: "Manifest"

