"""Named arrays on disk: `.npz` files keyed by leaf name (`foo.bar`), written atomically, read defensively.

NumPy stores ml_dtypes arrays (bfloat16, float8_*, int4) as anonymous 1/2-byte voids; their dtype names
travel in an extra `__dtypes__` entry so they load back as what they were. A file to read is user input:
each member's header must describe exactly the bytes that follow it (a header claiming 10^12 elements is
refused before anything is allocated), pickles are never loaded, and every problem is one InputError line
naming the file and the member.
"""

from __future__ import annotations

import io
import json
import os
import tokenize
import zipfile
from pathlib import Path

import numpy as np

from ..dtypes import is_extension, parse_dtype
from ..errors import InputError
from .atomic import write_bytes_atomic
from .bounded import check_inflation, loads, open_regular
from .owned import seal_zip, zip_placeholder

DTYPES_KEY = "__dtypes__"
NPZ_LIMIT = 1 << 40  # the archive itself; what its members inflate to is checked member by member
EXPECTED = "expected an .npz of named arrays (numpy.savez, or `multiexport run --out`)"


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write `arrays` to `path` as an uncompressed .npz; readers never see a half-written file."""
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    if DTYPES_KEY in arrays:
        raise InputError(f"Array '{DTYPES_KEY}' | is reserved, expected another name")
    path = Path(path)
    if path.is_dir():
        raise InputError(f"Output file '{path}' | is a directory, expected a file name such as out.npz")
    extension = {name: a.dtype.name for name, a in arrays.items() if is_extension(a.dtype)}
    stored = {name: (a.view(f"V{a.dtype.itemsize}") if name in extension else a) for name, a in arrays.items()}
    if extension:
        stored[DTYPES_KEY] = np.frombuffer(json.dumps(extension).encode(), dtype=np.uint8)
    # The archive is written member by member, as np.savez does, but without passing names as keyword
    # arguments (a leaf named `file` would collide with savez's own parameter).
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.comment = zip_placeholder()  # sealed below: proves later that multiexport wrote the file
        for name, array in stored.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(array) if array.ndim else array,
                                          allow_pickle=False)
    write_bytes_atomic(path, seal_zip(buf.getvalue()))
    return path


def load_npz(path: str | Path, what: str = "Inputs file") -> dict[str, np.ndarray]:
    """Named arrays from an .npz; anything unexpected is an InputError naming the file (and member).

    Only a regular file is opened (a FIFO or a device is refused at once), and every member's inflated size
    is checked from the zip's own header before a byte is inflated (a deflate bomb is refused, not inflated).
    """
    path = Path(path)
    fd = open_regular(path, what, NPZ_LIMIT, InputError, EXPECTED)
    with os.fdopen(fd, "rb") as fh:
        try:
            if not zipfile.is_zipfile(fh):
                raise InputError(f"{what} '{path}' | is not a zip archive, {EXPECTED}")
            with zipfile.ZipFile(fh) as archive:
                arrays = _read_members(path, archive, what, os.fstat(fd).st_size)
        except InputError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
            raise InputError(f"{what} '{path}' | unreadable ({type(exc).__name__}: {exc}), {EXPECTED}") from exc
    return _apply_dtypes(path, arrays, what)


def _read_members(path: Path, archive: zipfile.ZipFile, what: str, archive_bytes: int) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    infos = archive.infolist()
    for info in infos:  # every header first: a bomb in the last member is refused before the first is read
        check_inflation(f"{what} '{path}'", info.filename, info.file_size, info.compress_size,
                        info.compress_type == zipfile.ZIP_STORED, archive_bytes, InputError, EXPECTED)
    for info in infos:
        if not info.filename:  # zipfile cuts a name at its first NUL: a NUL-led name is empty
            raise InputError(f"{what} '{path}' | holds a member with an empty or NUL-led name, expected array names")
        if info.is_dir():
            continue
        name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if name in arrays:
            raise InputError(f"{what} '{path}' | holds '{name}' twice, expected unique names")
        with archive.open(info) as fh:
            arrays[name] = _read_array(path, name, fh, info.file_size, what)
    return arrays


def npz_shapes(path: str | Path, what: str = "Inputs file") -> dict[str, tuple[int, ...]]:
    """Each array's shape in an .npz, read from the members' headers alone (nothing inflated or allocated), so
    a caller can bound what it loads; the same checks and one-line InputErrors as `load_npz`."""
    path = Path(path)
    fd = open_regular(path, what, NPZ_LIMIT, InputError, EXPECTED)
    shapes: dict[str, tuple[int, ...]] = {}
    with os.fdopen(fd, "rb") as fh:
        try:
            if not zipfile.is_zipfile(fh):
                raise InputError(f"{what} '{path}' | is not a zip archive, {EXPECTED}")
            with zipfile.ZipFile(fh) as archive:
                for info in archive.infolist():
                    name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                    if info.is_dir() or name == DTYPES_KEY:
                        continue
                    with archive.open(info) as member:
                        shapes[name] = tuple(_read_header(path, name, member, what)[0])
        except InputError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
            raise InputError(f"{what} '{path}' | unreadable ({type(exc).__name__}: {exc}), {EXPECTED}") from exc
    return shapes


def _read_header(path: Path, name: str, fh, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of one .npy member, its file position left at the data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy format version {version}")
    except (ValueError, SyntaxError, tokenize.TokenError) as exc:  # numpy tokenizes the header as Python
        raise InputError(f"{what} '{path}' | member '{name}' is not an .npy array ({type(exc).__name__}: {exc}), "
                         f"{EXPECTED}") from exc
    return shape, fortran, dtype


def _read_array(path: Path, name: str, fh, size: int, what: str) -> np.ndarray:
    """One member, its header checked against the member's size before any data is allocated."""
    shape, fortran, dtype = _read_header(path, name, fh, what)
    if dtype.hasobject:
        raise InputError(f"{what} '{path}' | member '{name}' holds Python objects (pickled data), expected numbers")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    header = fh.tell()
    if count < 0 or count * dtype.itemsize != size - header:
        raise InputError(f"{what} '{path}' | member '{name}' claims shape {tuple(shape)} of {dtype} "
                         f"({count * dtype.itemsize} bytes) but holds {size - header} bytes, {EXPECTED}")
    data = fh.read(count * dtype.itemsize)
    array = np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order="F" if fortran else "C")
    # A file written on (or for) a machine of the other byte order holds the same numbers: read them natively,
    # so a big-endian int32 is an int32 here, not "got int32, expected int32".
    return array.astype(dtype.newbyteorder("="), copy=True) if dtype.byteorder not in ("=", "|") else array.copy()


