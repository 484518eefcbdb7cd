"""ONNX backend (jax2onnx -> ONNX Runtime): graph names are leaf names, the graph says which leaves it
reads, outputs match jax.jit, and what jax2onnx or ONNX Runtime cannot do fails typed and categorised."""

from __future__ import annotations

import json
import shutil

import flax.linen as nn
import jax
import numpy as np
import pytest

from multiexport import ArtifactError, ExportError, RunError, Target, examples
from multiexport.backends.onnx import OPSET, OnnxBackend
from multiexport.exporting import ExportOptions
from multiexport.files import current_umask
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature

from ..cases import feed_for
from ..conftest import assert_matches_jit, reference_outputs, run_cli, tamper

# Every case of tests/cases.py converts and runs; no known limitation to declare.
KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "mlp_bf16": ("unsupported-dtype", "ONNX Runtime's CPU provider has no bfloat16 Gemm/MatMul kernel"),
    "float8": ("unsupported-dtype", "ONNX Runtime's Python binding cannot carry float8 arrays"),
}

_status = OnnxBackend().available()
pytestmark = pytest.mark.skipif(not _status.ok, reason=f"onnx backend unavailable: {_status.reason}")


def export(target, path, backend=None, **options):
    sig = build_signature(target)
    return sig, (backend or OnnxBackend()).export(target.fn, sig, path, ExportOptions(**options))


