"""Named arrays on disk: `.npz` files keyed by leaf name (`foo.bar`), written atomically."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from .errors import InputError
from .manifest import write_bytes_atomic


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write `arrays` to `path` as an uncompressed .npz; readers never see a half-written file."""
    buf = io.BytesIO()
    np.savez(buf, **{name: np.asarray(a) for name, a in arrays.items()})
    path = Path(path)
    write_bytes_atomic(path, buf.getvalue())
    return path


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Named arrays from an .npz; an unreadable file is an InputError naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Inputs file '{path}' | does not exist, expected an .npz of named arrays")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"Inputs file '{path}' | unreadable ({exc}), expected an .npz of named arrays") from exc
