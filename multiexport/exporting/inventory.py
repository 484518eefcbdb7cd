"""The files the core writes into every artifact beside the format's own, and the inventory that proves them.

example_inputs.npz (so `multiexport run DIR` works as is), the native consumer's inputs/, and the manifest's
inventory (sizes and sha256 of every file). Shared by the pipeline and the static-size fallback's top manifest.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import npy_storable
from ..files import write_bytes_atomic
from ..files.npz import save_npz
from ..files.owned import sha256_file
from .manifest import MANIFEST_NAME
from .native_section import INPUT_DIR

if TYPE_CHECKING:
    from ..leaves import Signature

EXAMPLE_INPUTS = "example_inputs.npz"
EXAMPLE_LIMIT_BYTES = 64 << 20  # above this the artifact ships without example values


def inventory(directory: Path) -> dict[str, int]:
    """Relative path -> size of every regular file under `directory` (manifest.json aside)."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            full = Path(root) / name
            rel = full.relative_to(directory).as_posix()
            if rel != MANIFEST_NAME and full.is_file() and not full.is_symlink():
                found[rel] = full.stat().st_size
    return dict(sorted(found.items()))


def inventory_sha256(directory: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file `inventory` lists: what proves later that multiexport wrote it."""
    return {rel: sha256_file(directory / rel) for rel in inventory(directory)}


def write_example_inputs(signature: "Signature", out_dir: Path) -> bool:
    """The target's example values as example_inputs.npz, so `multiexport run DIR` works as is."""
    examples = signature.example_feed()
    if len(examples) != len(signature.inputs) or sum(a.nbytes for a in examples.values()) > EXAMPLE_LIMIT_BYTES:
        return False
    save_npz(out_dir / EXAMPLE_INPUTS, examples)
    return True


def write_native_inputs(signature: "Signature", out_dir: Path, native: dict[str, Any]) -> bool:
    """The example value of each leaf the native consumer takes, as inputs/input{i}.npy (the names the
    native section gives), so the printed native command runs in the artifact directory as it is. False
    when there are no example values (a target given as shapes only) or they exceed EXAMPLE_LIMIT_BYTES."""
    entries = [a for a in native.get("args", []) if a.get("kind") == "leaf"]
    values = [signature.examples[a["index"]] for a in entries]
    if any(v is None for v in values) or sum(np.asarray(v).nbytes for v in values) > EXAMPLE_LIMIT_BYTES:
        return False
    arrays = [np.asarray(v, order="C") for v in values]  # ascontiguousarray would make 0-d 1-d
    if any(a.dtype.name != e["dtype"] for a, e in zip(arrays, entries)):
        return False  # an example value of another dtype than the leaf (a weakly typed Python scalar)
    for entry, array in zip(entries, arrays):
        if entry.get("encoding") == "raw":  # the bytes alone (IREE's tools take a scalar, and bfloat16, so)
            write_bytes_atomic(out_dir / INPUT_DIR / entry["file"], array.tobytes())
            continue
        # bfloat16 / float8 as opaque V2 / V1 bytes: the programs take the dtype from the manifest
        buf = io.BytesIO()
        np.save(buf, npy_storable(array), allow_pickle=False)
        write_bytes_atomic(out_dir / INPUT_DIR / entry["file"], buf.getvalue())
    return True