class PoolCNN(nn.Module):
    """A CNN with flax.linen avg_pool called the usual way (window shape positional)."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(4, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        return nn.Dense(3)(x.reshape((x.shape[0], -1)))


def pool_cnn() -> Target:
    model = PoolCNN()
    image = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype(np.float32)
    params = model.init(jax.random.key(0), image)["params"]
    return Target(lambda params, batch: model.apply({"params": params}, batch["image"]),
                  args=(params, {"image": image}), name="pool_cnn")


def mlp_with_baked_weights() -> Target:
    """The MLP with its parameters closed over, so they become ONNX initializers (tensors in the file)."""
    base = examples.mlp()
    params, batch = base.args
    return Target(lambda batch: base.fn(params, batch), args=(batch,), name="mlp_baked")


def test_seed_graph_reads_one_leaf_and_keep_unused_keeps_both(tmp_path):
    _, seed = export(examples.seed(), tmp_path / "seed")
    by_name = {leaf.name: leaf for leaf in seed.manifest.inputs}
    assert (by_name["foo.bar"].used, by_name["foo.bar"].param) == (False, None)
    assert (by_name["foo.baz"].used, by_name["foo.baz"].param) == (True, "foo.baz")
    assert seed.manifest.format["graph_inputs"] == ["foo.baz"]
    assert seed.manifest.format["unread_inputs"] == ["foo.bar"]
    runner = OnnxBackend().load(seed.directory)
    assert [i.name for i in runner.session.get_inputs()] == ["foo.baz"]
    assert runner({"foo.baz": np.arange(10, dtype=np.int32)})["out"] == 45  # foo.bar may be omitted

    _, kept = export(examples.seed(), tmp_path / "kept", keep_unused=True)
    assert [(leaf.name, leaf.used, leaf.param) for leaf in kept.manifest.inputs] == [
        ("foo.bar", True, "foo.bar"), ("foo.baz", True, "foo.baz")]
    assert kept.manifest.format["unread_inputs"] == ["foo.bar"]  # taken, never read: the manifest says so
    assert any("never reads foo.bar" in w for w in kept.manifest.warnings)
    assert [i.name for i in OnnxBackend().load(kept.directory).session.get_inputs()] == ["foo.bar", "foo.baz"]


@pytest.mark.parametrize("make", [examples.seed, examples.mlp, examples.transformer], ids=lambda m: m.__name__)
def test_ort_names_are_leaf_names_and_outputs_match_jit(make, tmp_path):
    target = make()
    sig, artifact = export(target, tmp_path / "a")
    runner = OnnxBackend().load(artifact.directory)
    used = [leaf.name for leaf in artifact.manifest.inputs if leaf.used]
    assert [i.name for i in runner.session.get_inputs()] == used
    assert [o.name for o in runner.session.get_outputs()] == [leaf.name for leaf in sig.outputs]
    assert_matches_jit(target, sig, runner(sig.example_feed()), sig.example_feed())


@pytest.mark.subprocess
def test_transformer_runs_from_disk_in_a_fresh_process(tmp_path):
    target = examples.transformer()
    sig, artifact = export(target, tmp_path / "a")
    # trained-like weights (the init), fresh activations: the numbers a deployed block sees
    feed = {**sig.example_feed(), "batch.x": np.random.default_rng(3).normal(size=(2, 16, 64)).astype(np.float32)}
    save_npz(tmp_path / "in.npz", feed)
    run_cli("run", artifact.directory, "--inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "out.npz", check=True)
    assert_matches_jit(target, sig, load_npz(tmp_path / "out.npz"), feed)


def test_symbolic_batch_is_a_named_dim_and_runs_at_two_sizes(tmp_path):
    import onnx

    target = examples.mlp_dynamic()
    sig, artifact = export(target, tmp_path / "a")
    graph = onnx.load(artifact.directory / "model.onnx").graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*graph.input, *graph.output]}
    assert dims["batch.x"] == ["b", 16] and dims["out.logits"] == ["b", 4]
    runner = OnnxBackend().load(artifact.directory)
    for batch in (1, 5):
        feed = feed_for(sig, batch)
        got = runner(feed)
        assert got["out.logits"].shape == (batch, 4)
        assert_matches_jit(target, sig, got, feed, f"b={batch}")


def test_leaves_read_only_inside_a_subgraph_are_used(tmp_path):
    def branchy(p, x, spare):
        return jax.lax.cond(x.sum() > 0, lambda: x * p["a"], lambda: x - p["b"])

    target = Target(branchy, args=({"a": np.float32(2), "b": np.float32(3)}, np.ones(3, np.float32), np.ones(2, np.float32)))
    sig, artifact = export(target, tmp_path / "a")
    assert [(leaf.name, leaf.used) for leaf in artifact.manifest.inputs] == [
        ("p.a", True), ("p.b", True), ("x", True), ("spare", False)]
    runner = OnnxBackend().load(artifact.directory)
    for feed in ({"p.a": np.float32(2), "p.b": np.float32(3), "x": np.ones(3, np.float32)},
                 {"p.a": np.float32(2), "p.b": np.float32(3), "x": -np.ones(3, np.float32)}):
        got = runner(feed)
        full = {**feed, "spare": np.zeros(2, np.float32)}
        assert_matches_jit(target, sig, got, full)


def test_leaf_named_like_an_internal_value_keeps_its_name(tmp_path):
    # jax2onnx names constants const_0, const_1, ...: a leaf of that name pushes the constant aside
    target = Target(lambda const_0, const_1: const_0 * 3.0 + const_1 + 1.0,
                    args=(np.ones(3, np.float32), np.ones(3, np.float32)))
    sig, artifact = export(target, tmp_path / "a")
    runner = OnnxBackend().load(artifact.directory)
    assert [i.name for i in runner.session.get_inputs()] == ["const_0", "const_1"]
    assert_matches_jit(target, sig, runner(sig.example_feed()), sig.example_feed())


def test_manifest_records_versions_opset_and_size(tmp_path):
    import onnx
    import onnxruntime

    _, artifact = export(examples.mlp(), tmp_path / "a")
    m = artifact.manifest
    model = onnx.load(artifact.directory / "model.onnx")
    assert m.format["opset"] == OPSET == [o.version for o in model.opset_import if o.domain == ""][0]
    assert m.format["ir_version"] == model.ir_version
    assert m.versions["onnx"] == onnx.__version__ and m.versions["onnxruntime"] == onnxruntime.__version__
    assert m.versions["onnx_opset"] == str(OPSET) and m.versions["jax2onnx"]
    assert m.format["model_bytes"] == (artifact.directory / "model.onnx").stat().st_size
    assert m.files == {"model": "model.onnx", "example_inputs": "example_inputs.npz"} and m.format["external_data"] is False
    assert m.options == {"route": "auto", "opset": OPSET, "external_data_threshold": 2**31 - 2**26}  # the options used
    assert m.format["route"] == "jax2onnx" and m.format["route_requested"] == "auto"  # jax2onnx's graph ran


def test_first_use_cost_is_paid_once_per_process_and_recorded(tmp_path):
    _, first = export(examples.seed(), tmp_path / "a")
    _, second = export(examples.seed(), tmp_path / "b")
    paid = first.manifest.format["jax2onnx_first_use_seconds_in_process"]
    assert paid > 0  # measured when some export in this process imported the plugins
    assert second.manifest.format["setup"]["seconds"] == 0.0 and "jax2onnx" in second.manifest.format["setup"]["what"]
    assert second.manifest.format["jax2onnx_first_use_seconds_in_process"] == paid


def test_runner_records_threads_providers_and_calling_path(tmp_path):
    from multiexport.exporting import RunOptions

    _, artifact = export(examples.seed(), tmp_path / "a")
    runner = OnnxBackend().load(artifact.directory)
    described = runner.describe()
    assert described["intra_op_threads"] >= 1 and described["inter_op_threads"] == 1
    assert described["graph_optimization_level"].endswith("ORT_ENABLE_ALL")
    assert described["execution_mode"].endswith("ORT_SEQUENTIAL")
    assert described["intra_op_allow_spinning"] == described["inter_op_allow_spinning"] == "1"  # read back from ORT
    assert described["providers"] == ["CPUExecutionProvider"]
    assert "run_with_iobinding" in runner.calling_path
    single = OnnxBackend().load(artifact.directory, RunOptions(threads=1)).describe()
    assert single["intra_op_threads"] == 1 and single["threads_requested"] == 1
    prepared = runner.prepare({"foo.baz": np.arange(10, dtype=np.int32)})
    assert runner.run_prepared(prepared) is None


def test_a_0d_input_stays_0d_and_a_faithful_model_passes(tmp_path):
    """np.ascontiguousarray made 0-d inputs shape (1,): `got shape (1,), expected ()` on a faithful model."""
    from ..cases import scalar_0d

    target = scalar_0d()
    sig, artifact = export(target, tmp_path / "a")
    assert artifact.manifest.inputs[0].shape == [] and artifact.manifest.outputs[0].shape == []
    got = OnnxBackend().load(artifact.directory)(sig.example_feed())
    assert got["out"].shape == ()
    assert_matches_jit(target, sig, got, sig.example_feed())


def test_gpu_without_the_cuda_provider_is_a_run_error(tmp_path):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has the CUDA provider; the refusal cannot happen here")
    _, artifact = export(examples.seed(), tmp_path / "a")
    with pytest.raises(RunError, match="has providers .*CPUExecutionProvider.*expected CUDAExecutionProvider"):
        OnnxBackend().load(artifact.directory, "gpu")


def test_flax_avg_pool_is_an_unsupported_op_with_jax2onnx_reason(tmp_path):
    target = pool_cnn()
    with pytest.raises(ExportError) as info:
        export(target, tmp_path / "a", backend_options={"route": "jax2onnx"})
    assert info.value.category == "unsupported-op" and info.value.backend == "onnx"
    assert "AvgPoolPlugin" in str(info.value) and "positional argument" in str(info.value)  # jax2onnx's reason
    assert not (tmp_path / "a").exists() and not list(tmp_path.iterdir())  # no artifact, no staging left


def test_bf16_is_valid_onnx_that_ort_cpu_cannot_run_so_the_export_says_so_typed(tmp_path):
    # The graph is valid ONNX (the checker accepts bf16 Gemm); ONNX Runtime's CPU provider has no bf16
    # kernel. The load check at export runs it with the installed runtime, so the export fails, typed.
    with pytest.raises(ExportError) as info:
        export(examples.mlp_bf16(), tmp_path / "a")
    assert info.value.category == "unsupported-dtype"
    assert "NOT_IMPLEMENTED" in str(info.value) and "Could not find an implementation" in str(info.value)
    assert not (tmp_path / "a").exists()
    sig, artifact = export(examples.mlp_bf16(), tmp_path / "b", check_load=False)  # asked for: written, then refused
    with pytest.raises(RunError) as info:
        OnnxBackend().load(artifact.directory)
    assert info.value.category == "unsupported-dtype"


@pytest.mark.subprocess
def test_forced_external_data_loads_from_its_directory_in_a_fresh_process(tmp_path):
    target = mlp_with_baked_weights()  # a threshold of 0 bytes: as if the protobuf were past 2 GiB
    sig, artifact = export(target, tmp_path / "a", backend_options={"external_data_threshold": 0})
    m, d = artifact.manifest, artifact.directory
    assert m.files == {"model": "model.onnx", "external_data": "model.onnx.data", "example_inputs": "example_inputs.npz"}
    assert m.format["external_data"] and m.options["external_data_threshold"] == 0
    sizes = [a.size * 4 for a in jax.tree_util.tree_leaves(examples.mlp().args[0])]
    # tensors of 1 KiB and more go to the data file; the model file keeps the graph and the small ones
    assert (d / "model.onnx.data").stat().st_size >= sum(s for s in sizes if s >= 1024) > 0
    assert (d / "model.onnx").stat().st_size < sum(sizes)
    assert (d / "model.onnx.data").stat().st_mode & 0o044 == 0o044 & ~current_umask()  # readable like the rest
    assert m.format["model_bytes"] == (d / "model.onnx").stat().st_size + (d / "model.onnx.data").stat().st_size

    moved = tmp_path / "elsewhere" / "artifact"  # tensors are found beside the model, wherever it is
    shutil.copytree(d, moved)
    shutil.rmtree(d)
    save_npz(tmp_path / "in.npz", sig.example_feed())
    run_cli("run", moved, "--inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "out.npz", check=True)
    assert_matches_jit(target, sig, load_npz(tmp_path / "out.npz"), sig.example_feed())

    (moved / "model.onnx.data").unlink()
    with pytest.raises(ArtifactError, match="external_data file 'model.onnx.data' .* missing"):
        OnnxBackend().load(moved)


def test_corrupt_or_mismatched_artifacts_are_artifact_errors(tmp_path):
    _, artifact = export(examples.seed(), tmp_path / "a")
    manifest_path = artifact.directory / "manifest.json"
    data = json.loads(manifest_path.read_text())
    data["inputs"][0]["param"] = "foo.bar"  # claims a graph input the model does not have
    manifest_path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="has inputs \\['foo.baz'\\].*manifest expects \\['foo.bar', 'foo.baz'\\]"):
        OnnxBackend().load(artifact.directory)
    tamper(artifact.directory, lambda d: (d / "model.onnx").write_bytes((d / "model.onnx").read_bytes()[:40]))
    with pytest.raises(ArtifactError, match="ONNX Runtime cannot load model.onnx"):
        OnnxBackend().load(artifact.directory)


def test_an_invalid_graph_fails_validation_typed(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from multiexport.backends.onnx.convert import validate as _validate

    # Add reads a value nothing defines: the checker must refuse it before anything is published.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"])], "broken", [x], [y])
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10),
                    tmp_path / "model.onnx")
    with pytest.raises(ExportError) as info:
        _validate(tmp_path / "model.onnx", "onnx")
    assert info.value.category == "invalid-model" and "ghost" in str(info.value)


def test_external_weights_always_moves_initializers_and_never_refuses_past_the_limit(tmp_path, monkeypatch):
    target = mlp_with_baked_weights()
    sig, artifact = export(target, tmp_path / "always", external_weights="always")
    m, d = artifact.manifest, artifact.directory
    assert m.files["external_data"] == "model.onnx.data" and m.format["external_data"]
    assert m.weights["storage"] == "external" and m.weights["external_bytes"] == (d / "model.onnx.data").stat().st_size
    sizes = [a.size * 4 for a in jax.tree_util.tree_leaves(examples.mlp().args[0])]
    assert (d / "model.onnx.data").stat().st_size >= sum(s for s in sizes if s >= 1024) > 0  # every one of >= 1 KiB
    assert_matches_jit(target, sig, OnnxBackend().load(d)(sig.example_feed()), sig.example_feed())

    _, auto = export(target, tmp_path / "auto")  # below 16 MiB: one protobuf
    assert "external_data" not in auto.manifest.files and auto.manifest.weights["storage"] == "embedded"
    from multiexport.leaves import weights

    monkeypatch.setattr(weights, "AUTO_MIN_BYTES", 1024)  # as if the weights were past 16 MiB
    _, auto = export(target, tmp_path / "auto-large")
    assert auto.manifest.files["external_data"] == "model.onnx.data" and auto.manifest.weights["storage"] == "external"

    with pytest.raises(ExportError) as info:  # a threshold of 1 KiB: as if the weights were past 2 GiB
        export(target, tmp_path / "never", external_weights="never", backend_options={"external_data_threshold": 1024})
    assert info.value.category == "size-limit" and "external weights 'never'" in str(info.value)
    assert not (tmp_path / "never").exists()


def test_tensor_bytes_count_each_initializer_once():
    """What decides external data past 2 GiB: counting the main graph twice moved 1.3 GB models out at half the limit."""
    from multiexport.backends.onnx.convert import convert, tensor_bytes as _tensor_bytes

    target = examples.lm("small", "baked")
    sig = build_signature(target)
    model = convert(target.fn, sig, OPSET, False)
    initializers = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    assert initializers >= 0.9 * sig.weights["baked_bytes"]
    assert initializers <= _tensor_bytes(model) < 1.1 * sig.weights["baked_bytes"]


def test_weights_inside_onnx_functions_are_counted_and_moved_to_external_data(tmp_path):
    """jax2onnx puts @onnx_function modules' weights inside ONNX functions: they counted 0 bytes and stayed
    embedded whatever --external-weights said. Now they are counted, and `always` moves them out."""
    from flax import nnx
    from jax2onnx import onnx_function

    from multiexport.backends.onnx.convert import convert, tensor_bytes

    @onnx_function
    class Block(nnx.Module):
        def __init__(self, dim, rngs):
            self.linear = nnx.Linear(dim, dim, rngs=rngs)

        def __call__(self, x):
            return nnx.gelu(self.linear(x))

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.a, self.b = Block(64, rngs), Block(64, rngs)

        def __call__(self, x):
            return self.b(self.a(x))

    model = Model(nnx.Rngs(0))
    target = Target(lambda x: model(x), args=(np.ones((2, 64), np.float32),), name="functions")
    sig = build_signature(target)
    ir_model = convert(target.fn, sig, OPSET, False)
    assert ir_model.functions, "jax2onnx no longer emits functions here: the test needs another model"
    assert tensor_bytes(ir_model) >= 0.9 * sig.weights["baked_bytes"] > 0
    _, artifact = export(target, tmp_path / "a", external_weights="always")
    data = (artifact.directory / "model.onnx.data").stat().st_size
    assert data >= 0.9 * sig.weights["baked_bytes"]
    assert (artifact.directory / "model.onnx").stat().st_size < 0.5 * sig.weights["baked_bytes"]
    assert_matches_jit(target, sig, OnnxBackend().load(artifact.directory)(sig.example_feed()), sig.example_feed())


def test_a_float64_target_exports_in_double_precision_or_not_at_all(tmp_path):
    from ..cases import float64

    with jax.enable_x64(True):
        target = float64()
        sig, artifact = export(target, tmp_path / "a")
        want = reference_outputs(target, sig, sig.example_feed())
    assert artifact.manifest.format["double_precision"] is True
    import onnx

    model = onnx.load(artifact.directory / "model.onnx")
    elem = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    assert elem == {"x": onnx.TensorProto.DOUBLE, "n": onnx.TensorProto.INT64}
    got = OnnxBackend().load(artifact.directory)(sig.example_feed())
    np.testing.assert_array_equal(got["out.y"], want["out.y"])
    assert got["out.m"].dtype == np.int64


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("spec,equinox", [
    ("multiexport.examples:mlp_dynamic", None), ("multiexport.examples:embedding", None),
    ("benchmarks.real_models:eqx_cnn", "control_primitives, conv, linear, max_pool, pool"),
    ("tests.cases:eqx_layer_built_inside", "control_primitives, prelu")])
def test_the_selective_plugin_import_writes_the_same_onnx_as_jax2onnx_own(spec, equinox, tmp_path):
    """Only the plugins a conversion can use are imported (~1 s instead of ~11 s of CPU): the file is
    byte-identical. With equinox, only the plugin files of the layers that run in a trace of the function
    (one built inside it too), not the ~10 CPU-s of all of them."""
    fast = run_cli("export", spec, "--backend", "onnx", "--out-dir", tmp_path / "fast",
                   env={"MULTIEXPORT_JAX2ONNX_ALL_PLUGINS": "0"})
    full = run_cli("export", spec, "--backend", "onnx", "--out-dir", tmp_path / "full",
                   env={"MULTIEXPORT_JAX2ONNX_ALL_PLUGINS": "1"})
    if full.returncode != 0:  # the converter itself cannot (jax2onnx 0.17.1 on jax 0.12: nested jit): the same way
        assert fast.returncode == full.returncode and fast.stderr.splitlines()[-1] == full.stderr.splitlines()[-1]
        assert "Backend 'onnx' | jax2onnx" in full.stderr.splitlines()[-1]
        return
    assert fast.returncode == full.returncode == 0, fast.stderr
    assert (tmp_path / "fast" / "model.onnx").read_bytes() == (tmp_path / "full" / "model.onnx").read_bytes()
    how = {d: json.loads((tmp_path / d / "manifest.json").read_text())["format"]["setup"]["what"] for d in ("fast", "full")}
    assert "selective" in how["fast"] and "all" in how["full"]
    assert (f"equinox plugins: {equinox} (" in how["fast"]) if equinox else "equinox" not in how["fast"]


@pytest.mark.parametrize("exc", [AttributeError("module 'jax._src.core' has no attribute 'ClosedJaxpr'"),
                                 ImportError("cannot import name 'ClosedJaxpr' from 'jax.core' (/x/jax/core.py)")])
def test_jax2onnx_reaching_for_a_jax_internal_this_jax_lacks_is_version_skew_not_unsupported_op(exc):
    """jax2onnx 0.17.1 on jax 0.12 (the newest leg) fails on any nested jit this way: no op of the model is at
    fault, so the row must not say `unsupported-op` (a user would drop the format for the wrong reason)."""
    from multiexport.backends.onnx.convert import conversion_error
    from multiexport.versions import dist_version

    error = conversion_error(exc, build_signature(examples.seed()))
    assert error.category == "version-skew"
    assert f"jax2onnx {dist_version('jax2onnx')} cannot convert with jax {dist_version('jax')}" in str(error)
    assert "ClosedJaxpr, which this jax does not have" in str(error) and "jax2onnx release made for jax" in str(error)


def test_converter_messages_name_the_functions_own_inputs_and_leave_an_ops_operands_alone():
    """`xs[4]` inside nn.scan indexes the scan's own operands: renaming it named an unrelated weight (a false lead)."""
    from multiexport.backends.onnx.convert import conversion_error, rename_positional

    sig = build_signature(examples.mlp())
    names = [leaf.name for leaf in sig.inputs]
    text = rename_positional("TracerArrayConversionError: in_6 is traced; scan body xs[4], args[2]; in_99", sig)
    assert f"input leaf '{names[6]}'" in text and "xs[4]" in text and "args[2]" in text and "in_99" in text
    error = conversion_error(NotImplementedError("ConvPlugin: in_0 is a Tracer, expected a concrete value"), sig)
    assert error.category == "unsupported-op" and f"input leaf '{names[0]}'" in str(error)
    assert "bake it in" in str(error)
    scan = conversion_error(NotImplementedError("ScanPlugin: xs[4] is a Tracer"), sig)
    assert scan.category == "unsupported-op" and "bake" not in str(scan)  # no way out that does not apply


