"""Named arrays on disk: `.npz` files keyed by leaf name (`foo.bar`), written atomically.

NumPy stores ml_dtypes arrays (bfloat16, float8_*) as anonymous 2-byte/1-byte voids; their dtype
names travel in an extra `__dtypes__` entry so they load back as what they were.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from .dtypes import parse_dtype
from .errors import InputError
from .manifest import write_bytes_atomic

DTYPES_KEY = "__dtypes__"


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write `arrays` to `path` as an uncompressed .npz; readers never see a half-written file."""
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    if DTYPES_KEY in arrays:
        raise InputError(f"Array '{DTYPES_KEY}' | is reserved, expected another name")
    extension = {name: a.dtype.name for name, a in arrays.items() if a.dtype.kind == "V"}
    stored = {name: (a.view(f"V{a.dtype.itemsize}") if name in extension else a) for name, a in arrays.items()}
    if extension:
        stored[DTYPES_KEY] = np.frombuffer(json.dumps(extension).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **stored)
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
            arrays = {name: data[name] for name in data.files}
        extension = json.loads(arrays.pop(DTYPES_KEY).tobytes()) if DTYPES_KEY in arrays else {}
        for name, dtype in extension.items():
            arrays[name] = arrays[name].view(parse_dtype(dtype))
        return arrays
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"Inputs file '{path}' | unreadable ({exc}), expected an .npz of named arrays") from exc
