"""Hostile input round 2 (issue 28): figures no measurement gives are refused; big-endian input is read.

A crafted results.json with a NaN or negative latency must not make a backend "the fastest"; a big-endian
.npz (written on, or for, a machine of the other byte order) holds the same numbers and is read as such.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from .conftest import assert_one_line, run_main

LATENCY = {"n": 100, "min_ms": 0.01, "p50_ms": 0.02, "p90_ms": 0.03, "p99_ms": 0.04, "max_ms": 0.05,
           "mean_ms": 0.02, "std_ms": 0.001, "ci95_low_ms": 0.019, "ci95_high_ms": 0.021}


@pytest.fixture(scope="module")
def timed(seed_results):
    """The seed's real results.json with a latency row for xla."""
    data = json.loads(seed_results.read_text())
    data["backends"]["xla"]["bench"] = {"load_s": 0.05, "sizes": [{"batch": None, "latency": dict(LATENCY)}],
                                        "memory": {}, "artifact_bytes": 10, "runner": {}, "config": {}}
    return data


def _write(tmp_path, data, name="crafted.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("value", ["nan", -5.0, "-inf", "inf"])
@pytest.mark.parametrize("command", ["report", "diff"])
def test_an_impossible_p50_is_refused_naming_the_field(command, value, timed, tmp_path):
    data = copy.deepcopy(timed)
    data["backends"]["xla"]["bench"]["sizes"][0]["latency"]["p50_ms"] = value
    path = _write(tmp_path, data)
    args = ["report", path, "--out-dir", tmp_path / "r"] if command == "report" else ["diff", path, path]
    proc = run_main(*args, tmp=tmp_path)  # before: exit 0, and a NaN p50 was "the fastest faithful backend"
    assert_one_line(proc, 2, "backends.xla.bench.sizes[0].latency.p50_ms", "expected a finite latency >= 0 ms")
    assert not (tmp_path / "r").exists()


def test_a_nan_ratio_in_the_pairing_is_refused(timed, tmp_path):
    data = copy.deepcopy(timed)
    data["pairing"] = {"mode": "paired", "reason": "", "rounds": 3, "slice_s": 0.1,
                       "ratios": [{"batch": None, "faster": "xla", "slower": "jax", "ratio": "nan", "ci95_low": 1.0,
                                   "ci95_high": 1.1, "significant": True}]}
    proc = run_main("report", _write(tmp_path, data), "--out-dir", tmp_path / "r", tmp=tmp_path)
    assert_one_line(proc, 2, "pairing.ratios[0].ratio")


FIELDS = [k for k in LATENCY if k != "n"]


@given(field=st.sampled_from(FIELDS), value=st.floats(allow_nan=True, allow_infinity=True))
def test_any_latency_figure_is_read_or_refused_in_one_line(timed, tmp_path, field, value):
    data = copy.deepcopy(timed)
    latency = data["backends"]["xla"]["bench"]["sizes"][0]["latency"]
    latency[field] = value if math.isfinite(value) else str(value)
    path = _write(tmp_path, data)
    proc = run_main("report", path, "--out-dir", tmp_path / "r", tmp=tmp_path)
    assert proc.returncode in (0, 2), proc.stderr
    possible = math.isfinite(value) and value >= 0 and latency["min_ms"] <= latency["p50_ms"] <= latency["max_ms"]
    assert (proc.returncode == 0) == possible, proc.stderr
    if not possible:
        assert_one_line(proc, 2, "latency.")


def _big_endian_npz(path, dtype=">i4"):
    np.savez(path, **{"foo.baz": np.arange(10, dtype=dtype), "foo.bar": np.arange(10, dtype=">i4")})
    return path


def test_a_big_endian_inputs_file_is_read_as_its_numbers(artifact, sandbox):
    path = _big_endian_npz(sandbox.root / "be.npz")
    out = sandbox.root / "out.npz"
    proc = sandbox.main("run", artifact, "--inputs", path, "--save-outputs", out)
    assert proc.returncode == 0, proc.stderr  # before: "Input 'foo.baz' | got int32, expected int32"
    assert int(np.load(out)["out"]) == 45


def test_a_big_endian_array_through_the_python_api_runs(artifact):
    from multiexport import load

    runner = load(artifact)
    assert int(runner({"foo.baz": np.arange(10, dtype=">i4")})["out"]) == 45


def test_a_big_endian_array_of_the_wrong_type_says_big_endian(artifact):
    from multiexport import load
    from multiexport.errors import InputError

    with pytest.raises(InputError, match="got big-endian float32, expected int32"):
        load(artifact)({"foo.baz": np.arange(10, dtype=">f4")})


def test_an_npz_of_big_endian_arrays_loads_native(tmp_path):
    from multiexport.files.npz import load_npz

    arrays = load_npz(_big_endian_npz(tmp_path / "be.npz", ">f8"))
    assert arrays["foo.baz"].dtype == np.dtype("float64") and arrays["foo.baz"].dtype.byteorder in "=|"
    np.testing.assert_array_equal(arrays["foo.baz"], np.arange(10))
