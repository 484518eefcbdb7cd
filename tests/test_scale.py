"""Weights baked in or taken as inputs: every backend, both modes, with parity (the small LM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiexport import examples
from multiexport.backends import xla as xla_backend
from multiexport.bench import directory_bytes
from multiexport.comparison import compare
from multiexport.registry import get_backend, names
from multiexport.signature import build_signature

AVAILABLE = [n for n in names() if get_backend(n).available().ok]


@pytest.fixture(scope="module")
def both_modes(tmp_path_factory):
    out = {}
    for mode in ("inputs", "baked"):
        target = examples.lm("small", mode)
        out[mode] = compare(target, backends=AVAILABLE, out_dir=tmp_path_factory.mktemp(mode), trials=1, bench=None)
    return out


@pytest.mark.parametrize("mode", ["inputs", "baked"])
def test_every_backend_passes_parity_in_both_weight_modes(both_modes, mode):
    res = both_modes[mode]
    assert {n: r.status for n, r in res.backends.items()} == {n: "ok" for n in AVAILABLE}
    weights = res.signature["weights"]
    assert weights["mode"] == mode
    if mode == "baked":
        assert weights["baked_arrays"] > 10 and weights["input_bytes"] < 1024  # only the tokens are inputs
    else:
        assert weights["baked_bytes"] < 1024 and len(res.signature["inputs"]) > 30


def test_baked_artifacts_carry_the_weights_and_input_artifacts_do_not(both_modes):
    weight_bytes = both_modes["baked"].signature["weights"]["baked_bytes"]
    for name in AVAILABLE:
        baked = directory_bytes(both_modes["baked"].backends[name].artifact)
        inputs = directory_bytes(both_modes["inputs"].backends[name].artifact)
        # example_inputs.npz holds the weights of the inputs artifact; leave it out of the count
        inputs -= sum(p.stat().st_size for p in Path(both_modes["inputs"].backends[name].artifact).glob("example_inputs*"))
        assert baked - inputs > 0.9 * weight_bytes, name


def test_manifests_say_where_the_weights_are(both_modes):
    from multiexport.manifest import Manifest

    for mode, res in both_modes.items():
        for name in AVAILABLE:
            assert Manifest.read(res.backends[name].artifact).weights["mode"] == mode


def test_xla_skips_text_forms_past_the_limit(tmp_path, monkeypatch):
    target = examples.lm("small", "baked")
    monkeypatch.setattr(xla_backend, "TEXT_LIMIT_BYTES", 1000)
    artifact = get_backend("xla").export(target.fn, build_signature(target), tmp_path / "a")
    assert "stablehlo_text" not in artifact.manifest.files and "hlo_text" not in artifact.manifest.files
    assert any(w.startswith("no text forms") for w in artifact.manifest.warnings)
    assert artifact.manifest.format["weight_copies"] == 2
