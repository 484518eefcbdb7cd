"""IREE's driver choice at export: past a size of weights no driver is opened (an open driver loads the parameters
again, 2.3x their size, beside the export worker's copy of the target: most of a 1 B decoder's export peak)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import Target
from multiexport.backends.iree import IreeBackend, driver as iree_driver
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature

pytest.importorskip("iree.runtime")


@pytest.fixture(scope="module")
def lifted(tmp_path_factory):
    """A module whose 1 MiB weight is lifted to weights.safetensors (external weights always)."""
    w = jnp.asarray(np.random.default_rng(0).normal(size=(512, 512)).astype(np.float32))

    def matvec(x):
        return x @ w

    target = Target(matvec, args=(np.ones((1, 512), np.float32),), name="matvec")
    sig = build_signature(target)
    out = tmp_path_factory.mktemp("iree") / "matvec"
    IreeBackend().export(target.fn, sig, out, ExportOptions(external_weights="always",
                                                            backend_options={"driver": "local-sync"}))
    assert (out / "weights.safetensors").exists()
    return out, [sig.example_feed()["x"]]


def _opened(monkeypatch) -> list[str]:
    """Wrap the real open_call: the drivers opened."""
    opened, real = [], iree_driver.open_call

    def counted(rt, driver, *args, **kwargs):
        opened.append(driver)
        return real(rt, driver, *args, **kwargs)

    monkeypatch.setattr(iree_driver, "open_call", counted)
    return opened


def test_past_the_size_no_driver_is_opened_and_the_rule_says_why(lifted, monkeypatch):
    directory, arrays = lifted
    opened = _opened(monkeypatch)
    choice = iree_driver.choose_driver(directory / "model.vmfb", directory / "weights.safetensors", arrays, 1,
                                       threads=2, untimed_bytes=1 << 19)
    assert opened == [] and choice["driver"] == "local-task" and "median_us" not in choice
    assert "not timed: 0.0 GiB of weights (past 0 MiB)" in choice["rule"], choice


def test_under_the_size_both_drivers_are_timed(lifted, monkeypatch):
    directory, arrays = lifted
    opened = _opened(monkeypatch)
    choice = iree_driver.choose_driver(directory / "model.vmfb", directory / "weights.safetensors", arrays, 1,
                                       threads=2)
    assert sorted(opened) == ["local-sync", "local-task"] and set(choice["median_us"]) == set(opened), choice
