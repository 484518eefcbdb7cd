"""Backends by name: the built-in ones, any a third party registers under the entry-point group
`multiexport.backends` (`name = "package.module:Class"`), and any registered at run time with
`register` (e.g. from a test's conftest).

Built-in backends are found by scanning the `multiexport.backends` package: each module there names
its class in a module-level `BACKEND`, so adding a format is adding its module, with no list to edit.
Backend modules import no heavy library at import time, so scanning them is cheap; help texts, chart
colours and device mappings all come from the classes found here.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from importlib.metadata import entry_points

from ..errors import BackendUnavailable
from .contract import Backend
from .precision import split_variant

ENTRY_POINT_GROUP = "multiexport.backends"
BUILTIN_PACKAGE = "multiexport.backends"
_RUNTIME: dict[str, str] = {}
_BROKEN: dict[str, str] = {}  # built-in module name -> why it failed to import


@lru_cache(maxsize=1)
def builtin() -> dict[str, str]:
    """Built-in backend name -> "module:Class", in each class's `order`."""
    package = importlib.import_module(BUILTIN_PACKAGE)
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{BUILTIN_PACKAGE}.{info.name}")
        except Exception as exc:  # one broken backend module must not take the others down: it is listed as broken
            _BROKEN[info.name] = f"{type(exc).__name__}: {exc}"
            found.append((1000, info.name, f"{BUILTIN_PACKAGE}.{info.name}:BACKEND"))
            continue
        cls = getattr(module, "BACKEND", None)
        if isinstance(cls, type) and issubclass(cls, Backend) and cls.name:
            found.append((cls.order, cls.name, f"{module.__name__}:{cls.__name__}"))
    return {name: locator for _, name, locator in sorted(found)}


def register(name: str, locator: str) -> None:
    """Register backend `name` as "module:Class" for this process (worker processes get it passed on)."""
    if name in builtin():
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
    found = {**builtin(), **_RUNTIME}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def names() -> list[str]:
    return list(registered())


def default_names() -> list[str]:
    """The default set (`--backends all`): every registered backend but the opt-in ones (`Backend.opt_in`).

    A backend whose class cannot load stays in, so its row says why it is unavailable.
    """
    chosen = []
    for name in names():
        try:
            if backend_class(name).opt_in:
                continue
        except BackendUnavailable:
            pass
        chosen.append(name)
    return chosen


def builtin_names() -> list[str]:
    return list(builtin())


def backend_class(name: str) -> type[Backend]:
    """The class of backend `name`; a precision variant ("onnx@int8", exporting.precision) is its backend's class."""

    name = split_variant(name)[0]
    table = registered()
    if name not in table:
        raise BackendUnavailable(f"Backend '{name}' | unknown, expected one of {', '.join(table)}")
    module_name, _, attr = table[name].partition(":")
    if name in _BROKEN and table[name] == f"{BUILTIN_PACKAGE}.{name}:BACKEND":
        raise BackendUnavailable(f"Backend '{name}' | its module failed to import: {_BROKEN[name]}")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"Backend '{name}' | cannot load {table[name]}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendUnavailable(f"Backend '{name}' | {table[name]} is not a multiexport Backend class")
    return cls


def get_backend(name: str) -> Backend:
    """An instance of the backend registered as `name`."""
    return backend_class(name)()


def display(name: str) -> dict[str, str]:
    """What reports show for a backend: its summary and chart colour (recorded in results.json)."""
    try:
        cls = backend_class(name)
    except BackendUnavailable:
        return {"summary": "", "color": "#7f7f7f"}
    return {"summary": cls.summary, "color": cls.color}


def describe_all() -> str:
    """One line per backend for help texts: `xla (XLA/PJRT: ...), savedmodel (...)`."""
    parts = []
    for name in names():
        try:
            parts.append(f"{name} ({backend_class(name).summary})" if backend_class(name).summary else name)
        except BackendUnavailable:
            parts.append(name)
    return ", ".join(parts)
