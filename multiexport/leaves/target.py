"""What to export: a function with example arguments, and how to find one from a CLI string.

TARGET strings are `path/to/file.py:attr` or `package.module:attr` (attr defaults to `target`).
`attr` is a `Target` or a zero-argument callable returning one. Every user mistake becomes a
`TargetError` naming what was wrong.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import TargetError

DEFAULT_TARGET = "multiexport.examples:seed"  # what an empty TARGET means
DEFAULT_ATTR = "target"


@dataclass(frozen=True)
class Target:
    """A JAX function plus example arguments: everything multiexport needs to export it.

    fn: the function; its arguments may be dataclasses, dicts, lists, NamedTuples of arrays.
    args, kwargs: example arguments; arrays give shapes, dtypes and example values
        (`jax.ShapeDtypeStruct` leaves give shapes and dtypes only).
    name: used in artifact and report names; defaults to the function's name.
    polymorphic_shapes: leaf name or glob pattern -> shape spec such as `"b, 128"` (jax.export syntax,
        `...` keeps the remaining example dimensions).
    symbolic_batch: a dimension name (or True for `"b"`): the leading dimension of every input leaf
        that matches `batch_leaves` and has one becomes that symbol.
    batch_leaves: glob patterns of the leaves `symbolic_batch` applies to (default: all).
    """

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""
    polymorphic_shapes: Mapping[str, str] = field(default_factory=dict)
    symbolic_batch: str | bool = False
    batch_leaves: Sequence[str] = ("*",)
    description: str = ""

    def __post_init__(self):
        if not callable(self.fn):
            raise TargetError(f"Target | got fn of type {type(self.fn).__name__}, expected a callable")
        if not isinstance(self.args, tuple):
            object.__setattr__(self, "args", tuple(self.args) if isinstance(self.args, list) else (self.args,))
        if not isinstance(self.kwargs, Mapping):
            raise TargetError(f"Target | got kwargs of type {type(self.kwargs).__name__}, expected a mapping")
        if isinstance(self.batch_leaves, str):
            object.__setattr__(self, "batch_leaves", (self.batch_leaves,))
        if not self.name:
            object.__setattr__(self, "name", str(getattr(self.fn, "__name__", "fn")).strip("<>") or "fn")
        if not isinstance(self.name, str):
            raise TargetError(f"Target | got name of type {type(self.name).__name__}, expected a string")
        if not isinstance(self.polymorphic_shapes, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.polymorphic_shapes.items()):
            raise TargetError(f"Target '{self.name}' | got polymorphic_shapes {self.polymorphic_shapes!r}, expected "
                              "a mapping of leaf pattern to shape spec strings")
        if not isinstance(self.symbolic_batch, (str, bool)):
            raise TargetError(f"Target '{self.name}' | got symbolic_batch {self.symbolic_batch!r}, expected a "
                              "dimension name or True")
        if isinstance(self.symbolic_batch, str) and self.symbolic_batch and not self.symbolic_batch.isidentifier():
            raise TargetError(f"Target '{self.name}' | got symbolic_batch {self.symbolic_batch!r}, expected an "
                              "identifier such as 'b'")
        if not all(isinstance(p, str) for p in self.batch_leaves):
            raise TargetError(f"Target '{self.name}' | got batch_leaves {self.batch_leaves!r}, expected glob "
                              "pattern strings")

    @property
    def batch_symbol(self) -> str | None:
        """The symbolic batch dimension's name, or None when the batch is static."""
        if self.symbolic_batch is True:
            return "b"
        return self.symbolic_batch or None

    def replace(self, **changes: Any) -> "Target":
        return dataclasses.replace(self, **changes)


def top_level_packages() -> frozenset[str]:
    """The top-level packages this process has imported (a snapshot: `after - before` around a target's build is
    what the build imported, keras-hub's TensorFlow say, for the compare's export plan)."""
    return frozenset(name.partition(".")[0] for name in list(sys.modules))