def test_a_scan_whose_shape_jax2onnx_traces_is_a_converter_error_that_says_whose_limitation_it_is(tmp_path):
    """flax.linen's nn.RNN(LSTMCell) (benchmarks/real_models:linen_lstm): jax2onnx 0.17 re-traces a static shape as
    a value; the row says it is the converter's limitation, not the model's, and keeps the converter's key line."""
    from benchmarks.real_models import linen_lstm

    target = linen_lstm()
    with pytest.raises(ExportError) as info:
        OnnxBackend().export(target.fn, build_signature(target), tmp_path / "lstm",  # auto: the StableHLO route
                             ExportOptions(backend_options={"route": "jax2onnx"}))
    assert info.value.category == "converter-error"
    assert "Shapes must be 1D sequences of concrete values" in str(info.value)
    assert "a converter limitation, not the model's math" in str(info.value)
    assert not (tmp_path / "lstm").exists()


def test_an_operator_whose_onnx_schema_has_no_bfloat16_is_unsupported_dtype_naming_it(tmp_path):
    """jax2onnx writes a bfloat16 Einsum (gpt_bf16 in benchmarks/real_models); ONNX's Einsum takes no bfloat16,
    so the format cannot express it: unsupported-dtype naming the operator, not a vague invalid-model."""
    import ml_dtypes

    a = np.ones((2, 3, 4), ml_dtypes.bfloat16)
    b = np.ones((2, 4, 5), ml_dtypes.bfloat16)
    target = Target(lambda a, b: jax.numpy.einsum("bij,bjk->bik", a, b), args=(a, b), name="bf16_einsum")
    with pytest.raises(ExportError) as info:
        OnnxBackend().export(target.fn, build_signature(target), tmp_path / "e",
                             ExportOptions(backend_options={"route": "jax2onnx"}))
    assert info.value.category == "unsupported-dtype", str(info.value)
    assert "ONNX's Einsum operator does not take bfloat16" in str(info.value)
