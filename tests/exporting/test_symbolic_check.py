"""exporting/symbolic_check.py: outputs handed from elsewhere are the check's reference only when they fit."""

from __future__ import annotations

import numpy as np

from multiexport.exporting.symbolic_check import remember, wrong_result
from multiexport.leaves import build_signature
from multiexport.leaves.target import Target


def _target():
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    target = Target(lambda x: {"y": x @ w}, args=(np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),),
                    name="handed", symbolic_batch="b")
    return target, build_signature(target), w


def test_outputs_handed_to_the_check_are_what_it_judges_by():
    target, sig, w = _target()
    feed = sig.example_feed()
    right = feed["x"] @ w
    assert remember(target.fn, sig, {"out.y": -right})
    # judged by the handed outputs, not by a jax.jit of its own: the true result is now "wrong"
    assert "max err" in wrong_result(target.fn, sig, feed, {"out.y": right})
    assert wrong_result(target.fn, sig, feed, {"out.y": -right}) is None


def test_handed_outputs_that_do_not_fit_the_output_leaves_are_refused_and_the_check_computes_its_own():
    target, sig, w = _target()
    feed = sig.example_feed()
    right = feed["x"] @ w
    for unfit in ({}, {"out.z": -right}, {"out.y": (-right).astype(np.float64)}, {"out.y": -right[..., :2]},
                  {"out.y": -right[0]}):
        assert remember(target.fn, sig, unfit) is False, unfit
    assert wrong_result(target.fn, sig, feed, {"out.y": right}) is None
    assert "max err" in wrong_result(target.fn, sig, feed, {"out.y": -right})
