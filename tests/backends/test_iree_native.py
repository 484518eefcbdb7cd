"""IREE's native consumer on the inputs it is given, not the artifact's example inputs: a 0-d leaf goes in as raw
bytes (`--input=i32=@inputs/inputN.bin`), and its file is moved to the run's inputs like every other one."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import Target
from multiexport.api import export
from multiexport.exporting.registry import get_backend
from multiexport.native import run as native


def _write_at(cache, pos):
    return cache.at[pos].set(1.0)


def test_a_scalar_input_is_read_from_the_given_inputs(tmp_path):
    if not get_backend("iree").available().ok:
        pytest.skip(get_backend("iree").available().reason)
    target = Target(_write_at, args=(np.zeros(8, np.float32), np.int32(2)), name="write_at")
    export(target, out_dir=tmp_path / "iree", backend="iree", check_load=False)
    for pos in (5, 2):  # 2 is the example's: a run that read the example's file would write slot 2 both times
        got = native.run(tmp_path / "iree", {"cache": np.zeros(8, np.float32), "pos": np.int32(pos)}).outputs["out"]
        np.testing.assert_array_equal(got, np.asarray(jnp.zeros(8).at[pos].set(1.0)))
