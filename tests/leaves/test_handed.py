"""leaves/handed.py: a target read back from the compare's handoff has no function: anything that needs one says so
(NeedsTarget), and only the modules handed are given."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from multiexport.exporting.handoff import write_handoff
from multiexport.exporting.stablehlo import export_module
from multiexport.exporting.static_fallback import specialize
from multiexport.leaves import build_signature
from multiexport.leaves.handed import NeedsTarget, read_handed
from multiexport.leaves.target import Target
from multiexport.leaves.weights import LIFT_MIN_BYTES, plan


def _target(symbolic=True):
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    return Target(lambda x, unused: {"y": x @ w}, args=(np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),
                                                        np.zeros(3, np.int32)),
                  name="handed", symbolic_batch="b" if symbolic else False, batch_leaves=("x",))


def test_a_handed_signature_reads_back_the_compares_leaves_examples_and_symbolic_dims(tmp_path):
    target = _target()
    sig = build_signature(target)
    assert write_handoff(target.fn, sig, "fingerprint-of-it", tmp_path)
    handed = read_handed(tmp_path)
    back = handed.signature
    assert back.inputs == sig.inputs and back.outputs == sig.outputs and back.symbolic_dims == ("b",)
    assert back.weights == sig.weights and back.x64 == sig.x64 and back.warnings == sig.warnings
    for a, b in zip(back.examples, sig.examples):
        np.testing.assert_array_equal(a, b)
    assert [str(d) for d in back.specs[0].shape] == ["b", "4"] and back.specs[1].shape == (3,)
    assert handed.fingerprint == "fingerprint-of-it"


def test_anything_that_needs_the_function_of_a_handed_target_raisesneeds_target(tmp_path):
    target = _target()
    sig = build_signature(target)
    write_handoff(target.fn, sig, "f", tmp_path)
    handed = read_handed(tmp_path)
    heavy = dataclasses.replace(handed.signature, weights={**handed.signature.weights, "baked_bytes": LIFT_MIN_BYTES})
    assert plan(handed.fn, handed.signature, "always") is None  # nothing to lift: nothing needed
    for needs in (lambda: handed.fn(np.zeros((2, 4), np.float32)),  # called
                  lambda: handed.fn.lower,  # inspected (jax.jit's attributes, a closure)
                  lambda: handed.signature.flat_function(handed.fn),  # traced through the pytree
                  lambda: handed.signature.unflatten_outputs([np.zeros((2, 3))]),
                  lambda: export_module(handed.fn, handed.signature, platforms=("tpu",)),  # a module not handed
                  lambda: export_module(handed.fn, handed.signature, specs=handed.signature.specs),  # fixed sizes
                  # the static-size fallback's signature: the same function at b=2 is another module
                  lambda: export_module(handed.fn, specialize(handed.signature, {"b": 2}), platforms=("cpu",)),
                  lambda: plan(handed.fn, heavy, "always")):  # weights lifted from its closure
        with pytest.raises(NeedsTarget):
            needs()
    # NeedsTarget is no Exception: a converter's `except Exception` cannot turn it into an export failure
    assert not issubclass(NeedsTarget, Exception)


def test_the_modules_handed_are_the_compares_own_export_of_the_target(tmp_path):
    target = _target(symbolic=False)  # at fixed shapes jax.export drops the leaf the function does not read
    sig = build_signature(target)
    write_handoff(target.fn, sig, "f", tmp_path)
    handed = read_handed(tmp_path)
    mine = export_module(target.fn, sig, keep_unused=False, platforms=("cpu",))
    for platforms in (None, ("cpu",)):  # None: this process's default export platform, the CPU here
        given = export_module(handed.fn, handed.signature, keep_unused=False, platforms=platforms)
        assert _ops(given) == _ops(mine)
        assert given.module_kept_var_idx == mine.module_kept_var_idx == (0,)  # `unused` is not read
    with pytest.raises(NeedsTarget):  # pruned a leaf: keep_unused makes another module, which was not handed
        export_module(handed.fn, handed.signature, keep_unused=True)
    # a target that donates nothing: a donating export gets the plain module
    assert _ops(export_module(handed.fn, handed.signature, donate=True)) == _ops(mine)


def _ops(exported) -> str:
    """The module without its source locations (numbered afresh by every export of the same function)."""
    return re.sub(r"\s*loc\(#loc\d*\)|^#loc.*$", "", exported.mlir_module(), flags=re.M).strip()
