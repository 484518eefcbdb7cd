"""Paths under a directory multiexport keeps (a sweep's --out), never followed through a symbolic link.

A sweep directory is read, written and cleaned across runs (`--resume`, `--merge`, `history --add`), and
anyone who could write into it may have replaced `rows/` or `rows/NAME` with a link: followed, a resume
would delete a directory elsewhere and write a compare's output there, and a merge would copy results from
wherever the link points. The directory the user named is theirs to make a link (`sweeps/last`); every
component below it is checked with lstat (a link, or a FIFO where a directory belongs, is refused), and
files are opened with O_NOFOLLOW, so nothing under it is reached through a link.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from ..errors import MultiexportError, UsageError


class LinkInside(UsageError):
    """A component under a kept directory is a symbolic link (or not what belongs there)."""


def under(root: Path, relative: str, what: str, error: type[MultiexportError] = LinkInside) -> Path:
    """`root / relative`, refused (`error`, one line) when any existing component below `root` is a link,
    or a component that must be a directory is something else. Components that do not exist yet are fine
    (they are about to be made, by us, with no link in them).

    what: how the message names `root` ("Sweep 'out'").
    """
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("", ".", "..") or "/" in p or "\x00" in p for p in parts) or relative.startswith("/"):
        raise error(f"{what} | path {relative!r} is not a plain relative path, expected one inside it")
    path = Path(root)
    for i, part in enumerate(parts):
        path = path / part
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return Path(root).joinpath(*parts)
        except OSError as exc:
            raise error(f"{what} | {'/'.join(parts[:i + 1])} cannot be examined ({exc.strerror or exc}), expected "
                        "a path multiexport made") from None
        if stat.S_ISLNK(info.st_mode):
            raise error(f"{what} | {'/'.join(parts[:i + 1])} is a symbolic link (to {_target(path)!r}), expected "
                        "the sweep's own file or directory; nothing under it is followed through a link, nothing "
                        "was changed")
        if i < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            raise error(f"{what} | {'/'.join(parts[:i + 1])} is not a directory, expected the sweep's own "
                        "directory; nothing was changed")
    return Path(root).joinpath(*parts)


def make_dirs(root: Path, relative: str, what: str) -> Path:
    """`root / relative` as a directory, made where missing, every component checked by `under` first and
    each made with mkdir (which never follows a link at its last component)."""
    os.makedirs(root, exist_ok=True)  # the directory the user named (a link to it is theirs to make)
    path = Path(root)
    for part in PurePosixPath(relative).parts:
        path = path / part
        under(root, os.path.relpath(path, root), what)
        try:
            os.mkdir(path)
        except FileExistsError:
            under(root, os.path.relpath(path, root), what)  # raced in: checked again
    return path


def remove_tree(root: Path, relative: str, what: str) -> None:
    """Remove `root / relative` (a directory of ours, or a link or file there: only the entry itself), after
    checking no component above it is a link. `shutil.rmtree` walks by descriptors, never through a link."""
    path = Path(root) / relative
    parent = os.path.dirname(relative)
    if parent:
        under(root, parent, what)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def open_new_file(root: Path, relative: str, what: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor of `root / relative` opened with `flags` | O_NOFOLLOW | O_CLOEXEC, every component
    above it checked by `under` (its last component cannot be a link: O_NOFOLLOW); a link there is refused
    in one line, not followed."""
    path = under(root, relative, what)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkInside(f"{what} | {relative} is a symbolic link, expected the sweep's own file; nothing was "
                             "followed through it") from None
        raise


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
