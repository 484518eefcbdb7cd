"""Parity engine: statistics, verdicts, and real faults injected into real artifacts."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import Target, examples
from multiexport.backends.xla import XlaBackend
from multiexport.comparison import compare
from multiexport.leaves import build_signature
from multiexport.measure.inputs import make_trials
from multiexport.measure.parity import check_parity, compare_leaf
from multiexport.measure.tolerance import DEFAULTS, EXACT, Tolerance, default_tolerance
from multiexport.results import ParityVerdict
from multiexport.results.schema import from_data, to_data

from ..conftest import reference_outputs, run_in_worker

F32 = DEFAULTS["float32"]


def test_identical_values_pass_with_zero_statistics():
    a = np.linspace(-3, 3, 50, dtype=np.float32)
    v = compare_leaf("out", a, a.copy(), "float32", F32)
    assert v.passed and v.stats.max_abs == 0 and v.stats.max_ulp == 0 and v.stats.mismatch_count == 0


def test_statistics_of_a_known_difference():
    ref = np.array([1.0, 2.0, 4.0, 0.0], np.float32)
    got = ref.copy()
    got[2] = np.nextafter(np.float32(4.0), np.float32(5.0))  # one ULP
    got[1] = 2.5
    v = compare_leaf("out.y", got, ref, "float32", F32, "t0")
    s = v.stats
    assert not v.passed
    assert s.max_abs == pytest.approx(0.5) and s.max_rel == pytest.approx(0.25) and s.err_scale == pytest.approx(0.125)
    assert s.mean_abs == pytest.approx((0.5 + 4.76837158203125e-07) / 4)
    assert s.mismatch_count == 1 and s.mismatch_ratio == 0.25
    assert s.worst_index == [1] and s.worst_got == 2.5 and s.worst_expected == 2.0
    assert s.max_ulp == 2**21  # 2.5 vs 2.0 in float32: 0.5 / 2^-22
    assert s.min_atol == pytest.approx(0.5 - F32.rtol * 2.0)
    assert s.min_rtol == pytest.approx((0.5 - F32.atol - F32.scale * 4.0) / 2.0)  # max|ref| is 4
    assert "Output 'out.y'" in v.reasons[0] and "max err 0.5 (0.125 of the leaf" in v.reasons[0] and "trial 't0'" in v.reasons[0]
    # the minimum tolerances reported really are the boundary
    assert compare_leaf("out.y", got, ref, "float32", Tolerance(s.min_rtol * 1.0001, F32.atol)).passed
    assert not compare_leaf("out.y", got, ref, "float32", Tolerance(s.min_rtol * 0.999, F32.atol)).passed


def test_scale_term_accepts_rounding_at_a_cancelled_element_but_not_a_real_error():
    # one element cancels to ~1.3 among values ~50: a rounding difference of 1.7e-5 there is faithful
    ref = np.array([50.0, -48.0, 1.3], np.float32)
    got = ref.copy()
    got[2] += 1.72e-5
    assert not compare_leaf("out", got, ref, "float32", Tolerance(F32.rtol, F32.atol)).passed
    assert compare_leaf("out", got, ref, "float32", F32).passed
    got[2] = ref[2] + 1e-3  # a real error stays caught
    v = compare_leaf("out", got, ref, "float32", F32)
    assert not v.passed and "scale 4e-06*max|ref|" in v.reasons[0]


def test_nan_in_the_same_place_passes_elsewhere_fails():
    ref = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
    assert compare_leaf("out", ref.copy(), ref, "float32", F32).passed
    moved = np.array([np.nan, 2.0, 3.0, np.inf], np.float32)
    v = compare_leaf("out", moved, ref, "float32", F32)
    assert not v.passed and v.stats.nan_mismatch == 2 and "NaN pattern differs" in v.reasons[0]
    flipped = np.array([1.0, np.nan, 3.0, -np.inf], np.float32)
    v = compare_leaf("out", flipped, ref, "float32", F32)
    assert not v.passed and v.stats.inf_mismatch == 1


def test_an_int_off_by_one_fails_and_bools_are_exact():
    v = compare_leaf("out.count", np.array([3, 5], np.int32), np.array([3, 4], np.int32), "int32", EXACT)
    assert not v.passed and v.stats.mismatch_count == 1 and "exact match expected" in v.reasons[0]
    v = compare_leaf("out.mask", np.array([True, False]), np.array([True, True]), "bool", EXACT)
    assert not v.passed and v.stats.mismatch_ratio == 0.5


def test_shape_and_dtype_mismatches_are_named():
    v = compare_leaf("out", np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), "float32", F32)
    assert not v.passed and "got shape (2, 3), expected (3, 2)" in v.reasons[0]
    v = compare_leaf("out", np.zeros(3, np.float16), np.zeros(3, np.float32), "float32", F32)
    assert not v.passed and "got dtype float16, expected float32" in v.reasons[0]


def test_bfloat16_statistics_use_its_own_ulp():
    import ml_dtypes

    ref = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    got = np.array([1.0078125, 2.0], ml_dtypes.bfloat16)  # one bf16 ULP above 1.0
    v = compare_leaf("out", got, ref, "bfloat16", DEFAULTS["bfloat16"])
    assert v.passed and v.stats.max_ulp == 1


def test_verdict_round_trips_through_json_with_non_finite_statistics():
    ref = [{"out.a": np.array([0.0, 1.0], np.float32), "out.n": np.array([1, 2], np.int32)}]
    got = [{"out.a": np.array([1e-3, 1.0], np.float32), "out.n": np.array([1, 2], np.int32)}]
    leaves = build_signature(Target(lambda x: {"a": x, "n": x.astype(jnp.int32)}, args=(np.ones(2, np.float32),))).outputs
    verdict = check_parity("xla", got, ref, leaves, ["t0"])
    assert not verdict.passed and verdict.failures[0].stats.min_rtol == float("inf")
    text = json.dumps(to_data(verdict), allow_nan=False)  # strict JSON
    back = from_data(ParityVerdict, json.loads(text), "verdict")
    assert back == verdict


# -- real artifacts, real faults --------------------------------------------------------------


def run_artifact(fn_for_artifact, target, tmp_path, trials):
    """Export `fn_for_artifact` under target's signature, run it in a worker, return named outputs."""
    sig = build_signature(target)
    artifact = XlaBackend().export(fn_for_artifact, sig, tmp_path / "artifact")
    worker = run_in_worker(artifact.directory, [t.feed for t in trials])
    assert worker.failure is None, worker.failure
    return sig, artifact, worker.outputs


