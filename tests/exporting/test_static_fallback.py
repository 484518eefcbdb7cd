"""The static-size fallback: a converter that cannot keep a symbolic dimension gets one model per size.

Real converters where one exists (the TFLite converter has no stablehlo.dynamic_gather, which only a
symbolic batch produces), and test backends that refuse symbolic signatures as jax2onnx does on Python
shape logic, one of them numerically wrong so a fallback artifact can be shown to fail parity.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import RunError, Target, export, load, signature
from multiexport.comparison import compare
from multiexport.exporting.registry import get_backend
from multiexport.exporting.static_fallback import size_dir, specialize
from multiexport.results import Status

from ..conftest import assert_matches_jit, run_in_worker

needs_litert = pytest.mark.skipif(not get_backend("litert").available().ok, reason="litert unavailable")


def first_row() -> Target:
    """`x[:, 0]` over a symbolic batch lowers to stablehlo.dynamic_gather (its slice sizes hold b)."""
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    return Target(lambda x: {"first": jnp.tanh(x)[:, 0] * 2.0}, args=(x,), name="first_row", symbolic_batch="b")


def scaled() -> Target:
    """A symbolic batch through a matmul: every converter that takes symbolic dims at all takes this one."""
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    return Target(lambda batch: {"y": jnp.tanh(batch["x"] @ w)}, args=({"x": x},), name="scaled",
                  symbolic_batch="b", batch_leaves=("batch.*",))


def test_specialize_fixes_every_symbolic_dim_and_tiles_the_examples_along_it():
    sig = signature(scaled())
    fixed = specialize(sig, {"b": 5})
    assert fixed.symbolic_dims == () and fixed.inputs[0].shape == (5, 4) and fixed.outputs[0].shape == (5, 3)
    assert [tuple(s.shape) for s in fixed.specs] == [(5, 4)]
    example = sig.examples[0]
    assert np.array_equal(fixed.examples[0], example[[0, 1, 0, 1, 0]])  # the example's rows, in its domain
    assert specialize(sig, {"b": 1}).examples[0].shape == (1, 4)


@needs_litert
def test_a_symbolic_model_the_tflite_converter_cannot_take_is_exported_once_per_size(tmp_path):
    target = first_row()
    artifact = export(target, tmp_path / "litert", backend="litert", static_sizes={"b": (1, 3)})
    manifest = artifact.manifest
    assert manifest.supports["dims"] == {"b": [1, 2, 3]}
    facts = manifest.format["static_fallback"]
    assert "dynamic_gather" in facts["why"] and sorted(facts["models"]) == ["b=1", "b=2", "b=3"]
    assert any(w.startswith("fixed sizes only: litert could not export the symbolic dimension b") and
               "dynamic_gather" in w for w in manifest.warnings)
    assert [leaf.shape for leaf in manifest.inputs] == [["b", 5, 3]]  # the leaves as the function declares them
    for key in facts["models"]:
        assert (artifact.directory / size_dir({"b": int(key[2:])}) / "model.tflite").is_file()

    sig = signature(target)
    feeds = [{"x": np.random.default_rng(n).standard_normal((n, 5, 3)).astype(np.float32)} for n in (3, 1)]
    worker = run_in_worker(artifact.directory, feeds)  # from disk, in a fresh process, as compare runs it
    assert worker.failure is None, worker.failure
    for feed, got in zip(feeds, worker.outputs):
        assert_matches_jit(target, sig, got, feed)
    with pytest.raises(RunError, match=r"got b=4, expected one of the sizes it was built for") as caught:
        load(artifact.directory)({"x": np.zeros((4, 5, 3), np.float32)})
    assert caught.value.category == "size-unsupported"


def test_without_a_size_a_converter_takes_the_symbolic_error_stands(tmp_path, fault_backends):
    """A failure no fixed size avoids (the static export fails too) is the symbolic export's error, with the
    static attempt's words beside it: never an artifact, never a different category."""
    with pytest.raises(Exception, match=r"does not support the op 'reduce_precision' \(a static export at b=2 failed "
                                        r"too: .*reduce_precision") as caught:
        export(scaled(), tmp_path / "x", backend="xla_export_fails")
    assert getattr(caught.value, "category", None) == "export-failed"
    assert not (tmp_path / "x").exists()


