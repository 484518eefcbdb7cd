"""Check a named feed against a manifest before any runtime sees it.

Every mismatch names the leaf and says what was expected; symbolic dimensions must bind to one
value across all leaves. Leaves the format dropped may be omitted: they are filled with zeros,
since the module never reads them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np

from ..dtypes import parse_dtype
from ..errors import InputError, leaf_message
from ..leaves.signature import shape_text


class FedLeaf(Protocol):
    """What `check_feed` reads of an input leaf: a manifest's `LeafBinding`, or a signature's leaf as `_SignatureLeaf`."""

    @property
    def name(self) -> str: ...
    @property
    def alias(self) -> str | None: ...
    @property
    def shape(self) -> Sequence[int | str]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def used(self) -> bool: ...


@dataclass(frozen=True)
class _SignatureLeaf:
    """A signature's input leaf as `check_feed` reads it (every leaf taken: no artifact has dropped one yet)."""

    name: str
    alias: str | None
    shape: Sequence[int | str]
    dtype: str
    used: bool = True

_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_feed(
    inputs: Sequence[FedLeaf], feed: Mapping[str, object]
) -> tuple[list[np.ndarray], dict[str, int]]:
    """Arrays in manifest order, and the value bound to each symbolic dimension.

    Raises InputError for an unknown name, a missing used leaf, a wrong dtype or a wrong shape.
    """
    if not isinstance(feed, Mapping):
        raise InputError(f"Feed | got {type(feed).__name__}, expected a mapping of leaf name -> array")
    known = {leaf.name: leaf for leaf in inputs}
    unknown = [k for k in feed if k not in known]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(known), n=1)
        by_alias = [leaf.name for leaf in inputs if leaf.alias == key]
        hint = f"; did you mean '{(by_alias or close)[0]}'?" if (by_alias or close) else ""
        raise InputError(
            leaf_message("Input", key, "a name the artifact does not have", f"one of {', '.join(known)}") + hint
        )
    missing = [leaf.name for leaf in inputs if leaf.used and leaf.name not in feed]
    if missing:
        raise InputError(leaf_message("Input", missing[0], "nothing", "an array (the module reads this leaf)")
                         + (f"; also missing: {', '.join(missing[1:])}" if len(missing) > 1 else ""))

    bound: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    arrays: list[np.ndarray | None] = []
    for leaf in inputs:
        if leaf.name not in feed:
            arrays.append(None)
            continue
        value = np.asarray(feed[leaf.name])
        expected = parse_dtype(leaf.dtype)
        if value.dtype.byteorder not in ("=", "|") and value.dtype.newbyteorder("=") == expected:
            value = value.astype(expected)  # the same numbers in the other byte order (a big-endian file)
        if value.dtype != expected:
            raise InputError(leaf_message("Input", leaf.name, dtype_text(value.dtype), expected.name))
        if value.ndim != len(leaf.shape):
            raise InputError(
                leaf_message("Input", leaf.name, f"shape {shape_text(value.shape)}", f"shape {shape_text(leaf.shape)}")
            )
        for got, want in zip(value.shape, leaf.shape):
            if isinstance(want, int):
                if got != want:
                    raise InputError(
                        leaf_message("Input", leaf.name, f"shape {shape_text(value.shape)}", f"shape {shape_text(leaf.shape)}")
                    )
            elif _SYMBOL.match(want):
                if want in bound and bound[want] != got:
                    raise InputError(
                        leaf_message(
                            "Input",
                            leaf.name,
                            f"{want}={got} in shape {shape_text(value.shape)}",
                            f"{want}={bound[want]} as bound by '{bound_by[want]}'",
                        )
                    )
                if got < 1:
                    raise InputError(leaf_message("Input", leaf.name, f"{want}={got}", f"{want} >= 1"))
                bound.setdefault(want, got)
                bound_by.setdefault(want, leaf.name)
        arrays.append(value)

    # Dropped leaves the caller left out: zeros of the right shape, never read by the module.
    filled = []
    for leaf, given in zip(inputs, arrays):
        if given is None:
            shape = tuple(d if isinstance(d, int) else bound.get(d, 1) for d in leaf.shape)
            given = np.zeros(shape, parse_dtype(leaf.dtype))
        filled.append(given)
    return filled, bound


def check_signature_feed(sig, feed: Mapping[str, object]) -> tuple[list[np.ndarray], dict[str, int]]:
    """`check_feed` against a signature's input leaves (before any artifact exists): arrays in leaf order and
    the value bound to each symbolic dimension."""
    leaves = [_SignatureLeaf(leaf.name, leaf.alias, list(leaf.shape), leaf.dtype) for leaf in sig.inputs]
    return check_feed(leaves, feed)


def dtype_text(dtype: np.dtype) -> str:
    """A dtype's name, with its byte order when it is not this machine's ("big-endian int32")."""
    if dtype.byteorder in ("=", "|"):  # numpy writes this machine's own order as "="
        return dtype.name
    return f"{'big' if dtype.byteorder == '>' else 'little'}-endian {dtype.name}"
