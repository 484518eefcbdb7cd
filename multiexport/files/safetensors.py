"""The safetensors format: an 8-byte header length, a JSON header, raw little-endian tensor data.

Lifted weights are stored in it (a plain, widely read format, which IREE reads directly as a parameter
file). Reading treats the file as hostile: the header length must fit the file, every entry's dtype,
shape and offsets must be consistent and inside the data, and problems are ArtifactErrors naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import ArtifactError, ExportError
from .bounded import loads, open_regular

ST_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}
_NP_DTYPES = {v: k for k, v in ST_DTYPES.items()}
_MAX_HEADER = 100 << 20


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to `path` in the safetensors format, streaming each array's bytes (no copies).

    Tensors go in order of decreasing item size so every tensor starts at a multiple of its own item
    size (runtimes that map the file read aligned data); the header is padded to 8 bytes, as the format
    allows. Written to a temporary name and renamed, so a crash leaves no half file.
    """
    order = sorted(tensors, key=lambda k: -tensors[k].dtype.itemsize)
    header: dict[str, Any] = {"__metadata__": dict(metadata or {})}
    offset = 0
    for name in order:
        array = tensors[name]
        if array.dtype.name not in ST_DTYPES:
            raise ExportError(f"Weight '{name}' | got {array.dtype.name}, expected a dtype safetensors stores "
                              f"({', '.join(ST_DTYPES)})", category="unsupported-dtype")
        header[name] = {"dtype": ST_DTYPES[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for name in order:
                array = np.ascontiguousarray(tensors[name])
                if array.dtype.byteorder == ">":
                    array = array.astype(array.dtype.newbyteorder("<"))
                f.write(array.reshape(-1).view(np.uint8).data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_safetensors(path: Path, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Arrays of the safetensors file at `path` as read-only memory maps (nothing is read yet)."""
    return dict(iter_safetensors(path, names))


def iter_safetensors(path: Path, names: Sequence[str] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) for each of `names` (default: all), each array a read-only map of its own bytes only.

    The header is parsed once; a caller that drops each array before taking the next (a runner copying
    weights to its device) holds at most one tensor mapped.
    """
    import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8s with numpy)

    path = Path(path)
    header, data_start, data_size = _header(path)
    for name in names if names is not None else [k for k in header if k != "__metadata__"]:
        entry = header.get(name)
        if entry is None:
            raise ArtifactError(f"Weight '{name}' | missing from {path}, expected it (the manifest lists it)")
        dtype, shape, start, end = _entry(path, name, entry)
        count = int(np.prod(shape, dtype=np.int64))
        if start < 0 or end > data_size or end - start != count * dtype.itemsize:
            raise ArtifactError(f"Weight '{name}' | got {end - start} bytes at {start} in {path.name}, expected "
                                f"{count * dtype.itemsize} within the file's {data_size} data bytes")
        # mmap cannot map zero bytes
        yield name, (np.memmap(path, dtype=dtype, mode="r", offset=data_start + start, shape=shape)
                     if count else np.zeros(shape, dtype))


def _header(path: Path) -> tuple[dict[str, Any], int, int]:
    try:
        fd = open_regular(path, f"Artifact '{path.parent}' | weights", 1 << 50, ArtifactError, "expected a safetensors file")
        size = os.fstat(fd).st_size
        with os.fdopen(fd, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if not 2 <= length <= min(size - 8, _MAX_HEADER):
                raise ValueError(f"header length {length} does not fit a {size}-byte file")
            header = loads(f.read(length))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"Artifact '{path.parent}' | cannot read {path.name}: {exc}, expected a safetensors file") from exc
    return header, 8 + length, size - 8 - length


def _entry(path: Path, name: str, entry: Any) -> tuple[np.dtype, tuple[int, ...], int, int]:
    try:
        dtype = np.dtype(_NP_DTYPES[entry["dtype"]])
        shape = tuple(int(d) for d in entry["shape"])
        start, end = (int(o) for o in entry["data_offsets"])
        if any(d < 0 for d in shape):
            raise ValueError("negative dimension")
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"Weight '{name}' | malformed entry {entry!r} in {path.name} ({exc}), expected "
                            "dtype, shape and data_offsets") from exc
    return dtype, shape, start, end