def parity_of(fn_for_artifact, target, tmp_path, **trial_options):
    sig = build_signature(target)
    trials = make_trials(sig.inputs, examples=sig.example_feed(), **trial_options)
    sig, artifact, outputs = run_artifact(fn_for_artifact, target, tmp_path, trials)
    ref = [reference_outputs(target, sig, t.feed) for t in trials]
    return check_parity("xla", outputs, ref, sig.outputs, [t.name for t in trials]), artifact


@pytest.mark.parametrize("make", [examples.mlp, examples.transformer, examples.cnn, examples.seed])
def test_faithful_exports_pass_at_the_defaults(make, tmp_path):
    target = make()
    verdict, _ = parity_of(target.fn, target, tmp_path)
    assert verdict.passed, verdict.summary()
    assert len(verdict.trials) == 3


def test_one_weight_perturbed_by_1e_3_fails_naming_the_leaf(tmp_path):
    target = examples.mlp()

    def perturbed(params, batch):
        kernel = params["Dense_1"]["kernel"]
        params = {**params, "Dense_1": {**params["Dense_1"], "kernel": kernel.at[3, 2].add(1e-3)}}
        return target.fn(params, batch)

    verdict, _ = parity_of(perturbed, target, tmp_path)
    assert not verdict.passed
    assert {v.name for v in verdict.failures} == {"out.logits"}
    assert all("Output 'out.logits'" in v.reasons[0] and "max err" in v.reasons[0] for v in verdict.failures)
    worst = verdict.worst()["out.logits"].stats
    assert 1e-6 < worst.max_abs < 1e-2  # a small, real error, caught


def test_swapped_outputs_in_the_manifest_fail_on_both_leaves(tmp_path):
    target = Target(lambda x: {"a": x * 2.0, "b": x - 1.0}, args=(np.arange(6, dtype=np.float32),), name="two")
    sig = build_signature(target)
    artifact = XlaBackend().export(target.fn, sig, tmp_path / "artifact")
    manifest = json.loads((artifact.directory / "manifest.json").read_text())
    manifest["outputs"][0]["name"], manifest["outputs"][1]["name"] = manifest["outputs"][1]["name"], manifest["outputs"][0]["name"]
    (artifact.directory / "manifest.json").write_text(json.dumps(manifest))
    trials = make_trials(sig.inputs, examples=sig.example_feed())
    worker = run_in_worker(artifact.directory, [t.feed for t in trials])
    assert worker.failure is None
    outputs = worker.outputs
    ref = [reference_outputs(target, sig, t.feed) for t in trials]
    verdict = check_parity("xla", outputs, ref, sig.outputs, [t.name for t in trials])
    assert {v.name for v in verdict.failures} == {"out.a", "out.b"}


