"""IREE's driver choice at export: past a size of weights, each driver is opened, timed and closed alone (each open
driver holds its own device copy of the parameters: two at once were most of a 1 B decoder's export peak)."""

from __future__ import annotations

import gc
import weakref

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
    IreeBackend().export(target.fn, sig, out, ExportOptions(external_weights="always", backend_options={"driver": "local-sync"}))
    assert (out / "weights.safetensors").exists()
    return out, [sig.example_feed()["x"]]


def _open_at_once(monkeypatch) -> list[int]:
    """Wrap the real open_call: the most drivers open at once (a driver is open while its call is alive)."""
    live, most, real = [0], [0], iree_driver.open_call

    def counted(*args, **kwargs):
        call = real(*args, **kwargs)
        live[0] += 1
        most[0] = max(most[0], live[0])
        weakref.finalize(call, lambda: live.__setitem__(0, live[0] - 1))
        return call

    monkeypatch.setattr(iree_driver, "open_call", counted)
    return most


@pytest.mark.parametrize("alone_bytes, most_open, how", [(1, 1, "each driver alone"), (1 << 30, 2, "interleaved")])
def test_past_the_size_each_driver_is_timed_alone(lifted, monkeypatch, alone_bytes, most_open, how):
    directory, arrays = lifted
    most = _open_at_once(monkeypatch)
    choice = iree_driver.choose_driver(directory / "model.vmfb", directory / "weights.safetensors", arrays, 1,
                                       threads=2, alone_bytes=alone_bytes)
    gc.collect()
    assert most[0] == most_open, choice
    assert how in choice["rule"] and set(choice["median_us"]) == {"local-sync", "local-task"}, choice
    assert choice["driver"] in ("local-sync", "local-task")
