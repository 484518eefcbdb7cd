"""Typed results to JSON and back: one converter for every results dataclass, strict on the way in.

`to_data` writes a dataclass as JSON-ready data (non-finite floats as "inf"/"-inf"/"nan", enums by
value). `from_data` builds the dataclass back from parsed JSON, checking every field against its type
hint, so a results.json with a wrong type anywhere is one InputError naming the field's path, never a
KeyError deep inside a report.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from enum import Enum
from typing import Any

from ..errors import InputError

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "Infinity": math.inf, "-Infinity": -math.inf,
              "NaN": math.nan}


def to_data(obj: Any) -> Any:
    """A dataclass (or list/dict of them) as JSON-ready data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return to_data(obj.item())
    return obj


def from_data(cls: type, data: Any, where: str, error: type[Exception] = InputError) -> Any:
    """`cls` (a dataclass) from parsed JSON, every field checked; `error` (InputError unless the caller reads
    another kind of input, e.g. an artifact's manifest) naming the path otherwise."""
    try:
        return _convert(cls, data, where)
    except InputError as exc:
        if error is InputError:
            raise
        raise error(str(exc)) from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        expected: list[str] = []  # what each option wanted, where the value is not that option at all
        got = _kind(value)
        deeper: InputError | None = None  # the first option the value is, wrong inside (a list with a bad item)
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except InputError as exc:
                mismatch = getattr(exc, "mismatch", None)
                if mismatch is not None and mismatch[0] == where:  # not this option at all
                    got = mismatch[1] if not expected else got
                    expected += [e for e in mismatch[2] if e not in expected]
                elif deeper is None:
                    deeper = exc
        if deeper is not None:  # the sharper message: which part of it is wrong
            raise deeper
        if type(None) in options:
            expected.append("null")
        raise _mismatch(where, got, *(expected or [str(hint)]))
    if origin is typing.Literal:  # one of fixed values ("any", "position"): the value itself, if it is one
        allowed = typing.get_args(hint)
        if any(value == a and type(value) is type(a) for a in allowed):
            return value
        raise _mismatch(where, _kind(value), *(repr(a) if not isinstance(a, str) else f'"{a}"' for a in allowed))
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _mismatch(where, _kind(value), "a list")
        (item,) = typing.get_args(hint)[:1] or (Any,)
        items = [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise _mismatch(where, _kind(value), "an object")
        _, item = typing.get_args(hint) or (str, Any)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            parse = getattr(hint, "parse", None)
            if parse is not None and isinstance(value, str):
                return parse(value)
            raise _mismatch(where, repr(value), f"one of {', '.join(e.value for e in hint)}") from None
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _mismatch(where, _kind(value), "an object")
        hints = typing.get_type_hints(hint)
        kwargs = {}
        for f in dataclasses.fields(hint):
            if not f.init:
                continue
            if f.name in value:
                kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{where} | has no '{f.name}', expected one")
        # is_dataclass() narrows to "instance or class"; a type hint here is always the class
        built = typing.cast("type[Any]", hint)(**kwargs)
        check = getattr(built, "check_loaded", None)
        if check is not None:  # figures a type cannot rule out (a NaN or negative latency)
            check(where)
        return built
    if hint is float:
        if isinstance(value, str) and value in _NONFINITE:
            return _NONFINITE[value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer such as 10**400: no float holds it
                raise InputError(f"{where} | got an integer of {len(str(abs(value)))} digits, expected a number a "
                                 "float can hold") from None
        raise _mismatch(where, _kind(value), "a number")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _mismatch(where, _kind(value), "an integer")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _mismatch(where, _kind(value), "true", "false")
    if hint is str:
        if isinstance(value, str):
            return value
        raise _mismatch(where, _kind(value), "a string")
    if hint is type(None):
        if value is None:
            return None
        raise _mismatch(where, _kind(value), "null")
    return value


def _mismatch(where: str, got: str, *expected: str) -> InputError:
    """`where | got X, expected Y` (Y: "A", "A or B", "A, B or C"), its parts kept so that a union names
    every option it has in one message ("expected an integer, a string or null")."""
    wanted = expected[0] if len(expected) == 1 else f"{', '.join(expected[:-1])} or {expected[-1]}"
    exc = InputError(f"{where} | got {got}, expected {wanted}")
    exc.mismatch = (where, got, expected)  # type: ignore[attr-defined]
    return exc


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int) and len(str(abs(value))) > 40:
        return f"an integer of {len(str(abs(value)))} digits"
    return f"{type(value).__name__} {str(value)[:40]!r}" if isinstance(value, (int, float, str)) else type(value).__name__
