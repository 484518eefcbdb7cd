"""Weights baked in or taken as inputs, and baked weights stored outside the module: every backend, with
parity (the small LM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiexport import examples
from multiexport.backends.xla import export as xla_export  # where the export reads its text limit
from multiexport.comparison import compare
from multiexport.exporting.registry import backend_class, get_backend, names
from multiexport.leaves import build_signature
from multiexport.measure.bench import directory_bytes

AVAILABLE = [n for n in names() if get_backend(n).available().ok]


# mode -> (target's weights, ExportOptions.external_weights)
MODES = {"inputs": ("inputs", "auto"), "baked": ("baked", "never"), "external": ("baked", "always")}


@pytest.fixture(scope="module")
def both_modes(tmp_path_factory):
    out = {}
    for mode, (weights, policy) in MODES.items():
        target = examples.lm("small", weights)
        out[mode] = compare(target, backends=AVAILABLE, out_dir=tmp_path_factory.mktemp(mode), trials=1, bench=None,
                            external_weights=policy)
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_every_backend_passes_parity_in_both_weight_modes(both_modes, mode):
    res = both_modes[mode]
    assert {n: r.status.value for n, r in res.backends.items()} == {n: "ok" for n in AVAILABLE}
    weights = res.signature.weights
    assert weights.mode == MODES[mode][0]
    if MODES[mode][0] == "baked":
        assert weights.baked_arrays > 10 and weights.input_bytes < 1024  # only the tokens are inputs
    else:
        assert weights.baked_bytes < 1024 and len(res.signature.inputs) > 30


def test_baked_artifacts_carry_the_weights_and_input_artifacts_do_not(both_modes):
    weight_bytes = both_modes["baked"].signature.weights.baked_bytes
    for name in AVAILABLE:
        baked = directory_bytes(both_modes["baked"].backends[name].artifact)
        inputs = directory_bytes(both_modes["inputs"].backends[name].artifact)
        # The example inputs (example_inputs.npz, IREE's inputs/*.npy) hold the weights of the inputs artifact;
        # leave them out of the count
        root = Path(both_modes["inputs"].backends[name].artifact)
        inputs -= sum(p.stat().st_size for p in [*root.glob("example_inputs*"), *root.glob("inputs/*")])
        assert baked > 0.9 * weight_bytes and inputs < 0.5 * weight_bytes, name


def test_manifests_say_where_the_weights_are(both_modes):
    from multiexport.exporting.manifest import Manifest

    for mode, res in both_modes.items():
        for name in AVAILABLE:
            weights = Manifest.read(res.backends[name].artifact).weights
            assert weights["mode"] == MODES[mode][0]
            if mode == "inputs":  # nothing to store but the odd small constant
                assert weights["storage"] != "external" and weights["embedded_bytes"] < 1024, name
            else:
                external = mode == "external" and "external" in backend_class(name).weight_storage
                assert weights["storage"] == ("external" if external else "embedded"), name
            assert res.backends[name].weights["storage"] == weights["storage"]  # what the report shows


def test_external_weights_leave_the_module_and_live_once_in_their_file(both_modes):
    """Each format keeps the lifted weights in its own external storage, and the rest of the artifact is small."""
    from multiexport.exporting.manifest import Manifest

    baked = both_modes["external"].signature.weights.baked_bytes
    for name in AVAILABLE:
        directory = Path(both_modes["external"].backends[name].artifact)
        if "external" not in backend_class(name).weight_storage:  # the format has nowhere else: it says so
            assert any("embedded" in w for w in both_modes["external"].backends[name].warnings), name
            continue
        weights = Manifest.read(directory).weights
        stored = directory_bytes(directory / weights["file"]) if (directory / weights["file"]).is_dir() else \
            (directory / weights["file"]).stat().st_size
        assert stored >= 0.9 * baked, name
        assert weights["external_bytes"] >= 0.9 * baked and weights["embedded_bytes"] < 0.05 * baked, name
        # Everything else (modules, manifest, example inputs) is a fraction of one weight copy: not embedded.
        assert directory_bytes(directory) - stored < 0.5 * baked, name


def test_xla_skips_text_forms_past_the_limit(tmp_path, monkeypatch):
    target = examples.lm("small", "baked")
    monkeypatch.setattr(xla_export, "TEXT_LIMIT_BYTES", 1000)
    artifact = get_backend("xla").export(target.fn, build_signature(target), tmp_path / "a")
    assert "stablehlo_text" not in artifact.manifest.files and "hlo_text" not in artifact.manifest.files
    assert any(w.startswith("no text forms") for w in artifact.manifest.warnings)
    assert artifact.manifest.format["weight_copies"] == 2
