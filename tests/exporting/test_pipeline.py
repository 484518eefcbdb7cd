"""The export pipeline's stage reuse: a backend that builds on another starts from that one's finished artifact
only when the artifact was made as the stage would be; otherwise it exports the stage itself, and says which."""

from __future__ import annotations

import os

import pytest

from multiexport import examples
from multiexport.backends.onnx import OnnxBackend
from multiexport.backends.openvino import OpenVINOBackend
from multiexport.exporting import ExportOptions
from multiexport.exporting.pipeline import reusable_stage
from multiexport.leaves import build_signature

from ..conftest import assert_matches_jit

pytestmark = pytest.mark.skipif(not (OnnxBackend().available().ok and OpenVINOBackend().available().ok),
                                reason="needs the onnx and openvino backends")


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """The seed's ONNX export (the OpenVINO stage), and the mlp's (a stage of another target)."""
    root = tmp_path_factory.mktemp("stage")
    seed, mlp = examples.seed(), examples.mlp()
    made = {}
    for name, target in (("seed", seed), ("mlp", mlp)):
        sig = build_signature(target)
        made[name] = (target, sig, OnnxBackend().export(target.fn, sig, root / name / "onnx", ExportOptions()))
    return made


def test_a_matching_stage_artifact_is_reused_not_exported_again(stage, tmp_path):
    target, sig, onnx = stage["seed"]
    art = OpenVINOBackend().export(target.fn, sig, tmp_path / "openvino",
                                   ExportOptions(stage_artifact=str(onnx.directory)))
    how = art.manifest.format["stage"]
    assert how["backend"] == "onnx" and how["made"].startswith("reused")
    assert os.path.samefile(tmp_path / how["reused_from"], onnx.directory)
    model = art.manifest.files["model"]
    assert (art.directory / model).read_bytes() == (onnx.directory / model).read_bytes()
    feed = sig.example_feed()
    assert_matches_jit(target, sig, OpenVINOBackend().load(art.directory)(feed), feed)


@pytest.mark.parametrize("why", ["another target", "other options", "not an artifact"])
def test_a_stage_artifact_made_otherwise_is_not_reused(stage, tmp_path, why):
    target, sig, onnx = stage["seed"]
    directory = {"another target": stage["mlp"][2].directory, "other options": onnx.directory,
                 "not an artifact": tmp_path}[why]
    options = ExportOptions(keep_unused=why == "other options", stage_artifact=str(directory))
    assert reusable_stage(OnnxBackend(), sig, options, str(directory)) is None
    art = OpenVINOBackend().export(target.fn, sig, tmp_path / "openvino", options)
    assert art.manifest.format["stage"] == {"backend": "onnx", "made": "exported for this artifact (its export "
                                                                       "time includes it)", "reused_from": None}
    feed = sig.example_feed()
    assert_matches_jit(target, sig, OpenVINOBackend().load(art.directory)(feed), feed)


def test_the_load_check_releases_the_runtime_it_loaded(stage, tmp_path, monkeypatch):
    """The check loads the artifact with its runtime and runs it once: that runner is closed before the export
    returns (its session, an interpreter's threads, a browser would otherwise live on in the worker: the
    reference's worker times jax.jit next, run.serve), also when the check fails."""
    from multiexport.exporting import pipeline
    from multiexport.exporting.manifest import Manifest

    target, sig, onnx = stage["seed"]
    backend = OnnxBackend()
    loaded = []
    real_load = backend.load

    def load(directory, options):
        runner = real_load(directory, options)
        loaded.append(runner)
        return runner

    monkeypatch.setattr(backend, "load", load)
    manifest = Manifest.read(onnx.directory)
    assert pipeline.load_check(backend, onnx.directory, manifest, sig, target.fn) == []
    assert len(loaded) == 1 and loaded[0]._closed

    def failing(directory, options):  # loads, then its run fails (a runtime refusing the artifact's op)
        runner = load(directory, options)

        def fetch(prepared):
            raise RuntimeError("planted: the runtime cannot run this op")

        runner._fetch_impl = fetch
        return runner

    monkeypatch.setattr(backend, "load", failing)
    with pytest.raises(Exception, match="planted: the runtime cannot run this op"):
        pipeline.load_check(backend, onnx.directory, manifest, sig, target.fn)
    assert len(loaded) == 2 and loaded[1]._closed
