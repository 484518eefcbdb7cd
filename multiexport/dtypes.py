"""Dtype names as written in manifests and feeds, and back (bfloat16, float8_*, int4 come from ml_dtypes).

Only numeric and bool dtypes are array dtypes here: a name from a file that parses to an object, string
or void dtype is refused, since viewing bytes as Python objects would be memory-unsafe.
"""

from __future__ import annotations

import numpy as np

_KINDS = "biufcV"  # bool, int, uint, float, complex, and ml_dtypes' extension types (kind 'V')


def parse_dtype(name: str) -> np.dtype:
    """`"float32"` -> `np.dtype('float32')`; also the ml_dtypes names such as `"bfloat16"`.

    Raises TypeError for anything that is not the name of a numeric or bool dtype.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"dtype name {name!r} is not a non-empty string")
    try:
        dtype = np.dtype(name)
    except TypeError:
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if found is None or not isinstance(found, type):
            raise TypeError(f"data type {name!r} not understood") from None
        dtype = np.dtype(found)
    if dtype.kind not in _KINDS or dtype.hasobject or (dtype.kind == "V" and not _is_ml_dtype(dtype)):
        raise TypeError(f"data type {name!r} is not a numeric or bool dtype")
    return dtype


def _is_ml_dtype(dtype: np.dtype) -> bool:
    """Whether a kind-'V' dtype is one of ml_dtypes' number types rather than raw bytes or a record."""
    return dtype.names is None and dtype.type.__module__.startswith("ml_dtypes")


def is_float(dtype: str | np.dtype) -> bool:
    """Floating point, ml_dtypes' floats (bfloat16, float8_*) included."""
    dt = parse_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def is_complex(dtype: str | np.dtype) -> bool:
    dt = parse_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    return dt.kind == "c"


def is_integer(dtype: str | np.dtype) -> bool:
    """Integers, ml_dtypes' int4/uint4/int2 included (bool is not an integer here)."""
    dt = parse_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    return dt.kind in "iu" or (dt.kind == "V" and "int" in dt.name)


def is_extension(dtype: np.dtype) -> bool:
    """A dtype numpy cannot name from its own .npy header (bfloat16, float8_*, int4: ml_dtypes types, some of
    which even claim a float descr such as '<f1' that numpy cannot read back)."""
    try:
        return np.dtype(dtype.str) != dtype
    except TypeError:
        return True


def npy_storable(array: np.ndarray) -> np.ndarray:
    """`array` as a .npy file can hold it: an extension dtype as opaque bytes of its size (`V2`, `V1`), which
    every reader takes back by the dtype the manifest or a side table names."""
    return array.view(f"V{array.dtype.itemsize}") if is_extension(array.dtype) else array

