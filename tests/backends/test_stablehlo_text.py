"""The SDK's reference backend (examples/reference_backend/): a format added from outside multiexport with no core
change, registered by the tests alone, run through the same contract test as the built-in six
(tests/exporting/test_contract.py over tests/cases.py), and here end to end through the public paths."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from multiexport import examples
from multiexport.exporting import ExportOptions, export_artifact
from multiexport.exporting.facts import StaticSizesFacts
from multiexport.exporting.registry import get_backend, names
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.measure.parity import compare_leaf
from multiexport.measure.tolerance import default_tolerance

from ..cases import external_backend, feed_for, in_fresh_process
from ..conftest import REPO, reference_outputs

NAME = "stablehlo-text"
# It compiles static shapes only: the driver's static-size fallback builds the example's size, and a batch it
# was not built for is refused (the contract test checks that, and that the artifact says so).
KNOWN_UNSUPPORTED = {"symbolic_batch": ("size-unsupported", "PJRT compiles static shapes: one model per size")}


@pytest.fixture
def reference():
    with external_backend(NAME):
        yield get_backend(NAME)


def test_it_is_registered_from_outside_and_only_while_a_test_holds_it(reference):
    assert NAME in names() and type(reference).__module__ == "reference_backend"
    assert reference.spec.name == reference.name == NAME and reference.presentation.order == 900


def test_a_backend_added_from_outside_exports_loads_in_a_fresh_process_and_matches_jit(reference, tmp_path):
    target = examples.mlp()
    sig = build_signature(target)
    artifact = export_artifact(reference, target.fn, sig, tmp_path / "mlp", ExportOptions())
    manifest = json.loads((artifact.directory / "manifest.json").read_text())
    assert manifest["backend"] == NAME and manifest["files"]["model"] == "model.mlir"
    assert manifest["format"]["module_args"] == [leaf.name for leaf in sig.inputs]
    feed = feed_for(sig)
    save_npz(tmp_path / "in.npz", feed)
    code = (f"import multiexport; from multiexport.files.npz import load_npz, save_npz\n"
            f"save_npz({str(tmp_path / 'out.npz')!r}, multiexport.load({str(artifact.directory)!r})("
            f"load_npz({str(tmp_path / 'in.npz')!r})))")
    subprocess.run(in_fresh_process(NAME, code), cwd=REPO, check=True, timeout=300)
    got, want = load_npz(tmp_path / "out.npz"), reference_outputs(target, sig, feed)
    for leaf in sig.outputs:
        verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype))
        assert verdict.passed, verdict.reasons


def test_a_symbolic_signature_gets_one_model_per_size_from_the_driver(reference, tmp_path):
    """The backend refuses symbolic dims; the static-size fallback is the driver's, not the backend's."""
    target = examples.mlp(symbolic_batch=True)
    sig = build_signature(target)
    (dim,) = sig.symbolic_dims
    artifact = export_artifact(reference, target.fn, sig, tmp_path / "sym",
                               ExportOptions(fallback_sizes={dim: (2, 5)}))
    facts = reference.facts(artifact.manifest)
    assert isinstance(facts, StaticSizesFacts) and {f"{dim}=2", f"{dim}=5"} <= set(facts.static_fallback.models)
    runner = reference.load(artifact.directory)
    for size in (2, 5):
        feed = feed_for(sig, size)
        out = runner(feed)
        want = reference_outputs(target, sig, feed)
        assert all(np.allclose(out[k], want[k], rtol=1e-5, atol=1e-5) for k in want)
