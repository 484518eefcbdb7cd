"""Bounded reads of files someone else may have made: regular files only, a size cap, a JSON depth cap.

A results.json, a manifest or an .npz handed to multiexport can be anything: `/dev/zero` (endless), a FIFO
(blocks forever), a symlink to either, a 100 000-deep JSON array (RecursionError deep inside a report), a
1 MB deflate stream that inflates to 1 GiB. Every reader of user or artifact files goes through here, so
each of those is one typed error naming the file and what was expected, before anything large is read.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from ..errors import MultiexportError

JSON_DEPTH = 64  # multiexport's own files nest at most ~10 deep (results.json: backends.x.bench.sizes[0]...)
# An inflated .npz member larger than this must also be at most INFLATE_RATIO times its compressed bytes:
# real arrays deflate 1-10x, all-zero ones up to ~1000x (a deflate bomb's ratio), so only big bombs are refused.
INFLATE_FREE = 64 << 20
INFLATE_RATIO = 200


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike, what: str, limit: int, error: type[MultiexportError],
                 expected: str, follow: bool = True) -> int:
    """A read-only descriptor of `path`, which must be a regular file (symlinks followed unless not `follow`)
    of at most `limit` bytes; else `error` "WHAT 'PATH' | is a FIFO (named pipe), EXPECTED".

    O_NONBLOCK: opening a FIFO with no writer would block forever; fstat of the descriptor (not a stat of the
    name) is what is then read, so the file cannot be swapped in between.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
                     | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        raise error(f"{what} '{path}' | does not exist, {expected}") from None
    except IsADirectoryError:
        raise error(f"{what} '{path}' | is a directory, {expected}") from None
    except OSError as exc:
        if not follow and exc.errno == errno.ELOOP:
            raise error(f"{what} '{path}' | is a symbolic link, {expected}; it was not followed") from None
        raise error(f"{what} '{path}' | cannot be opened ({exc.strerror or exc}), {expected}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} '{path}' | is {_kind(info.st_mode)}, {expected}")
        if info.st_size > limit:
            raise error(f"{what} '{path}' | is {info.st_size} bytes, more than the {limit} bytes such a file "
                        f"holds; {expected}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike, what: str, limit: int, error: type[MultiexportError],
               expected: str, follow: bool = True) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them (a file that grows past it is refused)."""
    fd = open_regular(path, what, limit, error, expected, follow)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what} '{path}' | grew past {limit} bytes while being read, {expected}")
    return data


class TooDeep(ValueError):
    """JSON nested past the depth limit."""


def loads(data: bytes | str, depth: int = JSON_DEPTH) -> Any:
    """`data` parsed as JSON nested at most `depth` deep, else ValueError saying which limit (for callers
    that word the error themselves)."""
    try:
        value = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {depth} levels") from None
    if nesting(value, depth) > depth:
        raise TooDeep(f"JSON nested deeper than {depth} levels")
    return value


def parse_json(data: bytes | str, where: str, error: type[MultiexportError], expected: str,
               depth: int = JSON_DEPTH) -> Any:
    """`data` parsed as JSON nested at most `depth` deep; `where` starts the message ("Results 'r.json'")."""
    try:
        return loads(data, depth)
    except TooDeep as exc:
        raise error(f"{where} | is {exc}, {expected}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where} | unreadable JSON ({type(exc).__name__}: {exc}), {expected}") from exc


def read_json(path: str | os.PathLike, what: str, limit: int, error: type[MultiexportError], expected: str,
              depth: int = JSON_DEPTH, follow: bool = True) -> Any:
    """The JSON document in the regular file `path` (at most `limit` bytes, `depth` levels)."""
    return parse_json(read_bytes(path, what, limit, error, expected, follow), f"{what} '{path}'", error, expected,
                      depth)


def nesting(value: Any, stop: int) -> int:
    """How deep `value` (parsed JSON) nests, counted without recursion; stops counting past `stop`."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > stop:
                return deepest
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_inflation(where: str, member: str, inflated: int, compressed: int, stored: bool, archive_bytes: int,
                    error: type[MultiexportError], expected: str) -> None:
    """Refuse a zip member whose declared size is a lie or a bomb, from its header alone (nothing inflated yet).

    stored: the member is not compressed, so it cannot hold more bytes than the archive itself.
    """
    if inflated < 0 or compressed < 0:
        raise error(f"{where} | member '{member}' declares a negative size, {expected}")
    if stored and inflated > archive_bytes:
        raise error(f"{where} | member '{member}' claims {inflated} bytes in a {archive_bytes}-byte archive, {expected}")
    if inflated > INFLATE_FREE and inflated > INFLATE_RATIO * max(compressed, 1):
        raise error(f"{where} | member '{member}' would inflate to {inflated} bytes from {compressed} "
                    f"({inflated // max(compressed, 1)}:1, a deflate bomb?); members past {INFLATE_FREE >> 20} MiB "
                    f"may inflate at most {INFLATE_RATIO}:1, {expected}")

