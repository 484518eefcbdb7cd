"""onnx-node (the ONNX stage's file run by onnxruntime-node in a Node.js process): inputs and outputs by leaf name
through the manifest, outputs matching jax.jit, 64-bit tensors crossing exactly, latency timed inside Node, and
what is missing or broken said in one typed line. Real node and the npm-installed runtime; skipped without them."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from multiexport import RunError, examples
from multiexport.backends.onnx_node import OnnxNodeBackend
from multiexport.backends.onnx_node.process import NodeError, open_session
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature

from ..conftest import assert_matches_jit, reference_outputs

# The shared cases onnx-node refuses (read by tests/exporting/test_contract.py): onnxruntime-node has no tensor
# type for them, so the export names the leaf.
KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "mlp_bf16": ("unsupported-dtype", "bfloat16 has no typed array in onnxruntime-node's tensors"),
    "float8": ("unsupported-dtype", "float8 has no typed array in onnxruntime-node's tensors"),
}

_status = OnnxNodeBackend().available()
needs_node = pytest.mark.skipif(not _status.ok, reason=f"onnx-node backend unavailable: {_status.reason}")


def export(target, path):
    sig = build_signature(target)
    return sig, OnnxNodeBackend().export(target.fn, sig, path, ExportOptions())


@needs_node
@pytest.mark.parametrize("make", [examples.seed, examples.transformer], ids=["seed", "transformer"])
def test_outputs_by_leaf_name_match_jax_jit_in_node(make, tmp_path):
    target = make()
    sig, artifact = export(target, tmp_path / "a")
    assert artifact.manifest.format["runtime"].startswith("onnxruntime-node 1.")
    feed = sig.example_feed()
    with OnnxNodeBackend().load(artifact.directory) as runner:
        assert_matches_jit(target, sig, runner(feed), feed, "onnx-node")
        prepared = runner.prepare(feed)
        runner.run_prepared(prepared)
        samples = runner.time_own_calls(prepared, warmup=1, min_calls=5, max_calls=5, seconds=0.0)
        described = runner.describe()
    assert samples.dtype == np.int64 and samples.size == 5 and (samples > 0).all()
    assert described["node_ms_p50"] is not None and described["timed_in_node"] is True
    assert described["node"].startswith("v")


@needs_node
def test_64_bit_leaves_run_at_full_width_in_node(tmp_path):
    from ..cases import float64

    with jax.enable_x64(True):
        target = float64()
        sig, artifact = export(target, tmp_path / "a")
        feed = {"x": np.linspace(-1, 1, 4) + 1e-12, "n": np.array([2**40 + 3, -5, 0, 7], np.int64)}
        want = reference_outputs(target, sig, feed)
    with OnnxNodeBackend().load(artifact.directory) as runner:
        got = runner(feed)
    np.testing.assert_array_equal(got["out.m"], want["out.m"])
    np.testing.assert_array_equal(got["out.y"], want["out.y"])


@needs_node
def test_a_broken_model_is_one_typed_line(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"not an onnx file at all")
    with pytest.raises(NodeError) as info:
        open_session(tmp_path / "m.onnx", threads=1)
    assert "\n" not in str(info.value) and str(info.value)
    _, artifact = export(examples.seed(), tmp_path / "a")
    model = artifact.directory / "model.onnx"
    model.write_bytes(b"\0" * model.stat().st_size)  # a real fault: zeroed bytes
    with pytest.raises(Exception) as err:
        OnnxNodeBackend().load(artifact.directory)
    assert str(err.value).startswith(f"Artifact '{artifact.directory}' | ") and "\n" not in str(err.value)


def test_no_node_or_no_runtime_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("MULTIEXPORT_NODE", str(tmp_path / "no-such-node"))
    status = OnnxNodeBackend().available()
    assert not status.ok and "apt-get install nodejs" in status.reason
    monkeypatch.delenv("MULTIEXPORT_NODE")
    monkeypatch.setenv("MULTIEXPORT_ORT_NODE_MODULES", str(tmp_path))  # an empty folder: no runtime there
    status = OnnxNodeBackend().available()
    if "node executable" in status.reason:
        pytest.skip(f"no node here: {status.reason}")
    assert not status.ok and "npm ci --prefix" in status.reason


@needs_node
def test_a_dead_node_process_is_a_run_error_not_a_hang(tmp_path):
    _, artifact = export(examples.seed(), tmp_path / "a")
    runner = OnnxNodeBackend().load(artifact.directory)
    try:
        prepared = runner.prepare(build_signature(examples.seed()).example_feed())
        runner.session.process.kill()  # a real signal: the runtime's process is gone
        runner.session.process.wait()
        with pytest.raises(RunError, match="onnxruntime-node failed during session.run: the node process"):
            runner.run_prepared(prepared)
    finally:
        runner.close()
