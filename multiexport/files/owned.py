"""Which files multiexport may overwrite or delete: only those it wrote itself, proven by their bytes.

One rule for every file multiexport writes. A file it writes at a path the user names (report.md,
report.html, a JUnit XML, a screenshot, `run/native --out` .npz) ends with an ownership stamp, a comment
holding the sha256 of everything before it (an .npz: its zip archive comment): a file at that path without
a valid stamp (the user's own, or one of ours the user edited since) is refused, never replaced.
An artifact's files are proven by its manifest's inventory: each file's size and sha256, recorded when the
export wrote it; a name alone proves nothing (a forged inventory could list any file).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Mapping

from ..errors import ArtifactError
from .atomic import write_text_atomic

STAMP_PREFIX = b"\n<!-- written by multiexport; sha256="  # hashed: everything before this
STAMP_SUFFIX = b" -->\n"
ZIP_STAMP_PREFIX = b"written by multiexport; sha256="  # an .npz's archive comment
_ZIP_STAMP_LEN = len(ZIP_STAMP_PREFIX) + 64
_HASH_CHARS = frozenset(b"0123456789abcdef")
_MAX_STAMPED_BYTES = 256 << 20  # a report larger than this is not one multiexport wrote
_CHUNK = 1 << 20


def stamped(text: str) -> str:
    """`text` with its ownership stamp appended (an HTML comment: invisible in Markdown, HTML and XML)."""
    return stamped_bytes(text.encode("utf-8")).decode("utf-8")


def stamped_bytes(data: bytes) -> bytes:
    """`data` with the stamp appended, for a format whose readers ignore trailing bytes (a PNG after IEND)."""
    return data + STAMP_PREFIX + hashlib.sha256(data).hexdigest().encode() + STAMP_SUFFIX


def zip_placeholder() -> bytes:
    """The archive comment to give a zip (an .npz) before `seal_zip`: a zip's comment is its last bytes."""
    return ZIP_STAMP_PREFIX + b"0" * 64


def seal_zip(data: bytes) -> bytes:
    """A zip written with `zip_placeholder()` as its comment, the comment now holding the sha256 of every
    byte before it (readers see an archive comment; the members are unchanged)."""
    if not data.endswith(zip_placeholder()):
        raise ValueError("seal_zip | the archive's comment is not the placeholder")
    body = data[:-64]
    return body + hashlib.sha256(data[:-_ZIP_STAMP_LEN]).hexdigest().encode()


def unstamped(text: str) -> str:
    """`text` without a trailing ownership stamp (what the report says, for comparing two renderings)."""
    data = text.encode("utf-8")
    body = _body_if_stamped(data)
    return text if body is None else body.decode("utf-8")


def is_stamped(path: Path) -> bool:
    """Whether `path` is a regular file (not a link) whose trailing stamp (or, for an .npz, archive comment)
    matches its bytes."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return False
        with open(path, "rb") as fh:
            if info.st_size >= _ZIP_STAMP_LEN:
                fh.seek(info.st_size - _ZIP_STAMP_LEN)
                tail = fh.read(_ZIP_STAMP_LEN)
                if tail.startswith(ZIP_STAMP_PREFIX):  # hashed as it is read: an .npz may be large
                    fh.seek(0)
                    digest, left = hashlib.sha256(), info.st_size - _ZIP_STAMP_LEN
                    while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
                        digest.update(chunk)
                        left -= len(chunk)
                    return digest.hexdigest().encode() == tail[len(ZIP_STAMP_PREFIX):]
            if info.st_size > _MAX_STAMPED_BYTES:
                return False
            fh.seek(0)
            data = fh.read(_MAX_STAMPED_BYTES + 1)
    except OSError:
        return False
    return _body_if_stamped(data) is not None


def check_overwritable(path: Path, what: str) -> None:
    """Refuse to write `path` unless it is new or a file multiexport wrote and nobody edited since (its stamp).

    what: the option or role that named it, for the message ("Option '--out'", "Report").
    """
    path = Path(path)
    if not os.path.lexists(path) or is_stamped(path):
        return
    kind = "a link" if path.is_symlink() else "a directory" if path.is_dir() else "a file"
    raise ArtifactError(f"{what} '{path}' | exists and is {kind} multiexport did not write (or one it wrote, edited "
                        "since); nothing was changed: move it away or choose another place")


def sha256_file(path: Path) -> str:
    """The sha256 of a regular file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_owned_text(path: Path, text: str, what: str) -> None:
    """Write `text` with its stamp to `path`, atomically, after `check_overwritable` (see the module docstring)."""

    check_overwritable(path, what)
    write_text_atomic(path, stamped(text))


def unproven_files(directory: Path, sizes: Mapping[str, int], hashes: Mapping[str, str],
                   also_ours: frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(foreign, edited) under `directory`, walked without following links: foreign are links, non-regular
    files and files the inventory does not list (or lists without a hash); edited are listed files whose
    size or sha256 is not what the inventory records. `also_ours`: names accepted as regular files without
    a record (the manifest itself). Empty lists: multiexport wrote every file there and nobody changed one."""
    foreign, listed = [], []
    for root, dirs, files in os.walk(directory, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            info = os.lstat(full)
            if not stat.S_ISREG(info.st_mode):
                foreign.append(rel)
            elif rel in also_ours:
                continue
            elif rel not in sizes or not isinstance(hashes.get(rel), str):
                foreign.append(rel)
            else:
                listed.append((rel, info.st_size))
    if foreign:  # no need to read every byte of an artifact that is refused anyway
        return sorted(foreign), []
    edited = [rel for rel, size in listed if size != sizes[rel] or sha256_file(directory / rel) != hashes[rel]]
    return [], sorted(edited)


def _body_if_stamped(data: bytes) -> bytes | None:
    if not data.endswith(STAMP_SUFFIX):
        return None
    start = data.rfind(STAMP_PREFIX)
    if start < 0:
        return None
    digest = data[start + len(STAMP_PREFIX):-len(STAMP_SUFFIX)]
    if len(digest) != 64 or not set(digest) <= _HASH_CHARS:
        return None
    body = data[:start]
    return body if hashlib.sha256(body).hexdigest().encode() == digest else None
