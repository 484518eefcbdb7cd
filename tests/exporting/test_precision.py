"""Reduced precision in the core: variant names, options, calibration files read by leaf name (hostile ones
refused in one line naming the file and the leaf), and the refusals that come before any export:
a backend without the variant, a target whose weights are all input leaves."""

from __future__ import annotations

import numpy as np
import pytest

from multiexport import ExportError, Target, UsageError
from multiexport.errors import InputError
from multiexport.exporting import ExportOptions, Manifest
from multiexport.exporting.precision import (
    Calibration,
    PrecisionFacts,
    calibration_feeds,
    split_variant,
    variant_name,
    write_calibration,
)
from multiexport.exporting.registry import backend_class, get_backend
from multiexport.files.npz import save_npz
from multiexport.leaves import build_signature

from .test_manifest import _base


def two_inputs() -> Target:
    w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)

    def fn(x, y):
        return {"logits": x @ w + y @ w}

    return Target(fn, args=(np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)), name="two_inputs")


def test_variant_names_split_and_join_and_an_unknown_precision_is_refused():
    assert split_variant("onnx@int8") == ("onnx", "int8")
    assert split_variant("onnx") == ("onnx", "fp32")
    assert variant_name("litert", "fp16") == "litert@fp16" and variant_name("litert", "fp32") == "litert"
    with pytest.raises(UsageError, match="expected one of fp32, fp16, int8-dynamic, int8"):
        split_variant("onnx@int4")
    assert backend_class("onnx@fp16") is backend_class("onnx")


def test_int8_needs_calibration_and_the_others_refuse_it(tmp_path):
    with pytest.raises(UsageError, match="Option 'calibration' | got none for precision int8"):
        ExportOptions(precision="int8")
    with pytest.raises(UsageError, match="given for precision fp16"):
        ExportOptions(precision="fp16", calibration=Calibration(str(tmp_path / "c.npz"), True, "x"))
    with pytest.raises(UsageError, match="Option 'precision'"):
        ExportOptions(precision="fp8")


def test_calibration_is_read_by_leaf_name_whatever_the_order_in_the_file(tmp_path):
    sig = build_signature(two_inputs())
    x = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    y = -x
    path = save_npz(tmp_path / "c.npz", {"y": y, "x": x})  # the second argument first
    feeds = calibration_feeds(sig, Calibration(str(path), False, "given"))
    assert len(feeds) == 3 and list(feeds[0]) == ["x", "y"]
    np.testing.assert_array_equal(feeds[2]["x"], x[2])
    np.testing.assert_array_equal(feeds[2]["y"], y[2])


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((3, 2, 4), np.float32)}, "has no 'y', expected an array per input leaf"),
    ({"x": np.zeros((3, 2, 4), np.float32), "y": np.zeros((3, 2, 4), np.float32), "z": np.zeros(3)},
     "holds 'z', expected only input leaves"),
    ({"x": np.zeros((3, 2, 4), np.float32), "y": np.zeros((2, 2, 4), np.float32)}, "expected the same count"),
    ({"x": np.zeros((3, 2, 4), np.float64), "y": np.zeros((3, 2, 4), np.float32)},
     r"sample 0: Input 'x' \| got float64, expected float32"),
    ({"x": np.zeros((3, 2, 5), np.float32), "y": np.zeros((3, 2, 4), np.float32)}, r"sample 0: Input 'x' \| got shape"),
    ({"x": np.zeros((0, 2, 4), np.float32), "y": np.zeros((0, 2, 4), np.float32)}, "leading sample axis of at least 1"),
])
def test_a_bad_calibration_file_is_one_line_naming_the_file_and_the_leaf(tmp_path, arrays, message):
    sig = build_signature(two_inputs())
    path = save_npz(tmp_path / "c.npz", arrays)
    with pytest.raises(InputError, match=message) as info:
        calibration_feeds(sig, Calibration(str(path), False, "given"))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_calibration_file_that_is_not_an_npz_is_refused(tmp_path):
    sig = build_signature(two_inputs())
    bad = tmp_path / "c.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputError, match="Calibration file"):
        calibration_feeds(sig, Calibration(str(bad), False, "given"))


