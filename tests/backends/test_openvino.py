"""OpenVINO backend (ONNX stage -> OpenVINO CPU): ports are leaf names, a symbolic batch is `?`, outputs match
jax.jit, the compiled model's precision and threads are read back, and what OpenVINO cannot do (or would do
silently wrong) fails typed."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import ExportError, RunError, Target, examples
from multiexport.backends.openvino import OpenVINOBackend
from multiexport.exporting import ExportOptions, RunOptions
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature

from ..cases import case, feed_for
from ..conftest import REPO, assert_matches_jit, reference_outputs

KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "float64": ("unsupported-dtype", "OpenVINO's CPU plugin computes float64 in float32 and int64 in int32 without "
                                     "an error: 64-bit leaves are refused unless openvino.allow_64bit"),
    "prng_key": ("unsupported-dtype", "the ONNX stage's StableHLO route computes threefry in uint32, which "
                                      "OpenVINO's CPU plugin computes in signed 32 bits (jax2onnx's RandomNormal "
                                      "ignores the key)"),
}

_status = OpenVINOBackend().available()
pytestmark = pytest.mark.skipif(not _status.ok, reason=f"openvino backend unavailable: {_status.reason}")

TARGETS = {"seed": examples.seed, "mlp_dynamic": examples.mlp_dynamic, "transformer": examples.transformer}


def export(target, path, **options):
    sig = build_signature(target)
    return sig, OpenVINOBackend().export(target.fn, sig, path, ExportOptions(**options))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("openvino")
    out = {}
    for name, make in TARGETS.items():
        target = make()
        sig, artifact = export(target, root / name)
        out[name] = (target, sig, artifact)
    return out


def test_seed_ports_are_the_leaves_the_onnx_file_takes(exported, tmp_path):
    _, _, seed = exported["seed"]
    by_name = {leaf.name: leaf for leaf in seed.manifest.inputs}
    assert (by_name["foo.bar"].used, by_name["foo.bar"].param) == (False, None)
    assert (by_name["foo.baz"].used, by_name["foo.baz"].param) == (True, "foo.baz")
    runner = OpenVINOBackend().load(seed.directory)
    assert [sorted(p.get_names()) for p in runner.compiled_model.inputs] == [["foo.baz"]]
    assert runner({"foo.baz": np.arange(10, dtype=np.int32)})["out"] == 45  # foo.bar may be omitted

    _, kept = export(examples.seed(), tmp_path / "kept", keep_unused=True)
    assert [(leaf.name, leaf.used, leaf.param) for leaf in kept.manifest.inputs] == [
        ("foo.bar", True, "foo.bar"), ("foo.baz", True, "foo.baz")]
    runner = OpenVINOBackend().load(kept.directory)
    assert sorted(n for p in runner.compiled_model.inputs for n in p.get_names()) == ["foo.bar", "foo.baz"]
    assert runner({"foo.bar": np.ones(10, np.int32), "foo.baz": np.arange(10, dtype=np.int32)})["out"] == 45


@pytest.mark.parametrize("name,batch", [("seed", None), ("mlp_dynamic", 1), ("mlp_dynamic", 8), ("transformer", None)])
def test_outputs_match_jit(exported, name, batch):
    target, sig, artifact = exported[name]
    feed = feed_for(sig, batch, seed=3)
    assert_matches_jit(target, sig, OpenVINOBackend().load(artifact.directory)(feed), feed, f"batch={batch}")


def test_symbolic_batch_is_a_question_mark_and_one_compiled_model_runs_two_sizes_in_any_order(exported):
    target, sig, artifact = exported["mlp_dynamic"]
    assert artifact.manifest.format["input_shapes"]["batch.x"] == "[?,16]"
    runner = OpenVINOBackend().load(artifact.directory)
    feeds = {b: feed_for(sig, b, seed=b) for b in (1, 8)}
    prepared = {b: runner.prepare(f) for b, f in feeds.items()}
    for b in (1, 8, 1):
        assert runner.run_prepared(prepared[b]) is None
        got = runner._name_outputs(runner._fetch_impl(prepared[b]))
        assert got["out.logits"].shape == (b, 4)
        assert_matches_jit(target, sig, got, feeds[b], f"b={b}")
    for _ in range(20):  # the timed call leaves its inputs intact: repeated calls compute the same outputs
        runner.run_prepared(prepared[1])
    assert np.array_equal(runner._fetch_impl(prepared[1])[0], runner(feeds[1])["out.logits"])


@pytest.mark.subprocess
def test_artifacts_run_from_disk_in_a_fresh_process(exported, tmp_path):
    jobs, expected = [], {}
    for name, batch in (("mlp_dynamic", 1), ("mlp_dynamic", 8), ("transformer", None)):
        target, sig, artifact = exported[name]
        feed = feed_for(sig, batch, seed=5)
        stem = tmp_path / f"{name}-{batch}"
        save_npz(f"{stem}.in.npz", feed)
        jobs.append({"artifact": str(artifact.directory), "feeds": [[f"{stem}.in.npz", f"{stem}.out.npz"]]})
        expected[stem] = (target, sig, feed)
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-m", "tests.run_many", str(tmp_path / "jobs.json")], cwd=REPO, check=True, timeout=300)
    for stem, (target, sig, feed) in expected.items():
        assert not stem.with_suffix(".out.error.txt").exists()
        assert_matches_jit(target, sig, load_npz(f"{stem}.out.npz"), feed, stem.name)


def test_the_artifact_is_the_onnx_stage_file_unchanged(exported, tmp_path):
    from multiexport.backends.onnx import OnnxBackend

    target, sig, artifact = exported["transformer"]
    onnx = OnnxBackend().export(target.fn, sig, tmp_path / "onnx", ExportOptions(check_load=False))
    assert (artifact.directory / "model.onnx").read_bytes() == (onnx.directory / "model.onnx").read_bytes()
    m = artifact.manifest
    assert m.files == {"model": "model.onnx", "example_inputs": "example_inputs.npz"}
    assert "compress_to_fp16=False" in m.format["ir_command"]
    assert m.versions["openvino"] and m.requires["onnx_opset"] == onnx.manifest.requires["onnx_opset"]


def test_threads_hint_streams_and_precision_are_read_back(exported):
    artifact = exported["transformer"][2]
    described = OpenVINOBackend().load(artifact.directory, RunOptions(threads=1)).describe()
    assert described["inference_num_threads"] == 1 and described["threads_requested"] == 1
    assert described["num_streams"] == 1 and described["performance_hint"] == "LATENCY"
    assert described["inference_precision"] == "f32"
    assert "InferRequest.infer()" in described["calling_path"] and "set_tensor" in described["calling_path"]
    assert OpenVINOBackend().load(artifact.directory, RunOptions(threads=2)).describe()["inference_num_threads"] == 2


def test_a_precision_other_than_f32_after_compiling_is_refused(exported, monkeypatch):
    from multiexport.backends.openvino import runner as runner_module

    real = runner_module.properties
    monkeypatch.setattr("multiexport.backends.openvino.properties",
                        lambda cm: {**real(cm), "inference_precision": "bf16"})  # what a bf16/AMX CPU would pick
    with pytest.raises(RunError) as info:
        OpenVINOBackend().load(exported["transformer"][2].directory)
    assert info.value.category == "unsupported-dtype" and "reports bf16" in str(info.value)


def test_compiled_model_cache_is_measured_at_export_and_used_when_asked(tmp_path):
    target = examples.transformer()
    cache = tmp_path / "cache"
    sig, artifact = export(target, tmp_path / "a", backend_options={"cache_dir": str(cache)})
    measured = artifact.manifest.format["compile_cache"]
    assert measured["loaded_from_cache"] is True and measured["cache_bytes"] > 0
    assert all(measured[k] > 0 for k in ("compile_s_no_cache", "compile_s_filling_cache", "compile_s_warm_cache"))
    trusted = RunOptions(trust_artifact=True)
    first = OpenVINOBackend().load(artifact.directory, trusted)  # the load check at export filled the cache
    assert first.describe()["cache_dir"] == str(cache) and first.describe()["loaded_from_cache"] is True
    assert_matches_jit(target, sig, first(sig.example_feed()), sig.example_feed())
    _, plain = export(target, tmp_path / "b", backend_options={"measure_cache": False})
    assert plain.manifest.format["compile_cache"] is None
    assert OpenVINOBackend().load(plain.directory).describe()["loaded_from_cache"] is False


def test_an_untrusted_artifact_cannot_make_openvino_write_where_its_manifest_says(tmp_path):
    """cache_dir travels in the manifest: someone else's artifact naming a directory must not get OpenVINO's
    blobs written there; the load ignores it, says so, and still runs."""
    target = examples.mlp()
    sig, artifact = export(target, tmp_path / "a", backend_options={"measure_cache": False})
    victim = tmp_path / "victim"
    victim.mkdir()
    manifest = artifact.directory / "manifest.json"
    data = json.loads(manifest.read_text())
    data["options"]["cache_dir"] = str(victim)
    manifest.write_text(json.dumps(data))
    runner = OpenVINOBackend().load(artifact.directory)
    assert runner.describe()["cache_dir"] is None and str(victim) in runner.describe()["cache_dir_ignored"]
    assert_matches_jit(target, sig, runner(sig.example_feed()), sig.example_feed())
    assert list(victim.iterdir()) == []
    OpenVINOBackend().load(artifact.directory, RunOptions(trust_artifact=True))  # trusted: the cache is used
    assert list(victim.iterdir()) != []


def nhwc_maxpool() -> Target:
    image = np.random.default_rng(2).normal(size=(1, 8, 8, 3)).astype(np.float32)

    def maxpool(b):  # jax2onnx writes a 6-D MaxPool, which ONNX Runtime runs and OpenVINO refuses
        return {"y": jax.lax.reduce_window(b["img"], -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")}

    return Target(maxpool, args=({"img": image},), name="maxpool")


def test_an_op_the_onnx_frontend_cannot_convert_is_unsupported_op_naming_it_and_its_node(tmp_path):
    import onnx
    import openvino as ov
    from onnx import TensorProto, helper

    from multiexport.backends.openvino.runner import classify_text

    # jax2onnx's graph for the NHWC max pool: a MaxPool over a 6-D input (its ONNX stage now refuses it
    # first, since ONNX Runtime fails on it too), here written as it was and given to OpenVINO as it is.
    node = helper.make_node("MaxPool", ["x"], ["pooled"], name="node_MaxPool_2", kernel_shape=[1, 2, 2, 1],
                            strides=[1, 2, 2, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 8, 8, 3])],
                              [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "model.onnx")
    with pytest.raises(RuntimeError) as info:
        ov.Core().read_model(str(tmp_path / "model.onnx"))
    category, reason = classify_text(str(info.value), tmp_path / "model.onnx")
    assert category == "unsupported-op"
    assert "cannot convert MaxPool-21 at node 'node_MaxPool_2' (output 'pooled')" in reason
    assert "Expected a 3D, 4D or 5D tensor" in reason


def test_auto_follows_the_stablehlo_route_when_jax2onnx_file_cannot_run(tmp_path):
    target = nhwc_maxpool()
    sig, artifact = export(target, tmp_path / "a")
    m = artifact.manifest
    assert m.format["onnx_route"] == "stablehlo" and m.format["onnx_route_requested"] == "auto"
    note = next(w for w in m.warnings if w.startswith(("route stablehlo", "ONNX route stablehlo")))
    assert "MaxPool" in note  # why jax2onnx's file was not used
    assert_matches_jit(target, sig, OpenVINOBackend().load(artifact.directory)(sig.example_feed()),
                       sig.example_feed(), "maxpool")


def test_the_onnx_route_option_picks_the_stage_route(tmp_path):
    target = examples.mlp()
    sig, artifact = export(target, tmp_path / "a", backend_options={"onnx_route": "stablehlo"})
    assert artifact.manifest.format["onnx_route"] == "stablehlo"
    assert artifact.manifest.format["stage"]["backend"] == "onnx"
    assert_matches_jit(target, sig, OpenVINOBackend().load(artifact.directory)(sig.example_feed()),
                       sig.example_feed(), "mlp")


def int64_target() -> Target:
    return Target(lambda x: {"double": x * 2, "total": jnp.sum(x)},
                  args=(np.array([2**40 + 3, -5, 2**33], np.int64),), name="int64")


def test_64bit_leaves_are_refused_because_openvino_computes_them_in_32_bits(tmp_path):
    with jax.enable_x64(True):
        target = int64_target()
        with pytest.raises(ExportError) as info:
            export(target, tmp_path / "a")
        assert info.value.category == "unsupported-dtype" and "Input 'x'" in str(info.value)
        assert "allow_64bit" in str(info.value)
        sig, artifact = export(target, tmp_path / "b", backend_options={"allow_64bit": True})  # asked for: a warning
        assert any("32 bits" in w for w in artifact.manifest.warnings)
        got = OpenVINOBackend().load(artifact.directory)(sig.example_feed())
        want = reference_outputs(target, sig, sig.example_feed())
    assert got["out.double"].dtype == np.int64
    assert not np.array_equal(got["out.double"], want["out.double"])  # why it is refused: silently wrong


def test_bf16_and_float8_go_through_their_bits_and_0d_stays_0d(tmp_path):
    for name in ("mlp_bf16", "float8", "scalar_0d"):
        target = case(name).make()
        sig, artifact = export(target, tmp_path / name)
        got = OpenVINOBackend().load(artifact.directory)(sig.example_feed())
        for leaf in sig.outputs:
            assert got[leaf.name].dtype.name == leaf.dtype and got[leaf.name].shape == tuple(leaf.shape)
        assert_matches_jit(target, sig, got, sig.example_feed(), name)


def test_read_only_inputs_are_copied_once_not_refused(exported):
    target, sig, artifact = exported["transformer"]
    feed = {k: v.copy() for k, v in sig.example_feed().items()}
    for value in feed.values():
        value.flags.writeable = False  # shared-memory tensors need writable buffers
    assert_matches_jit(target, sig, OpenVINOBackend().load(artifact.directory)(feed), feed)


@pytest.mark.subprocess
def test_importing_openvino_through_the_backend_sends_no_telemetry():
    code = ("import sys, os\nfrom multiexport.backends.openvino.runner import import_openvino, telemetry_state\n"
            "import_openvino()\nprint(telemetry_state(), os.environ.get('CI'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={k: v for k, v in __import__("os").environ.items() if k != "CI"}, timeout=120)
    assert out.stdout.split() == ["off", "None"]  # consent off for the process, the environment as it was


def test_gpu_is_refused_typed(exported):
    with pytest.raises(RunError) as info:
        OpenVINOBackend().load(exported["seed"][2].directory, "gpu")
    assert info.value.category in ("no-gpu", "unsupported-platform")
