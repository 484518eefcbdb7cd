"""LiteRT's large-model path: past OFFSET_BYTES of weights the converter writes the constant buffers after the
flatbuffer, addressed by offsets (a flatbuffer addresses at most 2 GiB), and the file still loads and runs in the
Python runner and in the LiteRT C API consumer. The threshold is lowered here so a small model takes the path."""

from __future__ import annotations

import importlib

import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import Target
from multiexport.api import export, load
from multiexport.native import run as native

pytest.importorskip("ai_edge_litert")
converting = importlib.import_module("multiexport.backends.litert.convert")  # the module (the package's `convert` is its function)

W = np.random.default_rng(0).normal(size=(256, 256)).astype(np.float32)


def matvec() -> Target:
    w = jnp.asarray(W)

    def project(x):
        return jnp.tanh(x @ w)

    return Target(project, args=(np.linspace(-1, 1, 256, dtype=np.float32)[None],), name="project")


def _export(tmp_path, name):
    out = tmp_path / name
    export(matvec(), out_dir=out, backend="litert")
    return out, (out / "model.tflite").read_bytes()


def test_past_the_size_the_buffers_follow_the_flatbuffer_and_the_model_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(converting, "OFFSET_BYTES", 1024)
    out, blob = _export(tmp_path, "offsets")
    assert converting.uses_buffer_offsets(blob)
    x = matvec().args[0]
    want = np.tanh(x @ W)
    np.testing.assert_allclose(load(out)({"x": x})["out"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(native.run(out, {"x": x}).outputs["out"], want, rtol=1e-5, atol=1e-6)


def test_under_the_size_the_flatbuffer_holds_its_buffers(tmp_path):
    _, blob = _export(tmp_path, "plain")
    assert not converting.uses_buffer_offsets(blob)
