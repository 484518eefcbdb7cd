"""Leaf names: canonical dotted names from pytree key paths, and sanitized unique aliases.

The canonical name is what JAX itself prints as provenance (`op_name="foo.baz"`). The alias is the
same name restricted to `[A-Za-z0-9_]`, starting with a letter, so it is valid as a TF signature key,
a Python identifier and a file name; collisions are resolved deterministically and reported.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_MAX_ALIAS = 120  # keeps aliases usable as file names with an extension on every file system


def key_entry_name(entry: Any) -> str:
    """One pytree key-path entry as a name component (`DictKey('x')` -> `x`, `SequenceKey(0)` -> `0`)."""
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry).strip(".[]'\"")


def join_name(prefix: str, path: Sequence[Any]) -> str:
    """Canonical name of a leaf: `prefix` followed by each key-path entry, joined with dots."""
    parts = [prefix] if prefix else []
    return ".".join(parts + [key_entry_name(e) for e in path])


def base_alias(name: str) -> str:
    """Sanitize one canonical name: unsafe characters become `_`, a leading non-letter gets `v`."""
    alias = _UNSAFE.sub("_", name)
    if not alias or not alias[0].isalpha():
        alias = "v" + alias
    if len(alias) > _MAX_ALIAS:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        alias = f"{alias[: _MAX_ALIAS - 9]}_{digest}"
    return alias


@dataclass(frozen=True)
class AliasCollision:
    """Several canonical names that sanitize to the same alias, and what each got instead."""

    base: str
    names: tuple[str, ...]
    aliases: tuple[str, ...]

    def describe(self) -> str:
        pairs = ", ".join(f"'{n}' -> {a}" for n, a in zip(self.names, self.aliases))
        return f"names {', '.join(repr(n) for n in self.names)} all sanitize to '{self.base}': {pairs}"


def assign_aliases(names: Iterable[str]) -> tuple[list[str], list[AliasCollision]]:
    """Give every name a unique alias; uniqueness is case-insensitive (file systems may be).

    Within a colliding group the name already equal to its alias keeps it, otherwise the first in
    order does; the others get `_2`, `_3`, ... skipping any alias already taken. Deterministic for a
    given ordered list of names.
    """
    names = list(names)
    bases = [base_alias(n) for n in names]
    groups: dict[str, list[int]] = {}
    for i, b in enumerate(bases):
        groups.setdefault(b.lower(), []).append(i)
    taken = {b.lower() for b in bases}
    aliases = list(bases)
    collisions = []
    for members in groups.values():
        if len(members) == 1:
            continue
        keeper = next((i for i in members if names[i] == bases[i]), members[0])
        suffix = 2
        for i in members:
            if i == keeper:
                continue
            while f"{bases[i]}_{suffix}".lower() in taken:
                suffix += 1
            aliases[i] = f"{bases[i]}_{suffix}"
            taken.add(aliases[i].lower())
            suffix += 1
        collisions.append(
            AliasCollision(
                base=bases[members[0]],
                names=tuple(names[i] for i in members),
                aliases=tuple(aliases[i] for i in members),
            )
        )
    return aliases, collisions
