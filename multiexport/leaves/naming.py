"""Leaf names: canonical dotted names from pytree key paths, unique and reversible, and sanitized aliases.

The canonical name is what JAX itself prints as provenance (`op_name="foo.baz"`): the parameter name,
then each key-path entry, joined with `.`. A key that would make the name ambiguous (it contains `.`,
a quote, a backslash, whitespace or a control character, is empty, or is not a plain string/int) is
written as a JSON string (`d."a.b"`), so `{"a.b": x}` and `{"a": {"b": y}}` get different names and
`split_name` gives back the components. The alias is the name restricted to `[A-Za-z0-9_]`, starting
with a letter, valid as a TF signature key and a Python identifier; collisions are resolved
deterministically and reported. Aliases are never used as file names by multiexport.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

SEPARATOR = "."
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_PLAIN = re.compile(r"[^.\"'\\\s\x00-\x1f\x7f]+")
_MAX_ALIAS = 120  # keeps aliases usable as identifiers and keys in every consumer


def key_entry_value(entry: Any) -> Any:
    """The key of one pytree key-path entry (`DictKey('x')` -> 'x', `SequenceKey(0)` -> 0, `GetAttrKey`)."""
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return str(entry)


def component(key: Any) -> str:
    """One name component: plain text as is, anything that could be misread as a JSON string."""
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        return json.dumps(repr(key), ensure_ascii=False)
    text = str(key)
    if isinstance(key, str) and (not _PLAIN.fullmatch(text) or text.startswith('"')):
        return json.dumps(text, ensure_ascii=False)
    return text


def join_name(prefix: str, path: Sequence[Any]) -> str:
    """Canonical name of a leaf: `prefix` followed by each key-path entry, joined with dots."""
    parts = [component(prefix)] if prefix else []
    return SEPARATOR.join(parts + [component(key_entry_value(e)) for e in path])


def split_name(name: str) -> list[str]:
    """The components of a canonical name, quoted ones unquoted: the inverse of `join_name`'s joining."""
    parts, i = [], 0
    decoder = json.JSONDecoder()
    while i <= len(name):
        if name.startswith('"', i):
            value, end = decoder.raw_decode(name, i)
            parts.append(value)
            i = end
        else:
            end = name.find(SEPARATOR, i)
            end = len(name) if end < 0 else end
            parts.append(name[i:end])
            i = end
        if i < len(name) and name[i] != SEPARATOR:
            raise ValueError(f"name {name!r}: expected '{SEPARATOR}' at position {i}")
        i += 1
    return parts


def base_alias(name: str) -> str:
    """Sanitize one canonical name: unsafe characters become `_`, a leading non-letter gets `v`."""
    alias = _UNSAFE.sub("_", name)
    if not alias or not alias[0].isalpha() or not alias[0].isascii():
        alias = "v" + alias
    if len(alias) > _MAX_ALIAS:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        alias = f"{alias[: _MAX_ALIAS - 9]}_{digest}"
    return alias


@dataclass(frozen=True)
class AliasCollision:
    """Several canonical names that sanitize to the same alias, and what each got instead.

    base: the alias they all sanitize to.
    names: the canonical names, in leaf order.
    aliases: the alias each one got (one keeps `base`, the others get `_2`, `_3`, ...).
    """

    base: str
    names: tuple[str, ...]
    aliases: tuple[str, ...]

    def describe(self) -> str:
        pairs = ", ".join(f"'{n}' -> {a}" for n, a in zip(self.names, self.aliases))
        return f"names {', '.join(repr(n) for n in self.names)} all sanitize to '{self.base}': {pairs}"


def duplicates(names: Sequence[str]) -> list[str]:
    """Names that occur more than once, in first-seen order."""
    seen, dup = set(), []
    for n in names:
        if n in seen and n not in dup:
            dup.append(n)
        seen.add(n)
    return dup


def assign_aliases(names: Iterable[str]) -> tuple[list[str], list[AliasCollision]]:
    """Give every name a unique alias; uniqueness is case-insensitive (consumers may fold case).

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
