"""What every native consumer's runtime lookup shares: the error naming what is missing, and finding an installed
package's directory without importing it (importing TensorFlow takes seconds).

Each format's own finders (headers, libraries, plugins) live in its backend (`backends/<name>/native.py` and
beside it), which its `NativeConsumer.recipe` and run/bundle methods use; the core names no runtime.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..environment import tpu_presence, tpu_variables
from ..errors import BackendUnavailable

__all__ = ["NativeBuildError", "package_dir", "tpu_presence", "tpu_variables"]  # the TPU's: for libtpu lookups


class NativeBuildError(BackendUnavailable):
    """A native consumer cannot be built here: the message names what is missing and how to get it."""


def package_dir(module: str) -> Path | None:
    """Directory of an installed package, found without importing it (importing TF takes seconds)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ModuleNotFoundError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])
