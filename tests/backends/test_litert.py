"""LiteRT backend (SavedModel stage -> TFLite converter -> ai_edge_litert): the signature keys are the leaf
aliases, symbolic batches resize, outputs match jax.jit, and what the converter or the interpreter cannot
do fails typed: version skew naming both StableHLO versions, a missing builtin naming the op, a dtype gap."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import ExportError, Target, examples
from multiexport.backends.litert import LiteRTBackend
from multiexport.backends.litert.describe import LiteRTOptions
from multiexport.exporting import Artifact, ExportOptions, Manifest, RunOptions
from multiexport.exporting.job import ExportJob
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature

from ..cases import feed_for
from ..conftest import REPO, assert_matches_jit

KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "mlp_bf16": ("unsupported-dtype", "TFLite builtins have no bfloat16 BATCH_MATMUL (failed to legalize tfl.batch_matmul)"),
    "float8": ("unsupported-dtype", "TFLite builtins have no float8 CAST (failed to legalize tfl.cast)"),
    "float64": ("unsupported-dtype", "TFLite builtins have no float64 MUL (failed to legalize tfl.mul)"),
    "prng_key": ("unsupported-op", "jax.random's threefry needs uint32 shifts TFLite has no builtin for "
                                   "(failed to legalize tfl.right_shift)"),
}

_status = LiteRTBackend().available()
pytestmark = pytest.mark.skipif(not _status.ok, reason=f"litert backend unavailable: {_status.reason}")

TARGETS = {"seed": examples.seed, "mlp_dynamic": examples.mlp_dynamic, "transformer": examples.transformer}


def export(target, path, **options):
    sig = build_signature(target)
    return sig, LiteRTBackend().export(target.fn, sig, path, ExportOptions(**options))


def export_error(fn, args, tmp_path, **options) -> ExportError:
    with pytest.raises(ExportError) as info:
        export(Target(fn, args=args, name=fn.__name__ if hasattr(fn, "__name__") else "f"), tmp_path / "a", **options)
    assert info.value.backend == "litert"
    assert not (tmp_path / "a").exists()
    return info.value


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("litert")
    out = {}
    for name, make in TARGETS.items():
        target = make()
        sig, artifact = export(target, root / name)
        out[name] = (target, sig, artifact)
    return out


def test_seed_drops_the_unread_leaf_and_keep_unused_keeps_it(exported, tmp_path):
    _, _, seed = exported["seed"]
    by_name = {leaf.name: leaf for leaf in seed.manifest.inputs}
    assert (by_name["foo.bar"].used, by_name["foo.bar"].param) == (False, None)
    assert (by_name["foo.baz"].used, by_name["foo.baz"].param) == (True, "foo_baz")
    runner = LiteRTBackend().load(seed.directory)
    assert sorted(runner.signature["inputs"]) == ["foo_baz"] and sorted(runner.signature["outputs"]) == ["out"]
    assert runner({"foo.baz": np.arange(10, dtype=np.int32)})["out"] == 45  # foo.bar may be omitted

    _, kept = export(examples.seed(), tmp_path / "kept", keep_unused=True)
    assert [(leaf.name, leaf.used, leaf.param) for leaf in kept.manifest.inputs] == [
        ("foo.bar", True, "foo_bar"), ("foo.baz", True, "foo_baz")]
    runner = LiteRTBackend().load(kept.directory)
    assert sorted(runner.signature["inputs"]) == ["foo_bar", "foo_baz"]
    assert runner({"foo.bar": np.ones(10, np.int32), "foo.baz": np.arange(10, dtype=np.int32)})["out"] == 45


@pytest.mark.parametrize("name,batch", [("seed", None), ("mlp_dynamic", 1), ("mlp_dynamic", 8), ("transformer", None)])
def test_outputs_match_jit(exported, name, batch):
    target, sig, artifact = exported[name]
    feed = feed_for(sig, batch, seed=3)
    got = LiteRTBackend().load(artifact.directory)(feed)
    assert_matches_jit(target, sig, got, feed, f"batch={batch}")


def test_symbolic_batch_keeps_minus_one_and_one_interpreter_runs_two_sizes_in_any_order(exported):
    target, sig, artifact = exported["mlp_dynamic"]
    tensors = artifact.manifest.format["tensors"]
    assert tensors["inputs"]["batch.x"]["shape_signature"] == [-1, 16]
    assert tensors["outputs"]["out.logits"]["shape_signature"] == [-1, 4]
    runner = LiteRTBackend().load(artifact.directory)
    feeds = {b: feed_for(sig, b, seed=b) for b in (1, 8)}
    prepared = {b: runner.prepare(f) for b, f in feeds.items()}  # b=8 is now in the interpreter's tensors
    for b in (1, 8, 1):
        assert runner.run_prepared(prepared[b]) is None
        got = runner._name_outputs(runner._fetch_impl(prepared[b]))
        assert got["out.logits"].shape == (b, 4)
        assert_matches_jit(target, sig, got, feeds[b], f"b={b}")
    for _ in range(20):  # the timed call leaves its inputs intact: repeated calls compute the same outputs
        runner.run_prepared(prepared[1])
    assert np.array_equal(runner._fetch_impl(prepared[1])[0], runner(feeds[1])["out.logits"])
    assert runner.describe()["xnnpack_partitions"] > 1 and "partitions" in runner.describe()["dynamic_shapes"]


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


def test_manifest_states_builtins_versions_and_declared_dtypes(exported):
    import ai_edge_litert
    import tensorflow as tf

    m = exported["transformer"][2].manifest
    assert m.format["supported_ops"] == ["TFLITE_BUILTINS"] and m.format["select_tf_ops"] is False
    assert m.options == {"select_tf_ops": False} and m.requires["ops"] == ["TFLITE_BUILTINS"]
    assert m.versions["ai_edge_litert"] == ai_edge_litert.__version__ and m.versions["tensorflow"] == tf.__version__
    assert m.versions["converter_stablehlo"] == m.versions["module_stablehlo"]  # written for the converter's reader
    assert m.requires["tflite_min_runtime_version"] == m.format["metadata"]["min_runtime_version"]
    assert m.format["flex_ops"] == [] and "DELEGATE" not in m.format["ops"]
    tensors = m.format["tensors"]
    assert {n for n in tensors["inputs"]} == {leaf.name for leaf in m.inputs if leaf.param is not None}
    assert all(t["name"] == f"serving_default_{leaf.alias}:0" for leaf in m.inputs if leaf.param
               for t in [tensors["inputs"][leaf.name]])
    assert all(tensors["outputs"][leaf.name]["dtype"] == leaf.dtype for leaf in m.outputs)


def test_threads_reach_the_interpreter_and_the_calling_path_is_recorded(exported, monkeypatch):
    import ai_edge_litert.interpreter as interpreter_module

    built = []
    real = interpreter_module.Interpreter

    class Recording(real):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("num_threads"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(interpreter_module, "Interpreter", Recording)
    artifact = exported["transformer"][2]
    runner = LiteRTBackend().load(artifact.directory, RunOptions(threads=1))
    assert built == [1]
    described = runner.describe()
    assert described["num_threads"] == 1 and described["threads_requested"] == 1
    assert "invoke()" in described["calling_path"] and "set_tensor" in described["calling_path"]
    runner(exported["transformer"][1].example_feed())
    assert runner.describe()["xnnpack_partitions"] == 1  # a static graph: one XNNPACK partition
    LiteRTBackend().load(artifact.directory, RunOptions(threads=2))
    assert built == [1, 2]


def test_the_export_never_applies_xnnpack_in_its_own_process_and_counts_partitions_in_a_child(tmp_path, monkeypatch):
    """XNNPACK packs the weights when it is applied (allocate_tensors): the export reads the signature from an
    interpreter without the default delegates and counts the partitions in a child process holding only the file,
    so the packed copy never sits beside the target's weights; the facts are those the runner finds."""
    from ai_edge_litert import interpreter as interpreter_module

    allocated, resolvers, real = [], [], interpreter_module.Interpreter

    class Recording(real):
        def __init__(self, *args, **kwargs):
            resolvers.append(kwargs.get("experimental_op_resolver_type"))
            super().__init__(*args, **kwargs)

        def allocate_tensors(self):
            allocated.append(self)
            return super().allocate_tensors()

    monkeypatch.setattr(interpreter_module, "Interpreter", Recording)
    target = examples.transformer()
    sig, artifact = export(target, tmp_path / "t", check_load=False)  # as a compare's export worker: no load check
    assert allocated == [] and resolvers == [interpreter_module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES]
    runner = LiteRTBackend().load(artifact.directory, RunOptions(threads=1))
    runner(sig.example_feed())
    assert artifact.manifest.format["xnnpack_partitions"] == runner.describe()["xnnpack_partitions"] == 1


