"""Shared fixtures: a CLI runner that spawns a fresh process, and the jax.jit reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, check: bool = False, env: dict | None = None, cwd: Path | None = None):
    """Run `python -m multiexport ARGS` in a fresh interpreter; returns the CompletedProcess."""
    proc = subprocess.run(
        [sys.executable, "-m", "multiexport", *map(str, args)],
        capture_output=True, text=True, cwd=cwd or REPO, env={**os.environ, **(env or {})}, timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"multiexport {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return run_cli


def reference_outputs(target, sig, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """jax.jit(fn) on the feed, outputs named like the signature's output leaves."""
    import jax

    flat = jax.jit(sig.flat_function(target.fn))
    outs = flat(*[feed[leaf.name] for leaf in sig.inputs])
    return {leaf.name: np.asarray(o) for leaf, o in zip(sig.outputs, outs)}


@pytest.fixture
def fault_backends():
    """Register the fault-injecting backends for one test, then remove them."""
    from multiexport.registry import register, unregister

    from .fault_backends import ALL

    for name, locator in ALL.items():
        register(name, locator)
    yield list(ALL)
    for name in ALL:
        unregister(name)