def load_target(spec: str | None) -> Target:
    """Resolve a TARGET string (or None for the built-in seed example) to a `Target`."""
    if spec is None or spec == "":
        spec = DEFAULT_TARGET  # resolved like any TARGET: the example zoo sits above this layer
    module_part, _, attr = spec.rpartition(":") if ":" in spec else (spec, "", DEFAULT_ATTR)
    if not module_part:
        raise TargetError(f"Target '{spec}' | got an empty module, expected path/to/file.py:attr or package.module:attr")
    attr = attr or DEFAULT_ATTR
    module = _import_module(spec, module_part)
    if not hasattr(module, attr):
        public = sorted(n for n, v in vars(module).items() if isinstance(v, Target) or _is_factory(v))
        hint = f"; candidates: {', '.join(public)}" if public else ""
        raise TargetError(f"Target '{spec}' | module has no attribute '{attr}'{hint}")
    return _coerce_target(spec, getattr(module, attr))


def looks_like_file(module_part: str) -> bool:
    """Whether a TARGET's module part names a file (path/to/file.py) rather than an importable module."""
    return module_part.endswith(".py") or "/" in module_part or "\\" in module_part


def _import_module(spec: str, module_part: str):
    if looks_like_file(module_part):
        path = Path(module_part).expanduser()
        if not path.is_file():
            raise TargetError(f"Target '{spec}' | file '{path}' does not exist, expected a Python file")
        mod_name = f"_multiexport_target_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
        file_spec = importlib.util.spec_from_file_location(mod_name, path)
        if file_spec is None or file_spec.loader is None:
            raise TargetError(f"Target '{spec}' | cannot import '{path}' as a Python module")
        module = importlib.util.module_from_spec(file_spec)
        # Sibling imports in the user's file should work as they do when they run it as a script.
        sys.path.insert(0, str(path.resolve().parent))
        sys.modules[mod_name] = module
        try:
            file_spec.loader.exec_module(module)
        except SystemExit as exc:  # the file is a script: it must not end the process that imports it
            sys.modules.pop(mod_name, None)
            raise TargetError(f"Target '{spec}' | importing '{path}' called sys.exit({exc.code!r}), expected a "
                              "module that defines a Target (guard script code with if __name__ == '__main__')") from None
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise TargetError(f"Target '{spec}' | importing '{path}' failed: {type(exc).__name__}: {_first_line(exc)}") from exc
        return module
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        top = module_part.split(".")[0]
        cwd = os.getcwd()
        # `python -m multiexport` imports from the working directory, the console script does not: a module
        # the user can see where they stand must resolve the same way from both (appended: never shadows).
        here = (Path(cwd) / top).is_dir() or (Path(cwd) / f"{top}.py").is_file()
        if exc.name == top and cwd not in sys.path and here:
            sys.path.append(cwd)
            try:
                return importlib.import_module(module_part)
            except ModuleNotFoundError as again:
                exc = again
        raise TargetError(f"Target '{spec}' | module '{module_part}' not found ({exc})") from exc
    except SystemExit as exc:
        raise TargetError(f"Target '{spec}' | importing '{module_part}' called sys.exit({exc.code!r}), expected a "
                          "module that defines a Target") from None
    except Exception as exc:
        raise TargetError(f"Target '{spec}' | importing '{module_part}' failed: {type(exc).__name__}: {exc}") from exc


def _is_factory(value: Any) -> bool:
    if not callable(value) or isinstance(value, type):
        return False
    try:
        params = inspect.signature(value).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def _coerce_target(spec: str, value: Any) -> Target:
    if isinstance(value, Target):
        return value
    if _is_factory(value):
        try:
            made = value()
        except SystemExit as exc:
            raise TargetError(f"Target '{spec}' | the factory called sys.exit({exc.code!r}), expected it to return "
                              "a multiexport.Target") from None
        except Exception as exc:
            raise TargetError(f"Target '{spec}' | calling the factory failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(made, Target):
            return made
        raise TargetError(f"Target '{spec}' | factory returned {type(made).__name__}, expected a multiexport.Target")
    got = type(value).__name__
    if isinstance(value, type):
        got = f"class {value.__name__}"
    elif callable(value):
        got = f"a function that needs arguments ({getattr(value, '__name__', type(value).__name__)})"
    raise TargetError(f"Target '{spec}' | got {got}, expected a multiexport.Target or a zero-argument callable returning one")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""
