"""exporting/handoff.py: what the compare hands is exported as a worker would export it; what it cannot hand, it
does not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multiexport.exporting import handoff
from multiexport.exporting.contract import ExportOptions, RunOptions
from multiexport.exporting.handoff import write_handoff
from multiexport.exporting.manifest import Manifest
from multiexport.exporting.pipeline import export_artifact
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.leaves.handed import NeedsTarget, read_handed
from multiexport.leaves.target import Target


def _mlp():
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    return Target(lambda x: {"y": np.tanh(1.0) * (x @ w)}, args=(np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),),
                  name="handoff_mlp", symbolic_batch="b")


def _same_artifact(backend, a: Manifest, a_dir, b: Manifest, b_dir, feed) -> None:
    """The same leaves, facts and files, computing the same outputs bit for bit. (Not the same bytes: jax writes
    each op's Python call stack into the module as its location, and the compare's stack is not the worker's.)"""
    assert a.inputs == b.inputs and a.outputs == b.outputs and a.weights == b.weights and a.files == b.files
    assert set(a.format) == set(b.format) and set(a.inventory) == set(b.inventory)
    options = RunOptions(device="cpu", threads=1)
    got_a, got_b = backend.load(a_dir, options)(feed), backend.load(b_dir, options)(feed)
    assert set(got_a) == set(got_b) and all(np.array_equal(got_a[k], got_b[k]) for k in got_a)


@pytest.mark.parametrize("backend", ["xla", "iree", "savedmodel"])
def test_an_export_from_the_handed_target_is_the_export_from_the_target(tmp_path, backend):
    if not get_backend(backend).available().ok:
        pytest.skip(f"{backend} unavailable")
    target = _mlp()
    sig = build_signature(target)
    assert write_handoff(target.fn, sig, "f", tmp_path / "handoff")
    handed = read_handed(tmp_path / "handoff")
    options = ExportOptions()
    built = export_artifact(get_backend(backend), target.fn, sig, tmp_path / "built", options)
    given = export_artifact(get_backend(backend), handed.fn, handed.signature, tmp_path / "given", options)
    for b in (1, 3):
        feed = {"x": np.linspace(-2, 2, 4 * b, dtype=np.float32).reshape(b, 4)}
        _same_artifact(get_backend(backend), built.manifest, tmp_path / "built", given.manifest, tmp_path / "given",
                       feed)


def test_an_export_that_needs_the_function_stops_withneeds_target_and_leaves_nothing(tmp_path):
    if not get_backend("onnx").available().ok:
        pytest.skip("onnx unavailable")
    target = _mlp()
    sig = build_signature(target)
    write_handoff(target.fn, sig, "f", tmp_path / "handoff")
    handed = read_handed(tmp_path / "handoff")
    with pytest.raises(NeedsTarget):  # the jax2onnx route traces the function
        export_artifact(get_backend("onnx"), handed.fn, handed.signature, tmp_path / "onnx", ExportOptions())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["handoff"]  # no staging directory, no lock, no artifact
    if get_backend("openvino").available().ok:  # its ONNX stage, exported for it alone, stops the same way
        with pytest.raises(NeedsTarget):
            export_artifact(get_backend("openvino"), handed.fn, handed.signature, tmp_path / "openvino",
                            ExportOptions())
        assert sorted(p.name for p in tmp_path.iterdir()) == ["handoff"]  # the stage's directory went too
    assert not get_backend("onnx").needs_target_for({"route": "stablehlo"}, sig)
    assert get_backend("onnx").needs_target_for({}, sig) and not get_backend("savedmodel").needs_target_for({}, sig)


def test_a_donating_target_hands_the_module_that_aliases_its_donated_leaves(tmp_path):
    import jax

    target = Target(jax.jit(lambda cache, x: {"cache": cache + x}, donate_argnums=0),
                    args=(np.zeros(4, np.float32), np.ones(4, np.float32)), name="donating")
    sig = build_signature(target)
    assert write_handoff(target.fn, sig, "f", tmp_path)
    modules = json.loads((tmp_path / handoff.MODULES_FILE).read_text())
    assert modules["donates"] is True and any(m["donate"] for m in modules["modules"])
    handed = read_handed(tmp_path)
    from multiexport.exporting.stablehlo import export_module, module_aliases

    assert module_aliases(export_module(handed.fn, handed.signature, donate=True)) == {0: 0}
    assert module_aliases(export_module(handed.fn, handed.signature, donate=False)) == {}


def test_nothing_is_handed_for_weights_past_the_limit_or_a_module_jax_export_refuses(tmp_path, monkeypatch):
    target = _mlp()
    sig = build_signature(target)
    monkeypatch.setattr(handoff, "HANDOFF_LIMIT_BYTES", -1)
    assert write_handoff(target.fn, sig, "f", tmp_path / "large") is False
    monkeypatch.undo()

    def host_only(x):  # a host callback jax.export refuses to serialize
        import jax

        return {"y": jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)}

    refused = Target(host_only, args=(np.ones((2, 3), np.float32),), name="callback")
    (tmp_path / "refused").mkdir()
    assert write_handoff(refused.fn, build_signature(refused), "f", tmp_path / "refused") is False
    assert not (tmp_path / "refused" / handoff.MODULES_FILE).exists()
