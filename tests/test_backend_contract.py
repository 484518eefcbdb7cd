"""Every registered backend runs every case: export, then load from disk in a fresh process.

Outputs are checked with the parity engine at its per-dtype defaults (XLA: bit-exact). A backend that
cannot support a case lists it in KNOWN_UNSUPPORTED in its own test module (tests/backends/test_NAME.py)
with the reason; such cases must then fail with a typed ExportError (strict xfail).
"""

from __future__ import annotations

import importlib

import pytest

from multiexport import ExportError
from multiexport.arrays_io import load_npz, save_npz
from multiexport.parity import compare_leaf
from multiexport.registry import get_backend, names
from multiexport.signature import build_signature
from multiexport.tolerance import EXACT, default_tolerance

from .cases import CASES, CASE_IDS, feed_for
from .conftest import reference_outputs, run_cli

# XLA compiles the very module jax.jit runs, so it must agree bit for bit; other formats get the defaults.
BIT_EXACT = {"xla"}


def known_unsupported(backend_name: str) -> dict[str, str]:
    try:
        module = importlib.import_module(f"tests.backends.test_{backend_name}")
    except ImportError:
        return {}
    return getattr(module, "KNOWN_UNSUPPORTED", {})


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
    reason = known_unsupported(backend.name).get(c.name)
    if reason:
        with pytest.raises(ExportError):
            backend.export(target.fn, sig, tmp_path / "artifact")
        pytest.xfail(f"{backend.name} does not support {c.name}: {reason}")
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
        for leaf in sig.outputs:
            tol = EXACT if backend.name in BIT_EXACT else default_tolerance(leaf.dtype)
            verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, tol, f"batch={batch}")
            assert verdict.passed, verdict.reasons


@pytest.mark.parametrize("c", [c for c in CASES if c.unused], ids=lambda c: c.name)
def test_keep_unused_makes_every_leaf_a_parameter_in_leaf_order(backend, c, tmp_path):
    from multiexport.backend import ExportOptions

    if c.name in known_unsupported(backend.name):
        pytest.skip(f"{backend.name} does not support {c.name}")
    target = c.make()
    sig = build_signature(target)
    m = backend.export(target.fn, sig, tmp_path / "a", ExportOptions(keep_unused=True)).manifest
    assert m.keep_unused and all(leaf.used for leaf in m.inputs)
    assert all(leaf.param is not None for leaf in m.inputs)
    runner = backend.load(tmp_path / "a")
    ref = reference_outputs(target, sig, sig.example_feed())
    verdict = compare_leaf("out", runner(sig.example_feed())["out"], ref["out"], sig.outputs[0].dtype,
                           default_tolerance(sig.outputs[0].dtype))
    assert verdict.passed, verdict.reasons