def test_a_compare_checks_and_times_a_fallback_artifact_at_every_size_it_checks(tmp_path, fault_backends):
    from multiexport.measure.bench import BenchConfig

    results = compare(scaled(), backends=["xla", "xla_static_only"], out_dir=tmp_path, trials=2,
                      dim_sizes={"b": (1, 4)}, batch_sizes=(1, 4), paired=False,
                      bench=BenchConfig(warmup_iters=1, warmup_time=0.0, min_iters=5, bench_time=0.05))
    row = results.backends["xla_static_only"]
    assert row.status is Status.OK, row.reason
    assert row.supports["dims"] == {"b": [1, 2, 4]}  # the example's size and every size the compare checks
    assert any("b=1" in t for t in row.parity.trials) and any("b=4" in t for t in row.parity.trials)
    assert {s.batch: s.status for s in row.bench.sizes} == {1: Status.OK, 4: Status.OK}
    assert any("fixed sizes only" in w and "requires a constant" in w for w in row.warnings)
    # holding every size the compare checks, it is checked on the compare's own trials, each once
    assert sorted(row.parity.trials) == sorted(t.name for t in results.trials)


def test_a_fallback_artifact_lacking_sizes_is_checked_and_timed_at_those_it_holds(tmp_path, fault_backends):
    """A size the artifact holds no model for is size-unsupported alone: the row keeps its parity and its other
    sizes' latency (the timed feed at b=4 ran anyway and failed the whole row: the top manifest's leaves stay
    symbolic, so every feed seemed to fit). Its trials there are replaced by as many at its first size, numbered
    after the compare's own: two feeds never share a name (they did: "random0 b=1" was the compare's and an
    extra one)."""
    from multiexport.measure.bench import BenchConfig

    results = compare(scaled(), backends=["xla", "xla_static_small"], out_dir=tmp_path, trials=2,
                      dim_sizes={"b": (1, 4)}, batch_sizes=(1, 4), paired=False,
                      bench=BenchConfig(warmup_iters=1, warmup_time=0.0, min_iters=5, bench_time=0.05))
    row = results.backends["xla_static_small"]
    assert row.status is Status.OK, row.reason
    assert row.supports["dims"] == {"b": [1, 2]}
    assert "not supported by this artifact: trials random0 b=4, random1 b=4" in row.reason
    names = row.parity.trials
    assert len(set(names)) == len(names), names
    assert {"random0 b=1", "random1 b=1", "random2 b=2", "random3 b=2"} <= set(names), names  # at its first model
    assert {s.batch: s.status for s in row.bench.sizes} == {1: Status.OK, 4: Status.SIZE_UNSUPPORTED}


def test_over_two_dims_a_combination_of_held_sizes_that_was_not_built_is_not_run(tmp_path, fault_backends):
    """b in {1, 3} and s in {2, 4} were each built, but b=3 with s=4 was not: that trial is skipped, not run
    (every size of each dim was taken as every combination of them), and the row stays ok on the others."""
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    target = Target(lambda batch: {"y": jnp.tanh(batch["x"]) * 2.0}, args=({"x": x},), name="two_dims",
                    polymorphic_shapes={"batch.x": "b, s"})
    results = compare(target, backends=["xla_static_small"], out_dir=tmp_path, trials=1, bench=None,
                      dim_sizes={"b": (1, 3), "s": (2, 4)})
    row = results.backends["xla_static_small"]
    assert row.status is Status.OK, row.reason
    models = load(tmp_path / "xla_static_small").manifest.format["static_fallback"]["models"]
    assert "b=3,s=4" not in models and {"b=1,s=4", "b=3,s=2"} <= set(models), models
    on_3_4 = [t.name for t in results.trials if t.dims == {"b": 3, "s": 4}]
    assert on_3_4 and not set(on_3_4) & set(row.parity.trials)
    assert f"not supported by this artifact: trials {on_3_4[0]}" in row.reason