def test_a_changed_output_dtype_fails_naming_leaf_and_statistic(tmp_path):
    target = examples.mlp()

    def half(params, batch):
        return {"logits": target.fn(params, batch)["logits"].astype(jnp.float16)}

    # the artifact declares float16, the reference float32: the dtype check names the leaf
    sig = build_signature(target)
    trials = make_trials(sig.inputs, examples=sig.example_feed())
    half_sig = build_signature(target.replace(fn=half))
    artifact = XlaBackend().export(half, half_sig, tmp_path / "artifact")
    worker = run_in_worker(artifact.directory, [t.feed for t in trials])
    assert worker.failure is None
    outputs = worker.outputs
    ref = [reference_outputs(target, sig, t.feed) for t in trials]
    verdict = check_parity("xla", outputs, ref, sig.outputs, [t.name for t in trials])
    assert not verdict.passed
    assert "Output 'out.logits' | got dtype float16, expected float32" in verdict.failures[0].reasons[0]


def test_int_output_off_by_one_in_a_real_artifact_fails(tmp_path):
    target = examples.embedding()

    def off_by_one(params, batch):
        out = target.fn(params, batch)
        return {**out, "length": out["length"] + 1}

    verdict, _ = parity_of(off_by_one, target, tmp_path, val_ranges={"batch.tokens": (0, 50)})
    assert {v.name for v in verdict.failures} == {"out.length"}
    assert verdict.worst()["out.length"].stats.mismatch_ratio == 1.0


def test_nan_from_the_model_in_the_same_place_passes(tmp_path):
    target = Target(lambda x: jnp.log(x), args=(np.array([-1.0, 0.5, 2.0], np.float32),), name="log")
    sig = build_signature(target)
    assert np.isnan(reference_outputs(target, sig, sig.example_feed())["out"]).any()  # the NaN is real
    verdict, _ = parity_of(target.fn, target, tmp_path)
    assert verdict.passed, verdict.summary()


def test_value_ranges_keep_an_embedding_lookup_in_range(tmp_path):
    target = examples.embedding()
    sig = build_signature(target)
    trials = make_trials(sig.inputs, trials=3, val_ranges={"batch.tokens": (0, 50)})
    tokens = np.concatenate([t.feed["batch.tokens"].ravel() for t in trials])
    assert tokens.min() >= 0 and tokens.max() < 50 and tokens.max() >= 40
    verdict, _ = parity_of(target.fn, target, tmp_path, val_ranges={"batch.tokens": (0, 50)})
    assert verdict.passed, verdict.summary()


def test_compare_writes_every_statistic_and_reads_back(tmp_path):
    results = compare(examples.mlp_dynamic(), out_dir=tmp_path, trials=1, dim_sizes={"b": (1, 3)}, reference="float64",
                      bench=None)
    assert results.exit_code == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["schema"] == "multiexport.results/2"
    assert [t["name"] for t in data["trials"]] == ["example", "random0 b=1", "random0 b=3"]
    verdict = from_data(ParityVerdict, data["backends"]["xla"]["parity"], "parity")
    assert verdict.passed and len(verdict.leaves) == 3
    # XLA runs the very module jax.jit runs: its error against float64 is JAX's own
    xla_err = data["backends"]["xla"]["error_vs_float64"]["out.logits"]
    assert xla_err == data["reference"]["jax_error_vs_float64"]["out.logits"]
    assert 0 < xla_err < 1e-5


def test_float8_outputs_are_compared_with_their_own_ulp():
    """float8 outputs crashed parity (KeyError: 1 in the ULP computation) and lost every row."""
    import ml_dtypes

    ref = np.array([1.0, 2.0, -0.5], ml_dtypes.float8_e4m3fn)
    got = ref.copy()
    v = compare_leaf("out", got, ref, "float8_e4m3fn", DEFAULTS.get("float8_e4m3fn", Tolerance(0.25, 0.1, 0.1)))
    assert v.passed and v.stats.max_ulp == 0
    bumped = np.array([1.125, 2.0, -0.5], ml_dtypes.float8_e4m3fn)
    assert compare_leaf("out", bumped, ref, "float8_e4m3fn", EXACT).stats.max_ulp == 1


