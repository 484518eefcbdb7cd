"""The float64 truth: computed in 64 bits for every float leaf, bfloat16 and float8 included."""

from __future__ import annotations

import numpy as np

from multiexport import examples
from multiexport.leaves import build_signature
from multiexport.measure.reference import error_vs, float64_outputs

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


def test_a_function_that_casts_back_to_float32_gets_no_float64_truth_claimed(tmp_path):
    """A Keras layer keeps its float32 dtype policy with x64 on: the 'float64 truth' of such an output is another
    float32 result, and jax.jit's error against it read a false 0.00e+00. Such leaves are named, never scored."""
    import jax.numpy as jnp

    from multiexport import Target
    from multiexport.comparison import compare

    x = np.linspace(-2.0, 2.0, 24, dtype=np.float32).reshape(4, 6)

    def fn(batch):
        h = jnp.tanh(batch["x"] @ batch["x"].T)
        return {"cast": h.astype(jnp.float32), "wide": h}

    results = compare(Target(fn, args=({"x": x},), name="casts_back"), out_dir=tmp_path, trials=1, backends=["xla"],
                      bench=None, reference="float64")
    assert results.reference.no_float64_truth == ["out.cast"]
    assert set(results.reference.jax_error_vs_float64) == {"out.wide"}
    assert 0 < results.reference.jax_error_vs_float64["out.wide"] < 1e-5
    assert set(results.backends["xla"].error_vs_float64) == {"out.wide"}