def test_a_fallback_artifact_that_disagrees_with_jax_is_parity_failed(tmp_path, fault_backends):
    results = compare(scaled(), backends=["xla_static_only_perturbed"], out_dir=tmp_path, trials=2, bench=None)
    row = results.backends["xla_static_only_perturbed"]
    assert row.status is Status.PARITY_FAILED, row.reason
    assert "static_fallback" in (tmp_path / "xla_static_only_perturbed" / "manifest.json").read_text()


def test_a_symbolic_model_that_runs_but_computes_wrong_is_rebuilt_at_static_sizes(tmp_path, fault_backends):
    """The export's load check compares a symbolic artifact with jax.jit at the example; a grossly wrong one
    (LiteRT on keras-hub's Llama) is replaced by the static sizes, which parity then checks like any other."""
    results = compare(scaled(), backends=["xla_symbolic_wrong"], out_dir=tmp_path, trials=2, bench=None,
                      dim_sizes={"b": (1, 4)})
    row = results.backends["xla_symbolic_wrong"]
    assert row.status is Status.OK, row.reason
    assert row.supports["dims"] == {"b": [1, 2, 4]}
    why = [w for w in row.warnings if "fixed sizes only" in w]
    assert why and "computes a wrong result" in why[0] and "out.y" in why[0]


def test_a_symbolic_model_off_by_less_than_gross_is_kept_and_left_to_parity(tmp_path, fault_backends):
    """1e-3 off is no gross error: the symbolic artifact stays, and parity, not the export, says it is wrong."""
    results = compare(scaled(), backends=["xla_perturbed"], out_dir=tmp_path, trials=2, bench=None)
    row = results.backends["xla_perturbed"]
    assert row.status is Status.PARITY_FAILED, row.reason
    assert row.supports["dims"] == {"b": "any"}


def _bert() -> Target:
    """keras-hub's BertBackbone (a real model): jax2onnx's symbolic graph fails in ONNX Runtime (a Reshape with two
    -1), and the StableHLO route has no dynamic form of its `stablehlo.dynamic_gather` (position embeddings), so its
    ONNX artifact holds fixed sizes. (GPT-2, which these tests used before, now converts symbolically.)"""
    pytest.importorskip("keras_hub")
    if not (get_backend("onnx").available().ok and get_backend("openvino").available().ok):
        pytest.skip("onnx or openvino unavailable")
    from benchmarks.real_models import keras_hub_bert

    return keras_hub_bert()


def test_openvino_on_a_fixed_size_onnx_stage_falls_back_from_the_stages_models(tmp_path):
    """OpenVINO builds on the ONNX export beside it. When that stage holds fixed sizes only, OpenVINO's symbolic
    export says so in one line with the stage's own reason (it failed inside OpenVINO on a file the stage lacks,
    KeyError 'model'), and each of its sizes reuses the stage's model of that size instead of converting again."""
    model = _bert()
    results = compare(model, backends=["onnx", "openvino"], out_dir=tmp_path, trials=1, bench=None,
                      val_ranges={"inputs.token_ids": (1, 100)})
    assert {b: r.status for b, r in results.backends.items()} == {"onnx": Status.OK, "openvino": Status.OK}
    ov = load(tmp_path / "openvino").manifest.format["static_fallback"]
    assert ov["why"].startswith("Backend 'openvino' | its onnx stage holds fixed sizes only (b=2; b=1; b=5), so it "
                                "cannot keep the symbolic dimension(s) b either; the onnx export said: Backend 'onnx' | "
                                ), ov["why"]
    assert "stablehlo.dynamic_gather" in ov["why"], ov["why"]  # the stage's own reason, quoted
    for key, rel in ov["models"].items():
        stage = load(tmp_path / "openvino" / rel).manifest.format["stage"]
        assert stage["made"] == "reused the stage artifact exported beside this one", (key, stage)
        # reused_from is relative to the directory holding the model that reused it
        assert (tmp_path / "openvino" / rel).parent.joinpath(stage["reused_from"]).resolve() == \
            (tmp_path / "onnx" / rel).resolve()

    # a stage whose manifest points a size's model out of the stage is not reused for it: exported afresh
    from multiexport.exporting.pipeline import _stage_models

    assert sorted(_stage_models(str(tmp_path / "onnx"))) == ["b=1", "b=2", "b=5"]
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())
    manifest["format"]["static_fallback"]["models"]["b=2"] = "../../elsewhere"
    (tmp_path / "onnx" / "manifest.json").write_text(json.dumps(manifest))
    assert _stage_models(str(tmp_path / "onnx")) == {}

    # a stage that says it holds fixed sizes without saying which: OpenVINO says so, and exports every size afresh
    from multiexport.exporting import ExportOptions
    from multiexport.exporting.pipeline import export_artifact

    manifest["format"]["static_fallback"]["models"] = list(manifest["format"]["static_fallback"]["models"].values())
    (tmp_path / "onnx" / "manifest.json").write_text(json.dumps(manifest))
    options = ExportOptions(fallback_sizes={"b": (1, 5)}, stage_artifact=str(tmp_path / "onnx"))
    again = export_artifact(get_backend("openvino"), model.fn, signature(model), tmp_path / "ov2", options)
    why = again.manifest.format["static_fallback"]["why"]
    assert why.startswith("Backend 'openvino' | its onnx stage says it holds fixed sizes, but its manifest does not "
                          "say which: Artifact 'onnx' | format.static_fallback.models | got list"), why
    assert sorted(again.manifest.format["static_fallback"]["models"]) == ["b=1", "b=2", "b=5"]


