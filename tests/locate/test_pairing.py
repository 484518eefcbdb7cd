"""Pairing per site: tolerance by dtype, the first diverging op whose inputs agree, its cone, aligning a shipped
module's ops with the reference's."""

from __future__ import annotations

import numpy as np

from multiexport.exporting.intermediates import Site
from multiexport.locate.pairing import align, candidates, compare_site, cone, pair


def site(i, op="stablehlo.add", operands=(), shape=(4,), dtype="float32"):
    return Site(f"op{i}", i, 0, op, shape, dtype, operands=tuple(operands))


def test_a_site_agrees_within_the_dtype_tolerance_and_diverges_beyond():
    s = site(0)
    ref = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    assert compare_site(s, ref, ref + 1e-7, _tol()).status == "agree"
    off = compare_site(s, ref, ref + np.array([0, 0, 0.5, 0], np.float32), _tol())
    assert off.status == "diverge" and off.bad == 1 and off.max_abs == 0.5 and off.relative == 0.125
    # a value that broadcasts to the site (the converter's lazy broadcast) is compared as the full tensor
    assert compare_site(site(1, shape=(2, 4)), np.ones((2, 4), np.float32), np.ones((1, 4)), _tol()).status == "agree"
    assert compare_site(s, ref, np.ones(3), _tol()).status == "diverge"  # a wrong shape is not a pass
    # non-finite elements must match exactly
    inf = np.array([np.inf, 1, 1, 1], np.float32)
    assert compare_site(s, inf, inf, _tol()).status == "agree"
    assert compare_site(s, inf, np.ones(4, np.float32), _tol()).status == "diverge"
    ints = site(2, dtype="int32")
    assert compare_site(ints, np.arange(4), np.arange(4) + np.array([0, 0, 0, 1]), _tol("int32")).status == "diverge"


def _tol(dtype="float32"):
    from multiexport.measure.tolerance import default_tolerance

    return default_tolerance(dtype)


def test_the_candidate_is_the_first_divergence_whose_inputs_agree_and_the_cone_follows():
    sites = [site(0, operands=("arg0",)), site(1, operands=("op0",)), site(2, operands=("op1",)),
             site(3, operands=("op0",)), site(4, operands=("op2", "op3"))]
    ref = {s.key: np.ones(4, np.float32) for s in sites}
    got = dict(ref)
    got["op1"] = got["op2"] = got["op4"] = np.full(4, 2.0, np.float32)
    errors = pair(sites, ref, got, {})
    assert [s.key for s in candidates(sites, errors)] == ["op1"]  # op2 diverges too, but its input op1 does
    assert [s.key for s in cone(sites, sites[1], errors, 5)] == ["op2", "op4"]
    del got["op1"]  # unmapped: op2 becomes the first place a difference is seen
    errors = pair(sites, ref, got, {"op1": "cannot map: removed"})
    assert errors["op1"].status == "unmapped" and errors["op1"].note == "cannot map: removed"
    assert [s.key for s in candidates(sites, errors)] == ["op2"]


def test_alignment_pairs_equal_runs_notes_a_replaced_op_and_an_inserted_one():
    ref = [site(0, "stablehlo.convolution"), site(1, "stablehlo.add"), site(2, "stablehlo.maximum")]
    replaced = [site(0, "stablehlo.convolution"), site(1, "stablehlo.subtract"), site(2, "stablehlo.maximum")]
    keys, notes = align(ref, replaced)
    assert keys == {"op0": "op0", "op1": "op1", "op2": "op2"} and "stablehlo.subtract" in notes["op1"]
    inserted = [site(0, "stablehlo.convolution"), site(1, "stablehlo.round_nearest_even", ["op0"]),
                site(2, "stablehlo.add", ["op1"]), site(3, "stablehlo.maximum", ["op2"])]
    keys, notes = align(ref, inserted)
    assert keys == {"op0": "op0", "op1": "op2", "op2": "op3"}
    assert "reads stablehlo.round_nearest_even" in notes["op1"] and "op2" not in notes
