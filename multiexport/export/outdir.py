"""Output directories multiexport may write: claimed under a lock, staged, and swapped in whole.

An existing directory is replaced only when it is a multiexport artifact whose every file the export
wrote (its manifest's inventory, and the outputs its printed native command writes): a directory that merely contains a file named manifest.json, or an
artifact a user added files to, is refused and left untouched. Two exports into one directory at once
are refused (a lock held for the whole export), and the new artifact appears only once it is complete.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import ArtifactError
from ..files import current_umask
from .manifest import MANIFEST_NAME, Manifest

_DISK_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "the file system is read-only",
                errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EDQUOT: "disk quota exceeded",
                # A path through a file ("out.txt/dir"), or a name the file system refuses: the user's path.
                errno.EEXIST: "a file is in the way", errno.ENOTDIR: "a part of the path is a file, not a directory",
                errno.EISDIR: "it is a directory", errno.ENAMETOOLONG: "the name is too long"}


def check_replaceable(out_dir: Path) -> None:
    """Refuse unless `out_dir` is new, empty, or an artifact made only of the files its export wrote."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise ArtifactError(f"Artifact '{out_dir}' | is a file or a link, expected a new or empty directory, or an "
                            "artifact to replace")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    try:
        manifest = Manifest.read(out_dir, check_files=False)
    except ArtifactError as exc:
        raise ArtifactError(f"Artifact '{out_dir}' | exists and is not a multiexport artifact ({exc}); nothing was "
                            "changed: choose a new or empty directory") from None
    allowed = set(manifest.inventory) | {MANIFEST_NAME}
    if manifest.native:  # what the printed native command writes in the artifact (outputs/output{j}.npy)
        from ..native.section import OUTPUT_DIR, output_file

        allowed |= {f"{OUTPUT_DIR}/{output_file(j)}" for j in range(len(manifest.outputs))}
    foreign = []
    for root, dirs, files in os.walk(out_dir, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = os.path.relpath(os.path.join(root, name), out_dir).replace(os.sep, "/")
            if rel not in allowed or os.path.islink(os.path.join(root, name)):
                foreign.append(rel)
    if foreign:
        shown = ", ".join(sorted(foreign)[:5]) + (" ..." if len(foreign) > 5 else "")
        raise ArtifactError(f"Artifact '{out_dir}' | holds files its export did not write ({shown}); nothing was "
                            "changed: move them away or choose another directory")


@contextlib.contextmanager
def claimed(out_dir: Path) -> Iterator[Path]:
    """A staging directory beside `out_dir`, swapped into place when the block succeeds.

    The whole export holds a lock on `out_dir`'s name; a failure leaves `out_dir` as it was.
    """
    out_dir = Path(out_dir)
    check_replaceable(out_dir)
    parent = out_dir.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise disk_error(exc, parent) from exc
    with _lock(parent / f".{out_dir.name}.multiexport-lock", out_dir):
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=parent))
        except OSError as exc:
            raise disk_error(exc, parent) from exc
        try:
            try:
                os.chmod(staging, 0o777 & ~current_umask())
                # A full or read-only file system is found now, before minutes of export, not when the artifact
                # is written (a full tmpfs still creates directories and empty files: write real bytes).
                probe = staging / ".write-check"
                probe.write_bytes(b"\0" * 4096)
                probe.unlink()
            except OSError as exc:
                raise disk_error(exc, parent) from exc
            yield staging
            check_replaceable(out_dir)  # still ours to replace after the (long) export
            _swap_in(staging, out_dir)
        except OSError as exc:
            raise disk_error(exc, out_dir) from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def disk_error(exc: OSError, where: Path | str) -> Exception:
    """A file-system failure (full, read-only, no permission, a file in the path) as one line naming the
    place; others as is."""
    why = _DISK_ERRORS.get(exc.errno or 0)
    if why is None:
        return exc
    return ArtifactError(f"Output '{where}' | cannot be written: {why} ({exc.strerror}), expected a writable "
                         "directory with room for the artifact")


def path_error(exc: OSError) -> Exception:
    """An OSError that reached the command line, as one line when it is about the user's path (see
    _DISK_ERRORS) and names it; anything else stays as it is (a bug)."""
    why = _DISK_ERRORS.get(exc.errno or 0)
    if why is None or not exc.filename:
        return exc
    return ArtifactError(f"Path '{exc.filename}' | cannot be used: {why} ({exc.strerror}), expected a path "
                         "multiexport can read or write")


def _swap_in(staging: Path, out_dir: Path) -> None:
    """Move a finished staging directory into place; the old artifact goes only once the new one is whole."""
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(staging, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out_dir)


@contextlib.contextmanager
def _lock(path: Path, out_dir: Path) -> Iterator[None]:
    """An exclusive lock file, removed on release; a second writer is refused rather than made to wait."""
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise disk_error(exc, path.parent) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ArtifactError(f"Artifact '{out_dir}' | another multiexport export is writing it now, expected one "
                                "writer at a time: wait for it, or export elsewhere") from None
        try:  # the holder before us may have removed the file after we opened it: lock the one at `path`
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
