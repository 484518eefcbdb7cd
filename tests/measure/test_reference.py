"""The float64 truth: computed in 64 bits for every float leaf, bfloat16 and float8 included."""

from __future__ import annotations

import numpy as np

from multiexport import examples
from multiexport.measure.reference import error_vs, float64_outputs
from multiexport.signature import build_signature

from ..conftest import reference_outputs


def test_bfloat16_leaves_get_a_float64_truth_and_an_error_against_it():
    """numpy calls bfloat16's kind 'V', so the truth was computed in bfloat16 and every bf16 output dropped."""
    target = examples.mlp_bf16()
    sig = build_signature(target)
    feed = sig.example_feed()
    truth = float64_outputs(target, sig, [feed])
    assert truth[0]["out.logits"].dtype == np.float64
    errors = error_vs([reference_outputs(target, sig, feed)], truth)
    assert set(errors) == {"out.logits"}
    assert 1e-4 < errors["out.logits"] < 0.1  # bfloat16's rounding, measured against a real float64 value