def _tampered_to_jax_own_stablehlo(target, tmp_path) -> Artifact:
    """A SavedModel of `target` whose XlaCallModule holds the module as jax.export writes it (its own StableHLO
    window, as jax2tf's native serialization saves it), not re-serialized for the TensorFlow that converts."""
    from tensorflow.core.protobuf import saved_model_pb2

    from multiexport.backends.savedmodel import SavedModelBackend
    from multiexport.exporting.stablehlo import export_module

    sig = build_signature(target)
    directory = tmp_path / "savedmodel"
    SavedModelBackend().export(target.fn, sig, directory, ExportOptions(check_load=False))
    raw = bytes(export_module(target.fn, sig).mlir_module_serialized)
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((directory / "saved_model.pb").read_bytes())
    for function in proto.meta_graphs[0].graph_def.library.function:
        for node in function.node_def:
            if node.op == "XlaCallModule":
                node.attr["module"].s = raw
    (directory / "saved_model.pb").write_bytes(proto.SerializeToString())
    return Artifact("savedmodel", directory, Manifest.read(directory, check_files=False))


def test_a_module_the_converter_cannot_read_is_version_skew_naming_both_versions(tmp_path):
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tfhlo

    from multiexport.backends.litert.convert import ConversionFailed, convert
    from multiexport.exporting.stablehlo import export_module, jax_stablehlo_versions, producer_version

    from ..cases import top_k

    target = top_k()  # lax.top_k's chlo.top_k composite: vhlo.composite_v2, which TF 2.21's StableHLO cannot read
    frontend = _tampered_to_jax_own_stablehlo(target, tmp_path)
    written = producer_version(bytes(export_module(target.fn, build_signature(target)).mlir_module_serialized))
    consumer = str(tfhlo.get_current_version())
    assert written == jax_stablehlo_versions()["stablehlo_export_target"] != consumer
    backend, sig = LiteRTBackend(), build_signature(target)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConversionFailed) as info:  # the pre-check: the converter's own StableHLO reader
        backend._export_impl(ExportJob(target.fn, sig, out, ExportOptions(), LiteRTOptions(), frontend))
    category, reason = backend.classify(info.value, "export")
    assert category == "version-skew"
    assert f"StableHLO {written}" in reason and f"reads StableHLO {consumer}" in reason
    assert "vhlo.composite_v2" in reason

    with pytest.raises(ConversionFailed) as info:  # without the pre-check: what the converter itself says
        convert(frontend.directory, select_tf_ops=False)
    assert "'tf.XlaCallModule' op is neither a custom op nor a flex op" in info.value.text
    category, reason = backend.classify(info.value, "export")
    assert category == "version-skew" and f"StableHLO {written}" in reason and consumer in reason