def test_openvino_alone_says_why_its_fresh_onnx_stage_cannot_keep_the_symbolic_batch(tmp_path):
    model = _bert()
    artifact = export(model, out_dir=tmp_path / "ov", backend="openvino")
    why = artifact.manifest.format["static_fallback"]["why"]
    assert why.startswith("Backend 'openvino' | its onnx stage holds fixed sizes only (b="), why
    assert not list(tmp_path.glob(".openvino-stage-*")), "the refused stage's temporary directory is removed"


def test_a_model_entry_that_is_no_model_of_the_artifact_is_one_line_not_a_loop(tmp_path, fault_backends):
    """Hand-edited fallback artifacts (the inventory brought up to date, as a deliberate edit would): a size's
    model that is the artifact itself (loading it loaded itself again until RecursionError), a model of another
    format, a fallback artifact nested as a model: each one ArtifactError line, from the Python runner and the
    native run alike."""
    import os
    import shutil

    from multiexport import ArtifactError
    from multiexport.native.run import run as native_run

    from ..conftest import tamper

    export(scaled(), tmp_path / "a", backend="xla_static_only")
    feed = {"batch.x": np.ones((2, 4), np.float32)}

    def manifest_of(directory):
        return json.loads((directory / "manifest.json").read_text())

    def set_models(directory, models):
        data = manifest_of(directory)
        data["format"]["static_fallback"]["models"] = models
        (directory / "manifest.json").write_text(json.dumps(data))

    loop = tmp_path / "loop"
    shutil.copytree(tmp_path / "a", loop)
    tamper(loop, lambda d: (os.symlink("..", d / "static" / "here"), set_models(d, {"b=2": "static/here"})))
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "a", other)
    model = other / "static" / "b2"
    tamper(model, lambda d: (d / "manifest.json").write_text(json.dumps({**manifest_of(d), "backend": "xla"})))
    tamper(other, lambda d: None)
    nested = tmp_path / "nested"
    shutil.copytree(tmp_path / "a", nested)
    tamper(nested, lambda d: (shutil.copytree(tmp_path / "a", d / "static" / "inner"),
                              set_models(d, {"b=2": "static/inner"})))
    for directory, said in ((loop, "is the artifact itself"),
                            (other, r"its model of b=2 \(static/b2\) is a 'xla' artifact, expected 'xla_static_only'"),
                            (nested, r"its model of b=2 \(static/inner\) holds models per size itself")):
        with pytest.raises(ArtifactError, match=said):
            load(directory)(feed)
        with pytest.raises(ArtifactError, match=said):
            native_run(directory, feed)
