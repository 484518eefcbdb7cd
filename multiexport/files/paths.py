"""Paths that cannot escape: a relative path from a manifest resolves inside its directory or is refused.

File names multiexport writes never come from leaf names (a manifest is user input); where a name must be
derived from user text (a target's name as a default output directory), `safe_component` reduces it to
one harmless path component.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from ..errors import ArtifactError

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def inside(directory: Path, relative: object, what: str = "file") -> Path:
    """`directory / relative`, refused unless `relative` is a plain relative path that stays inside.

    Absolute paths, `..` components, backslashes, NUL bytes and symlinks that lead out are all refused
    with an ArtifactError naming the entry.
    """
    if not isinstance(relative, str) or not relative or "\x00" in relative or "\\" in relative:
        raise ArtifactError(f"Artifact '{directory}' | {what} path {relative!r}, expected a relative path inside it")
    pure = PurePosixPath(relative)
    if relative.startswith("/") or any(part in ("..", ".", "") for part in relative.split("/")):
        raise ArtifactError(f"Artifact '{directory}' | {what} path {relative!r} leaves the directory, "
                            "expected a relative path inside it")
    root = Path(directory).resolve()
    full = (root / pure).resolve()
    if full != root and root not in full.parents:
        raise ArtifactError(f"Artifact '{directory}' | {what} path {relative!r} resolves to {full}, outside it "
                            "(a symlink?), expected a path inside it")
    return root / pure


def safe_component(text: str, fallback: str = "target") -> str:
    """`text` as one path component: unsafe runs become `_`, no leading dots, at most 100 characters."""
    cleaned = _UNSAFE.sub("_", str(text)).strip("._-")[:100]
    return cleaned or fallback
