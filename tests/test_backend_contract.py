"""Every registered backend runs every case: export, then load from disk in a fresh process."""

from __future__ import annotations

import numpy as np
import pytest

from multiexport.arrays_io import load_npz, save_npz
from multiexport.registry import get_backend, names
from multiexport.signature import build_signature

from .cases import CASES, CASE_IDS, feed_for
from .conftest import reference_outputs, run_cli

# XLA compiles the very module jax.jit runs, so it must agree bit for bit; other formats get a bound.
RTOL = {"xla": 0.0}
DEFAULT_RTOL = 1e-5


@pytest.fixture(params=names())
def backend(request):
    b = get_backend(request.param)
    status = b.available()
    if not status.ok:
        pytest.skip(f"backend {b.name} unavailable: {status.reason}")
    return b


@pytest.mark.subprocess
@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_export_then_run_from_disk_in_a_fresh_process(backend, c, tmp_path):
    target = c.make()
    sig = build_signature(target)
    artifact = backend.export(target.fn, sig, tmp_path / "artifact")
    m = artifact.manifest

    assert [leaf.name for leaf in m.inputs] == [leaf.name for leaf in sig.inputs]
    assert {leaf.name for leaf in m.inputs if leaf.used} == set(c.used)
    assert {leaf.name for leaf in m.inputs if not leaf.used} == set(c.unused)
    assert all((leaf.param is None) != leaf.used for leaf in m.inputs)

    for batch in c.batch_sizes or (None,):
        feed = feed_for(sig, batch)
        save_npz(tmp_path / "in.npz", feed)
        run_cli("run", artifact.directory, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz", check=True)
        got = load_npz(tmp_path / "out.npz")
        want = reference_outputs(target, sig, feed)
        assert list(got) == [leaf.name for leaf in sig.outputs]
        for name, expected in want.items():
            assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
            rtol = RTOL.get(backend.name, DEFAULT_RTOL)
            if rtol == 0.0:
                np.testing.assert_array_equal(got[name], expected, err_msg=name)
            else:
                np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=rtol, err_msg=name)


@pytest.mark.parametrize("c", [c for c in CASES if c.unused], ids=lambda c: c.name)
def test_keep_unused_makes_every_leaf_a_parameter_in_leaf_order(backend, c, tmp_path):
    from multiexport.backend import ExportOptions

    target = c.make()
    sig = build_signature(target)
    m = backend.export(target.fn, sig, tmp_path / "a", ExportOptions(keep_unused=True)).manifest
    assert m.keep_unused and all(leaf.used for leaf in m.inputs)
    assert all(leaf.param is not None for leaf in m.inputs)
    runner = backend.load(tmp_path / "a")
    ref = reference_outputs(target, sig, sig.example_feed())
    np.testing.assert_allclose(runner(sig.example_feed())["out"], ref["out"])
