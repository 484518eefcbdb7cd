"""Backends by name: the built-in ones, plus any a third party registers under the entry-point
group `multiexport.backends` (`name = "package.module:Class"`). Nothing heavy is imported until a
backend is asked for by name.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .backend import Backend
from .errors import BackendUnavailable

BUILTIN: dict[str, str] = {
    "xla": "multiexport.backends.xla:XlaBackend",
}
ENTRY_POINT_GROUP = "multiexport.backends"


def registered() -> dict[str, str]:
    """Backend name -> "module:Class", built-ins first, then entry points (which may not override)."""
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def names() -> list[str]:
    return list(registered())


def get_backend(name: str) -> Backend:
    """An instance of the backend registered as `name`."""
    table = registered()
    if name not in table:
        raise BackendUnavailable(f"Backend '{name}' | unknown, expected one of {', '.join(table)}")
    module_name, _, attr = table[name].partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"Backend '{name}' | cannot load {table[name]}: {exc}") from exc
    return cls()