def _apply_dtypes(path: Path, arrays: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    if DTYPES_KEY not in arrays:
        return arrays
    raw = arrays.pop(DTYPES_KEY)
    try:
        extension = loads(raw.tobytes())
        if not isinstance(extension, dict):
            raise ValueError("not a mapping")
    except ValueError as exc:  # UnicodeDecodeError included
        raise InputError(f"{what} '{path}' | entry '{DTYPES_KEY}' is not a JSON mapping of name to dtype ({exc})") from exc
    for name, dtype_name in extension.items():
        if name not in arrays:
            raise InputError(f"{what} '{path}' | entry '{DTYPES_KEY}' names '{name}', which the file does not hold")
        try:
            dtype = parse_dtype(str(dtype_name))
        except (TypeError, ValueError) as exc:
            raise InputError(f"{what} '{path}' | entry '{DTYPES_KEY}' gives '{name}' dtype {dtype_name!r}, "
                             "expected a numpy or ml_dtypes name") from exc
        array = arrays[name]
        if array.dtype.kind != "V" or array.dtype.itemsize != dtype.itemsize:
            raise InputError(f"{what} '{path}' | '{name}' is {array.dtype} but '{DTYPES_KEY}' says {dtype_name}, "
                             f"expected raw {dtype.itemsize}-byte items")
        arrays[name] = array.view(dtype)
    return arrays
