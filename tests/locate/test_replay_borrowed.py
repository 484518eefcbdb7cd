"""locate's replay never blames an op on evidence it made up: an input the artifact does not expose is
borrowed from the reference, and when that input lies downstream of an op the artifact already computes
differently, the borrowed value is not what the artifact's op received, so a mismatch is "undetermined",
not "op-differs" (found on EfficientNetB0's LiteRT trial, where such a replay named a faithful divide)."""

from __future__ import annotations

import numpy as np

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.leaves import Target, build_signature
from multiexport.locate.pairing import pair
from multiexport.locate.reference import build_reference
from multiexport.locate.replay import replay


def chain(x):
    a = x * 2.5       # the artifact computes this one wrongly (planted below); not 2.0, which a canonicalizer
                      # may rewrite as x + x
    b = a + 1.0       # not exposed by the artifact
    return b * 3.5    # computed faithfully by the artifact, on its own (wrong) b


def _reference():
    x = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    target = Target(chain, args=(x,), name="chain")
    sig = build_signature(target)
    return build_reference(target.fn, sig, {sig.inputs[0].name: x}, {}), x


def _chain_sites(ref):
    """a, b, c of `chain`, found by data flow (b: the add; a: the op it reads; c: the op reading b)."""
    (b,) = [s for s in ref.sites if s.op == "stablehlo.add"]
    by_key = {s.key: s for s in ref.sites}
    (a,) = [by_key[k] for k in b.operands if k in by_key and by_key[k].shape == b.shape and
            by_key[k].op == "stablehlo.multiply"]
    (c,) = [s for s in ref.sites if b.key in s.operands]
    return a, b, c


def test_a_replay_on_borrowed_values_downstream_of_a_divergence_is_undetermined():
    ref, x = _reference()
    a, b, c = _chain_sites(ref)
    assert a.key != c.key
    wrong_a = ref.values[a.key] * 1.5                 # the planted fault
    got = {a.key: wrong_a, c.key: (wrong_a + 1.0) * 3.5}  # what that artifact really holds; b unmapped
    errors = pair(ref.sites, ref.values, got, {b.key: "cannot map: planted"})
    assert errors[a.key].status == "diverge" and errors[c.key].status == "diverge"
    assert errors[b.key].status == "unmapped"
    at_c = replay(ref, c, got, errors, {leaf: x for leaf in ref.arg_leaves})
    assert at_c.verdict == "undetermined", at_c.text
    assert b.key in at_c.text and "downstream of an op that already diverges" in at_c.text
    # The op that is wrong is still named: its inputs are the artifact's own.
    at_a = replay(ref, a, got, errors, {leaf: x for leaf in ref.arg_leaves})
    assert at_a.verdict == "op-differs", at_a.text


def test_a_borrowed_input_with_no_divergence_above_it_is_still_evidence():
    ref, x = _reference()
    _, b, c = _chain_sites(ref)
    got = {c.key: ref.values[c.key] * 1.5}            # c wrong, everything above it right; b unmapped
    errors = pair(ref.sites, ref.values, got, {b.key: "cannot map: planted"})
    at_c = replay(ref, c, got, errors, {leaf: x for leaf in ref.arg_leaves})
    assert at_c.verdict == "op-differs", at_c.text


def cancel(x):
    a = x * 2.5
    b = a + 1.0       # not exposed by the artifact
    return b - 3.5    # cancels: a relative error of b is ~1400x larger here


def test_a_borrowed_input_computed_from_slightly_different_values_cannot_convict_an_amplifying_op():
    """The artifact's `a` agrees with the reference (8e-6 of max|ref|, within tolerance), but `c` cancels, so the
    artifact's own faithful `c` is 0.8% off the reference's; a replay of `c` on the reference's `b` (unmapped) is not
    evidence against `c` (EfficientNetB0's squeeze-excite multiply on ONNX's default route was called op-differs
    this way); a `c` that is really wrong still is."""
    x = (np.float32(1.0) + np.linspace(0.0, 1e-3, 8, dtype=np.float32)).astype(np.float32)
    target = Target(cancel, args=(x,), name="cancel")
    sig = build_signature(target)
    ref = build_reference(target.fn, sig, {sig.inputs[0].name: x}, {})
    a, b, c = _chain_sites(ref)
    a_art = (ref.values[a.key] * np.float32(1 + 8e-6)).astype(np.float32)
    feed = {leaf: x for leaf in ref.arg_leaves}
    faithful = {a.key: a_art, c.key: ((a_art + np.float32(1.0)) - np.float32(3.5)).astype(np.float32)}
    errors = pair(ref.sites, ref.values, faithful, {b.key: "cannot map: planted"})
    assert errors[a.key].status == "agree" and errors[c.key].status == "diverge"
    at_c = replay(ref, c, faithful, errors, feed)
    assert at_c.verdict == "undetermined", at_c.text
    assert b.key in at_c.text and "moving them that much moves this op" in at_c.text
    wrong = {a.key: a_art, c.key: (((a_art + np.float32(1.0)) - np.float32(3.5)) * np.float32(2.0)).astype(np.float32)}
    errors = pair(ref.sites, ref.values, wrong, {b.key: "cannot map: planted"})
    assert replay(ref, c, wrong, errors, feed).verdict == "op-differs"