def test_a_backend_without_the_variant_refuses_before_any_work(tmp_path):
    target = two_inputs()
    with pytest.raises(ExportError, match="has no int8 artifact: XLA's CPU compiler") as info:
        get_backend("xla").export(target.fn, build_signature(target), tmp_path / "out",
                                  ExportOptions(precision="int8-dynamic".replace("-dynamic", ""),
                                                calibration=Calibration(str(tmp_path / "c.npz"), True, "x")))
    assert info.value.category == "unsupported-precision"
    assert not (tmp_path / "out").exists()


def test_int8_of_a_target_whose_weights_are_all_inputs_is_unsupported_precision_naming_why(tmp_path):
    def fn(params, x):
        return {"logits": x @ params["w"]}

    target = Target(fn, args=({"w": np.ones((4, 3), np.float32)}, np.ones((2, 4), np.float32)), name="weights_in")
    with pytest.raises(ExportError, match="takes all of its weights as input leaves") as info:
        get_backend("onnx").export(target.fn, build_signature(target), tmp_path / "out",
                                   ExportOptions(precision="int8-dynamic"))
    assert info.value.category == "unsupported-precision"


def test_the_manifest_states_precision_only_on_reduced_artifacts_and_reads_it_back_typed():
    data = _base()
    assert "precision" not in Manifest.from_json(data).to_json()
    facts = PrecisionFacts(precision="int8", method="quantize_static(...)", toolchain="onnxruntime 1.0",
                           quantized_ops={"MatMul": 2})
    from multiexport.results.schema import to_data

    data["precision"] = to_data(facts)
    read = Manifest.from_json(data)
    assert read.precision == facts and read.precision_name == "int8"
    data["precision"] = {**to_data(facts), "precision": "int4"}
    with pytest.raises(Exception, match="precision | got 'int4'"):
        Manifest.from_json(data)


def test_write_calibration_round_trips(tmp_path):
    sig = build_signature(two_inputs())
    feeds = [{"x": np.full((2, 4), i, np.float32), "y": np.full((2, 4), -i, np.float32)} for i in range(4)]
    path = write_calibration(tmp_path / "c.npz", feeds)
    back = calibration_feeds(sig, Calibration(str(path), True, "made"))
    assert [float(f["y"][0, 0]) for f in back] == [0.0, -1.0, -2.0, -3.0]


def test_calibration_for_the_static_fallback_is_resized_along_the_symbolic_axes_only(tmp_path):
    from multiexport.exporting.precision import calibrated_at, remove_calibration_scratch

    w = np.ones((4, 3), np.float32)
    target = Target(lambda x: {"y": x @ w}, args=(np.ones((2, 4), np.float32),), name="sym", symbolic_batch="b")
    sig = build_signature(target)
    samples = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    given = Calibration(str(save_npz(tmp_path / "c.npz", {"x": samples})), False, "given")
    options = ExportOptions(precision="int8", calibration=given)
    for size in (1, 5):
        at = calibrated_at(options, sig, {"b": size}, tmp_path)
        feeds = calibration_feeds(sig, at.calibration)
        assert [f["x"].shape for f in feeds] == [(size, 4)] * 3
        np.testing.assert_array_equal(feeds[1]["x"], np.take(samples[1], np.arange(size) % 2, axis=0))
        assert "tiled or cut to b=" in at.calibration.how and at.calibration.synthetic is False
    assert calibrated_at(ExportOptions(), sig, {"b": 1}, tmp_path) == ExportOptions()
    remove_calibration_scratch(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_the_symbolic_load_check_judges_a_reduced_precision_artifact_by_cosine_not_by_float_error():
    from multiexport.exporting.symbolic_check import wrong_result

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    target = Target(lambda x: {"y": x @ w}, args=(np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),),
                    name="sym_check", symbolic_batch="b")
    sig = build_signature(target)
    feed = sig.example_feed()
    ref = feed["x"] @ w
    off = ref + 0.05 * np.abs(ref).max() * np.sign(ref)  # int8-like: 5 % of the max, same direction
    assert "max err" in wrong_result(target.fn, sig, feed, {"out.y": off})
    assert wrong_result(target.fn, sig, feed, {"out.y": off}, "int8") is None
    assert "cosine similarity" in wrong_result(target.fn, sig, feed, {"out.y": -ref}, "int8")


