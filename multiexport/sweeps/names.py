"""Task names: each is a directory under OUT/rows and a file OUT/rows/NAME.log, so never a path."""

from __future__ import annotations

from ..files.paths import safe_component


def valid_name(name: object) -> bool:
    """A task name that is one plain directory under rows/ and cannot be taken for another task's log."""
    return (isinstance(name, str) and bool(name) and safe_component(name, "") == name
            and not name.endswith(".log"))