def test_top_k_converts_now_that_the_savedmodel_is_written_for_tensorflows_stablehlo(tmp_path):
    from ..cases import top_k

    target = top_k()
    sig, artifact = export(target, tmp_path / "a")
    assert artifact.manifest.versions["stablehlo_written_by_jax"] != artifact.manifest.versions["module_stablehlo"]
    assert_matches_jit(target, sig, LiteRTBackend().load(artifact.directory)(sig.example_feed()), sig.example_feed())


X = np.random.default_rng(0).normal(size=(4, 32)).astype(np.float32)
INTS = np.random.default_rng(1).integers(0, 100, size=(4, 32)).astype(np.int32)


def test_an_op_without_a_builtin_is_unsupported_op_naming_it(tmp_path):
    def popcount(b):
        return {"y": jax.lax.population_count(b["i"])}

    error = export_error(popcount, ({"i": INTS},), tmp_path)
    assert error.category == "unsupported-op"
    assert "tf.PopulationCount is not a TFLite builtin op" in str(error) and "ERROR_NEEDS_FLEX_OPS" in str(error)
    assert "SELECT_TF_OPS" in str(error) and "cannot run" in str(error)

    def sort(b):
        return {"y": jnp.sort(b["x"], axis=-1)}

    error = export_error(sort, ({"x": X},), tmp_path)
    assert error.category == "unsupported-op" and "stablehlo.sort" in str(error)


