"""Dtype names as written in manifests, and back (bfloat16 and friends come from ml_dtypes)."""

from __future__ import annotations

import numpy as np


def parse_dtype(name: str) -> np.dtype:
    """`"float32"` -> `np.dtype('float32')`; also the ml_dtypes names such as `"bfloat16"`."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise
        return np.dtype(found)

