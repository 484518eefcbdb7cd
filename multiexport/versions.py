"""Versions and timestamps every manifest and results file records."""

from __future__ import annotations

import datetime as _dt
import platform

# multiexport's own version (pyproject.toml's, checked by tests/test_packaging.py); the package root re-exports it.
__version__ = "0.2.0"


def dist_version(dist: str) -> str:
    """The installed version of a distribution, or "not installed"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def base_versions() -> dict[str, str]:
    """What produced any artifact: multiexport, Python, numpy, and the JAX that traced the function."""
    import numpy as np

    return {"multiexport": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "jax": dist_version("jax"), "jaxlib": dist_version("jaxlib")}


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