def test_int4_and_complex64_outputs_are_compared():
    import ml_dtypes

    a = np.array([-3, 0, 7], ml_dtypes.int4)
    assert compare_leaf("out", a, a.copy(), "int4", EXACT).passed
    assert not compare_leaf("out", np.array([-3, 1, 7], ml_dtypes.int4), a, "int4", EXACT).passed
    c = np.array([1 + 2j, -1j], np.complex64)
    assert compare_leaf("out", c, c.copy(), "complex64", F32).passed
    assert not compare_leaf("out", c + 1e-2, c, "complex64", F32).passed


def test_a_shape_mismatch_has_no_statistics_and_says_so():
    v = compare_leaf("out", np.zeros(3, np.float32), np.zeros(4, np.float32), "float32", F32)
    assert not v.passed and not v.stats.compared and "got shape (3,)" in v.reasons[0]


def test_a_nan_mismatch_says_on_which_side_and_what_the_inputs_were():
    ref = np.array([1.0, np.nan, 3.0], np.float32)
    got = np.array([np.nan, 2.0, 3.0], np.float32)
    v = compare_leaf("out", got, ref, "float32", F32, "t1", "inputs all finite")
    text = v.reasons[0]
    assert "1 NaN in the artifact's output where jax.jit is finite" in text
    assert "1 NaN in jax.jit's output where the artifact is finite" in text and "inputs all finite" in text


def test_the_headline_error_is_relative_to_the_leafs_scale_not_a_cancelled_element():
    ref = np.array([1000.0, 1e-6], np.float32)
    got = np.array([1000.0, 2e-6], np.float32)  # rounding at an element that cancels to ~0
    v = compare_leaf("out", got, ref, "float32", F32)
    assert v.passed and v.stats.max_rel == pytest.approx(1.0) and v.stats.err_scale < 1e-8


@pytest.mark.parametrize("mask", [np.finfo(np.float32).min, -1e9, -1e4])
def test_a_mask_constant_does_not_make_the_scale_term_vacuous(mask):
    """finfo.min beside logits of order 1 allowed 1.4e33 of error per element: every unmasked logit off by 1e30
    passed. Mask constants are left out of the scale and checked against their own value."""
    ref = np.random.default_rng(0).normal(size=(4, 100)).astype(np.float32)
    ref[:, 50:] = mask
    tol = default_tolerance("float32")
    assert compare_leaf("out.masked", ref.copy(), ref, "float32", tol).passed
    for error in (1e30, 1e-3):
        got = ref.copy()
        got[:, :50] += np.float32(error)
        verdict = compare_leaf("out.masked", got, ref, "float32", tol)
        assert not verdict.passed and verdict.stats.sentinels == 200, (mask, error, verdict.stats)
        assert verdict.stats.scale_ref < 10
    got = ref.copy()
    got[:, 50:] = np.float32(mask) * 0.5  # a different mask value is a different output, too
    assert not compare_leaf("out.masked", got, ref, "float32", tol).passed


def test_large_values_that_are_real_data_keep_the_leafs_scale():
    """Many distinct large magnitudes are data, not a mask: the scale term still accepts rounding at an element
    that cancels beside them."""
    ref = np.concatenate([np.linspace(1e4, 2e4, 50), [1e-3]]).astype(np.float32)
    got = ref.copy()
    got[-1] += np.float32(0.05)  # 2.5e-6 of the leaf's scale: rounding at a cancelled element
    verdict = compare_leaf("out", got, ref, "float32", default_tolerance("float32"))
    assert verdict.passed and verdict.stats.sentinels == 0


def test_a_leaf_with_no_finite_value_in_any_trial_is_said_to_be_no_evidence():
    from multiexport.leaves.signature import Leaf
    from multiexport.measure.parity import check_parity

    nan = {"out": np.full(3, np.nan, np.float32)}
    verdict = check_parity("x", [nan, nan], [nan, nan], [Leaf("out", "out", (3,), "float32")], ["a", "b"])
    assert verdict.passed
    assert verdict.notes == ["Output 'out' | no finite value in any trial on either side: only its NaN/Inf pattern "
                             "was compared, so its parity is no evidence about its numbers"]


