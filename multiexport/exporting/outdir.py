"""Output directories multiexport may write: claimed under a lock, staged, and swapped in whole.

An existing directory is replaced only when it is a multiexport artifact whose every file the export
wrote, unchanged (each file's size and sha256 as its manifest's inventory records them, and the outputs its
printed native command writes; `files.owned`): a directory that merely contains a file named manifest.json,
an artifact a user added files to or edited a file of, or one whose forged inventory lists a user's file,
is refused and left untouched. Two exports into one directory at once
are refused (a lock held for the whole export), and the new artifact appears only once it is complete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import ArtifactError
from ..files import current_umask
from ..files.lock import LockHeld, NotALockFile, exclusive
from ..files.owned import unproven_files
from .manifest import MANIFEST_NAME, Manifest
from .native_section import OUTPUT_DIR, output_file

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
    if not manifest.inventory_sha256:
        raise ArtifactError(f"Artifact '{out_dir}' | its manifest records no sha256 of its files (exported by an "
                            "earlier multiexport 0.2, or not by multiexport), so nothing proves that the files there "
                            "are the ones its export wrote; nothing was changed: remove it yourself if it is yours, or "
                            "choose another directory")
    also_ours = {MANIFEST_NAME}
    if manifest.native:  # what the printed native command writes in the artifact (outputs/output{j}.npy)

        also_ours |= {f"{OUTPUT_DIR}/{output_file(j)}" for j in range(len(manifest.outputs))}
    also_ours -= set(manifest.inventory)  # a name the inventory lists is proven by its record, never waved through
    foreign, edited = unproven_files(out_dir, manifest.inventory, manifest.inventory_sha256, frozenset(also_ours))
    if foreign:
        shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        raise ArtifactError(f"Artifact '{out_dir}' | holds files its export did not write ({shown}); nothing was "
                            "changed: move them away or choose another directory")
    if edited:
        shown = ", ".join(edited[:5]) + (" ..." if len(edited) > 5 else "")
        raise ArtifactError(f"Artifact '{out_dir}' | file {shown} is not what its export wrote (its size or sha256 "
                            "differs from the manifest's inventory: edited since?); nothing was changed: move your "
                            "version away or choose another directory")


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
    with _lock(lock_name(out_dir), out_dir):
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


def lock_name(out_dir: Path) -> Path:
    return out_dir.parent / f".{out_dir.name}.multiexport-lock"


@contextlib.contextmanager
def _lock(path: Path, out_dir: Path) -> Iterator[None]:
    """The export's lock on `out_dir` (files.lock), its refusals as one line; what a dead holder left (its
    staging directory, the old artifact it was swapping out) is removed once the lock is ours."""

    try:
        with exclusive(path):
            _remove_leftovers(out_dir)
            yield
    except LockHeld as exc:
        holder = f" (pid {exc.held.pid})" if exc.held.pid else ""
        raise ArtifactError(f"Artifact '{out_dir}' | another multiexport export is writing it now{holder}, expected "
                            "one writer at a time: wait for it, or export elsewhere") from None
    except NotALockFile as exc:
        raise ArtifactError(f"Artifact '{out_dir}' | its lock '{exc.path}' is {exc.what}, expected multiexport's "
                            "own lock file: nothing was written there; remove it") from None
    except OSError as exc:
        if exc.filename == str(path):
            raise disk_error(exc, path.parent) from exc
        raise


def _is_leftover(entry: os.DirEntry, name: str) -> bool:
    """A staging directory (`.NAME.XXXXXXXX.partial`) or a swapped-out artifact (`.NAME.old-PID`) of `name`."""
    if not entry.is_dir(follow_symlinks=False) or not entry.name.startswith(f".{name}."):
        return False
    rest = entry.name[len(name) + 2:]
    return (rest.endswith(".partial") and len(rest) == len("XXXXXXXX.partial")) or (
        rest.startswith("old-") and rest[4:].isdigit())


def _remove_leftovers(out_dir: Path) -> None:
    """Remove what an export into `out_dir` killed outright left beside it (call with its lock held)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(out_dir.parent):
            if _is_leftover(entry, out_dir.name):
                shutil.rmtree(entry.path, ignore_errors=True)


def remove_stale(parent: Path) -> list[str]:
    """In `parent` (a compare's output directory), what exports killed outright left: their staging
    directories and lock files, for every artifact whose lock nobody holds now. Returns the names removed."""

    names = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(".") and entry.name.endswith(".multiexport-lock"):
                names.add(entry.name[1:-len(".multiexport-lock")])
            elif entry.name.startswith(".") and entry.name.endswith(".partial") and entry.name.count(".") >= 3:
                names.add(entry.name[1:].rsplit(".", 2)[0])
    removed = []
    for name in sorted(n for n in names if n):
        out_dir = parent / name
        try:
            with exclusive(lock_name(out_dir)):  # nobody exports it now: whatever is left is stale
                with contextlib.suppress(OSError):
                    removed += [e.name for e in os.scandir(parent) if _is_leftover(e, name)]
                _remove_leftovers(out_dir)
        except (LockHeld, NotALockFile, OSError):
            continue
    return removed