def test_a_reduced_artifact_must_state_its_precision_and_what_it_reduced():
    import types

    from multiexport.errors import InternalError
    from multiexport.exporting.facts import FormatFacts
    from multiexport.exporting.format_result import FormatResult, check_result

    backend = types.SimpleNamespace(name="fake", facts_type=FormatFacts)
    plain = FormatResult(files={}, used=[], params=[], output_params=[])
    check_result(backend, "fp32", plain)
    with pytest.raises(InternalError, match="state precision none, expected fp16"):
        check_result(backend, "fp16", plain)
    nothing = FormatResult(files={}, used=[], params=[], output_params=[],
                           precision=PrecisionFacts(precision="fp16", method="m", toolchain="t"))
    with pytest.raises(ExportError, match="reduced none of the model's ops") as info:
        check_result(backend, "fp16", nothing)
    assert info.value.category == "unsupported-precision"
    constants_only = PrecisionFacts(precision="fp16", method="m", toolchain="t", quantized_ops={"MUL": 1},
                                    weights_only=True)
    for weights in ({}, {"storage": "none", "embedded_bytes": 0, "external_bytes": 0}):
        with pytest.raises(ExportError, match="this target stores none") as info:
            check_result(backend, "fp16", FormatResult(files={}, used=[], params=[], output_params=[],
                                                       weights=weights, precision=constants_only))
        assert info.value.category == "unsupported-precision"
    for weights in ({"embedded_bytes": 128}, {"external_bytes": 1 << 20}):
        check_result(backend, "fp16", FormatResult(files={}, used=[], params=[], output_params=[], weights=weights,
                                                   precision=constants_only))
    math = PrecisionFacts(precision="fp16", method="m", toolchain="t", quantized_ops={"dot_general": 1})
    check_result(backend, "fp16", FormatResult(files={}, used=[], params=[], output_params=[], precision=math))


def test_iree_fp16_of_a_function_without_a_contraction_is_unsupported_precision_not_the_float_artifact(tmp_path):
    if not get_backend("iree").available().ok:
        pytest.skip("iree unavailable")
    target = Target(lambda x: {"y": x * 2.0 + 1.0}, args=(np.ones((2, 4), np.float32),), name="no_contraction")
    with pytest.raises(ExportError, match="reduced none of the model's ops") as info:
        get_backend("iree").export(target.fn, build_signature(target), tmp_path / "a", ExportOptions(precision="fp16"))
    assert info.value.category == "unsupported-precision" and not (tmp_path / "a").exists()


@pytest.mark.parametrize("bad, shown", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_a_calibration_file_holding_nan_or_infinity_is_the_files_fault_in_one_line(tmp_path, bad, shown):
    sig = build_signature(two_inputs())
    y = np.zeros((3, 2, 4), np.float32)
    y[1, 1, 2] = bad
    path = save_npz(tmp_path / "c.npz", {"x": np.ones((3, 2, 4), np.float32), "y": y})
    with pytest.raises(InputError, match=f"leaf 'y' holds {shown} at sample 1, expected finite values") as info:
        calibration_feeds(sig, Calibration(str(path), False, "given"))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_calibration_file_of_a_million_samples_is_refused_from_its_header_naming_the_cap(tmp_path):
    from multiexport.cli.parser import CALIBRATION_HELP
    from multiexport.exporting.precision import MAX_CALIBRATION_SAMPLES

    w = np.ones((1, 2), np.float32)
    target = Target(lambda x: {"y": x @ w}, args=(np.ones((1,), np.float32),), name="one_value")
    path = save_npz(tmp_path / "c.npz", {"x": np.ones((1_000_000, 1), np.float32)})  # real, 4 MB
    with pytest.raises(InputError, match=f"holds 1000000 samples, expected at most {MAX_CALIBRATION_SAMPLES}") as info:
        calibration_feeds(build_signature(target), Calibration(str(path), False, "given"))
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert f"at most {MAX_CALIBRATION_SAMPLES} samples" in CALIBRATION_HELP  # --help says the cap
    at_cap = save_npz(tmp_path / "cap.npz", {"x": np.ones((MAX_CALIBRATION_SAMPLES, 1), np.float32)})
    assert len(calibration_feeds(build_signature(target), Calibration(str(at_cap), False, "given"))) == 1024
