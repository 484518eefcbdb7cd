"""Backends by name: the built-in ones, any a third party registers under the entry-point group
`multiexport.backends` (`name = "package.module:Class"`), and any registered at run time with
`register` (e.g. from a test's conftest). Nothing heavy is imported until a backend is asked for.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .backend import Backend
from .errors import BackendUnavailable

BUILTIN: dict[str, str] = {
    "xla": "multiexport.backends.xla:XlaBackend",
    "savedmodel": "multiexport.backends.savedmodel:SavedModelBackend",
    "onnx": "multiexport.backends.onnx:OnnxBackend",
    "iree": "multiexport.backends.iree:IreeBackend",
}
ENTRY_POINT_GROUP = "multiexport.backends"
_RUNTIME: dict[str, str] = {}


def register(name: str, locator: str) -> None:
    """Register backend `name` as "module:Class" for this process (worker processes get it passed on)."""
    if name in BUILTIN:
        raise BackendUnavailable(f"Backend '{name}' | is built in, expected a new name")
    if ":" not in locator:
        raise BackendUnavailable(f"Backend '{name}' | got locator '{locator}', expected 'package.module:Class'")
    _RUNTIME[name] = locator


def unregister(name: str) -> None:
    _RUNTIME.pop(name, None)


def runtime_registered() -> dict[str, str]:
    """Backends registered with `register` in this process (not built in, not entry points)."""
    return dict(_RUNTIME)


def registered() -> dict[str, str]:
    """Backend name -> "module:Class": built-ins, then run-time registrations, then entry points."""
    found = {**BUILTIN, **_RUNTIME}
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
