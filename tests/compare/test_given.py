"""comparison/given.py: what the compare hands its export workers."""

from __future__ import annotations

import dataclasses
import types

import numpy as np

from multiexport.comparison.given import example_outputs
from multiexport.files.npz import load_npz
from multiexport.leaves import build_signature
from multiexport.leaves.target import Target


def _prep(first_feed=None, device="cpu"):
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    sig = build_signature(Target(lambda x: {"y": x @ w}, args=(np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),),
                                 name="handed", symbolic_batch="b"))
    feed = sig.example_feed() if first_feed is None else first_feed
    trial = types.SimpleNamespace(feed=feed)
    return types.SimpleNamespace(sig=sig, trials=[trial], ref_outputs=[{"out.y": feed["x"] @ w}], ref_device=device)


def _ctx(precision="default"):
    return types.SimpleNamespace(config=types.SimpleNamespace(matmul_precision=precision))


def test_the_reference_at_the_example_is_handed_to_the_export_workers_and_removed_after():
    prep = _prep()
    with example_outputs(_ctx(), prep) as path:
        assert path is not None
        np.testing.assert_array_equal(load_npz(path)["out.y"], prep.ref_outputs[0]["out.y"])
    assert not path.exists() and not path.parent.exists()


def test_no_outputs_are_handed_unless_the_first_trial_is_the_example_under_plain_jax_jit_on_the_cpu():
    example = _prep().sig.example_feed()
    other = {"x": example["x"] + 1}  # the user's own inputs as the first trial: not the example
    wider = {"x": np.concatenate([example["x"], example["x"]])}
    for ctx, prep in ((_ctx(), _prep(other)), (_ctx(), _prep(wider)), (_ctx(), _prep(device="gpu")),
                      (_ctx("highest"), _prep()),
                      (_ctx(), _prep_no_outputs())):
        with example_outputs(ctx, prep) as path:
            assert path is None


def _prep_no_outputs():
    prep = _prep()
    prep.ref_outputs = []
    return prep


def test_the_exports_that_need_the_built_target_go_to_one_worker_the_others_never_build_it():
    from multiexport.comparison.given import with_builder

    groups = [["savedmodel", "litert"], ["iree"], ["onnx", "openvino"], ["xla"]]
    assert with_builder(groups, [True, False, True, False]) == [
        ["savedmodel", "litert", "onnx", "openvino"], ["iree"], ["xla"]]
    # none or all need it: as planned (a merged group of everything would leave one worker for all)
    assert with_builder(groups, [False] * 4) == groups and with_builder(groups, [True] * 4) == groups


def test_an_export_is_planned_where_the_target_is_built_when_the_handoff_cannot_serve_it():
    """The planner's reasons, each on a real backend: jax2onnx's route traces the function; a framework the target
    already imported (keras-hub imports TensorFlow); fixed sizes for a native consumer; another platform."""
    from multiexport.comparison.config import CompareConfig
    from multiexport.comparison.exports import needs_target

    prep = _prep()
    prep.bench_feeds, prep.calibration = [], None
    prep.trials[0].dims = {"b": 2}
    prep.device = types.SimpleNamespace(chosen="cpu", tpu=False)

    def ctx(imported=frozenset(), **changes):  # imported: what the target's build imported (Context.target_modules)
        return types.SimpleNamespace(config=dataclasses.replace(CompareConfig(), **changes), target_modules=imported)

    assert not needs_target(ctx(), prep, ["iree"]) and not needs_target(ctx(), prep, ["savedmodel", "litert"])
    assert needs_target(ctx(), prep, ["onnx", "openvino"])
    assert not needs_target(ctx(backends=("onnx",), backend_options={"onnx": {"route": "stablehlo"}}), prep, ["onnx"])
    assert needs_target(ctx(frozenset({"keras_hub", "tensorflow"})), prep, ["savedmodel", "litert"])
    assert needs_target(ctx(native=True), prep, ["xla"])  # PJRT's consumer compiles modules at fixed sizes
    assert needs_target(ctx(platforms=("cpu", "tpu")), prep, ["xla"])
    assert needs_target(ctx(), prep, ["openvino"])  # alone, its ONNX stage is exported for it: jax2onnx's route
    assert not needs_target(ctx(), prep, ["xla"])
    static = _prep()
    static.sig = build_signature(Target(lambda x: {"y": x * 2}, args=(np.ones((2, 4), np.float32),), name="static"))
    static.bench_feeds, static.calibration, static.device = [], None, prep.device
    static.trials[0].dims = {}
    assert needs_target(ctx(), static, ["xla"])  # its HLO text is lowered from the function