def test_an_inf_mismatch_says_which_side_holds_it_and_the_first_differing_pair():
    ref = np.array([1.0, -np.inf, 3.0, np.inf], np.float32)
    got = ref.copy()
    got[1] = np.finfo(np.float32).min  # the reference's -inf saturated
    got[2] = np.inf  # an infinity only the artifact has
    v = compare_leaf("out.masked", got, ref, "float32", F32)
    assert not v.passed and (v.stats.inf_ref_only, v.stats.inf_got_only, v.stats.inf_mismatch) == (1, 1, 2)
    assert ("1 Inf in the artifact's output where jax.jit is finite, 1 Inf in jax.jit's output where the artifact "
            "is finite; first at (1,): got -3.402823e+38 (-max float32: an infinity saturated to the largest finite "
            "value), expected -inf") in v.reasons[0]
    flipped = np.array([1.0, np.inf, 3.0, np.inf], np.float32)  # both infinite, opposite signs
    v = compare_leaf("out", flipped, ref, "float32", F32)
    assert "both non-finite, differently; first at (1,): got inf, expected -inf" in v.reasons[0]


# -- weak checks: parity that could not have failed is said to be weak -----------------------


def _zero_head_target():
    """A real flax MLP whose last layer is zero-initialised (as Haiku ResNets and many heads are): its output
    is exactly 0 for every input, so an artifact returning zeros would pass parity."""
    import flax.linen as nn

    class ZeroHead(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Dense(16)(x))
            return nn.Dense(4, kernel_init=nn.initializers.zeros)(h)

    model = ZeroHead()
    x = jax.random.normal(jax.random.key(1), (8, 16), jnp.float32)
    params = model.init(jax.random.key(0), x)["params"]
    return Target(lambda params, batch: {"logits": model.apply({"params": params}, batch["x"])},
                  args=(params, {"x": x}), name="zero_head", batch_leaves=("batch.*",))


def test_a_zero_initialised_head_is_a_weak_check_everywhere_it_is_shown(tmp_path):
    from multiexport.report.recommend import recommend
    from multiexport.report.summary import WEAK_OK, summary_rows

    results = compare(_zero_head_target(), out_dir=tmp_path, trials=2, backends=["xla"], bench=None)
    row = results.backends["xla"]
    assert row.status.value == "ok" and row.parity.passed
    assert row.parity.weak == ["out.logits"] and row.parity.weak_everywhere()
    assert any("exactly 0 everywhere" in n for n in row.parity.notes)
    assert [r["status"] for r in summary_rows(results) if r["backend"] == "xla"] == [WEAK_OK]
    assert recommend(results).verdict.startswith("Weak evidence: parity on every output")
    # and it survives the round trip through results.json, as `report` reads it
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["backends"]["xla"]["parity"]["weak"] == ["out.logits"]


@pytest.mark.parametrize("make", [examples.mlp, examples.transformer, examples.cnn])
def test_models_whose_outputs_follow_their_inputs_are_not_weak(make, tmp_path):
    target = make()
    sig = build_signature(target)
    trials = make_trials(sig.inputs, examples=sig.example_feed())
    ref = [reference_outputs(target, sig, t.feed) for t in trials]
    verdict = check_parity("jax", ref, ref, sig.outputs, [t.name for t in trials], feeds=[t.feed for t in trials])
    assert verdict.passed and verdict.weak == [], verdict.notes


def _outputs(name="out.y", dtype="float32"):
    from types import SimpleNamespace

    return [SimpleNamespace(name=name, dtype=dtype)]


def test_weak_check_kinds_are_told_apart():
    from multiexport.measure.parity import weak_checks

    a, b = {"x": np.arange(4.0)}, {"x": np.arange(4.0) + 1}
    varied = np.array([0.3, 1.5, -2.0, 4.0], np.float32)
    # an output that follows its inputs is a real check
    assert weak_checks([{"out.y": varied}, {"out.y": varied * 2}], _outputs(), [a, b]) == {}
    # the same output for different inputs: it ignores what was varied
    assert "the same in all 2 trials" in weak_checks([{"out.y": varied}, {"out.y": varied}], _outputs(), [a, b])["out.y"]
    # the same output because the trials themselves were identical: the trials are at fault, not the model
    assert "identical inputs" in weak_checks([{"out.y": varied}, {"out.y": varied}], _outputs(), [a, dict(a)])["out.y"]
    # saturated softmax: one-hot rows that differ between trials still only compare a pattern
    one_hot = [{"out.y": np.eye(4, dtype=np.float32)}, {"out.y": np.eye(4, dtype=np.float32)[::-1]}]
    assert "only 0 and 1" in weak_checks(one_hot, _outputs(), [a, b])["out.y"]
    # integer outputs holding 0/1 (a mask, a class id) are exact data, not saturation
    ints = [{"out.y": np.array([0, 1, 1, 0])}, {"out.y": np.array([1, 0, 0, 1])}]
    assert weak_checks(ints, _outputs(dtype="int32"), [a, b]) == {}
