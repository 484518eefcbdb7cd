"""Shared fixtures: a CLI runner that spawns a fresh process, and the jax.jit reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

# The zoo's Keras models run on the JAX backend, and Keras picks its backend once per process, when first
# imported: `import tensorflow` (every in-process SavedModel test) imports keras, which then took TensorFlow's.
os.environ.setdefault("KERAS_BACKEND", "jax")


@pytest.fixture(scope="session", autouse=True)
def _kept_build_cache(tmp_path_factory):
    """The programs targets' factories compile are kept between commands (leaves/factory_cache.py): in this
    session's own directory, not the machine's ~/.cache, and gone with the session's temporaries."""
    path = tmp_path_factory.mktemp("kept-build-cache")
    os.environ["MULTIEXPORT_BUILD_CACHE"] = str(path)
    yield path
    os.environ.pop("MULTIEXPORT_BUILD_CACHE", None)


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


def assert_matches_jit(target, sig, got, feed, where=""):
    """`got` (a runner's outputs on `feed`) has every output leaf, in order, each within its dtype's default
    tolerance of jax.jit's."""
    from multiexport.measure.parity import compare_leaf
    from multiexport.measure.tolerance import default_tolerance

    want = reference_outputs(target, sig, feed)
    assert list(got) == [leaf.name for leaf in sig.outputs]
    for leaf in sig.outputs:
        verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype), where)
        assert verdict.passed, verdict.reasons


def run_in_worker(directory, feeds, timeout: float = 300.0):
    """Run an artifact on feeds in a fresh worker process (as compare does); returns `run.runs.ArtifactRun`."""
    from multiexport.run.runs import run_artifact

    return run_artifact(["run", str(directory)], list(feeds), [], {}, None, "cpu", 2, timeout)


@pytest.fixture
def fault_backends():
    """Register the fault-injecting backends for one test, then remove them."""
    from multiexport.exporting.registry import register, unregister

    from .fault_backends import ALL

    for name, locator in ALL.items():
        register(name, locator)
    yield list(ALL)
    for name in ALL:
        unregister(name)


def tamper(directory, edit) -> None:
    """Change an artifact's files with `edit(directory)` and update its manifest's inventory, as someone who
    edits an artifact on purpose would: what multiexport then checks is the content, not the file sizes."""
    import json

    from multiexport.exporting.pipeline import inventory

    edit(directory)
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["inventory"] = inventory(directory)
    path.write_text(json.dumps(manifest))