def test_select_tf_ops_is_an_option_and_the_interpreter_then_refuses_the_flex_model(tmp_path):
    def popcount(b):
        return {"y": jax.lax.population_count(b["i"])}

    error = export_error(popcount, ({"i": INTS},), tmp_path, backend_options={"select_tf_ops": True})
    assert error.category == "unsupported-op" and "flex" in str(error).lower() and "ai_edge_litert" in str(error)
    sig, artifact = export(Target(popcount, args=({"i": INTS},)), tmp_path / "b", check_load=False,
                           backend_options={"select_tf_ops": True})
    m = artifact.manifest
    assert m.options == {"select_tf_ops": True} and m.format["supported_ops"] == ["TFLITE_BUILTINS", "SELECT_TF_OPS"]
    assert m.format["flex_ops"] and any("Flex delegate" in w for w in m.warnings)


def test_a_model_that_converts_but_cannot_prepare_is_caught_by_the_load_check(tmp_path):
    def scatter_add(b):
        return {"y": jnp.zeros(100).at[b["i"]].add(1.0)}

    error = export_error(scatter_add, ({"i": INTS},), tmp_path)
    assert error.category == "unsupported-op" and "STABLEHLO_SCATTER" in str(error)
    # The kernel's own words ("Only update, Add, ... are supported") read as if an add should run: the reason
    # names the op the converter wrote in the region, which the kernel does not take (found on ops_scatter).
    assert "wrote the scatter's combining region as ADD" in str(error) and "not the model's math" in str(error)


def test_the_scatter_regions_of_a_converted_model_are_read_from_its_flatbuffer(tmp_path):
    """A plain update converts to an empty region (the kernel runs it); an add to a TFLite ADD (it does not)."""
    from multiexport.backends.litert.convert import MODEL_FILE, scatter_regions

    def writes(b):
        return {"y": jnp.zeros((100,), jnp.float32).at[b["i"]].set(2.0), "z": jnp.zeros((100,)).at[b["i"]].max(1.0)}

    sig, artifact = export(Target(writes, args=({"i": INTS},)), tmp_path / "a", check_load=False)
    regions = scatter_regions((artifact.directory / MODEL_FILE).read_bytes())
    assert sorted(regions) == [[], ["MAXIMUM"]], regions


@pytest.mark.parametrize("make", [examples.mlp_bf16, lambda: Target(lambda h: (h * 2 + 1).astype(jnp.float16),
                                                                    args=(X.astype(np.float16),), name="f16")],
                         ids=["bf16", "f16"])
def test_narrow_floats_are_unsupported_dtype(make, tmp_path):
    with pytest.raises(ExportError) as info:
        export(make(), tmp_path / "a")
    assert info.value.category == "unsupported-dtype" and "failed to legalize" in str(info.value)


def test_gpu_is_refused_typed(exported):
    from multiexport import RunError

    with pytest.raises(RunError) as info:
        LiteRTBackend().load(exported["seed"][2].directory, "gpu")
    assert info.value.category in ("no-gpu", "unsupported-platform")


def test_minus_inf_saturated_by_the_converter_is_a_true_parity_failure_that_says_so(tmp_path):
    """TFLite's converter stores a -inf constant as -max float32 (the SavedModel it starts from keeps -inf):
    the masked logits of a top-k filter differ from jax.jit, and the reason says which side holds the
    infinity and what the artifact holds instead (found on the real-model zoo's ops_topk)."""
    from multiexport.measure.parity import compare_leaf
    from multiexport.measure.tolerance import Tolerance

    def masked(x):
        return jnp.where(x > 0, x, -jnp.inf)

    target = Target(masked, args=(X,), name="masked")
    sig, artifact = export(target, tmp_path / "a")
    outputs = LiteRTBackend().load(artifact.directory)(sig.example_feed())
    got = np.asarray(outputs[sig.outputs[0].name])
    expected = np.asarray(jax.jit(masked)(X))
    assert np.isneginf(expected).sum() > 0
    assert np.array_equal(got[expected > 0], expected[expected > 0])
    assert np.all(got[np.isneginf(expected)] == np.finfo(np.float32).min)  # saturated, not -inf
    verdict = compare_leaf("out", got, expected, "float32", Tolerance(1e-5, 1e-6))
    assert not verdict.passed and verdict.stats.inf_ref_only == np.isneginf(expected).sum()
    assert verdict.stats.inf_got_only == 0
    assert "Inf in jax.jit's output where the artifact is finite" in verdict.reasons[0]
    assert "-max float32: an infinity saturated to the largest finite value" in verdict.reasons[0]
