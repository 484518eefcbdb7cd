"""Hostile input round 2 (issue 28): exit codes by cause.

0 means "every backend faithful", 1 a parity failure, 70 a bug in multiexport: hostile input is 2 with one
line; an environment that cannot work (JAX_PLATFORMS, XLA_FLAGS, a full disk) is 2 naming what to change.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
from hypothesis import given, strategies as st

from .conftest import assert_one_line, run_main

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**400), 10**400) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
# Where schema 1 differs from schema 2 (what results.legacy converts), and a few places around them.
LEGACY_PATHS = [("trials",), ("backends",), ("backends", "xla"), ("backends", "xla", "bench"),
                ("backends", "xla", "bench", "sizes"), ("backends", "xla", "bench", "sizes", 0),
                ("backends", "xla", "parity"), ("backends", "xla", "parity", "leaves"),
                ("backends", "xla", "parity", "leaves", 0), ("backends", "xla", "parity", "leaves", 0, "stats"),
                ("reference",), ("reference", "bench")]


def _put(data, path, value):
    node = data
    for key in path[:-1]:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return False
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)):
        node[path[-1]] = value
        return True
    return False


@pytest.fixture(scope="module")
def bench_results(seed_results):
    """The seed's results.json with a latency row (made from the real one: xla's timing filled in)."""
    data = json.loads(seed_results.read_text())
    latency = {"n": 100, "min_ms": 0.01, "p50_ms": 0.02, "p90_ms": 0.03, "p99_ms": 0.04, "max_ms": 0.05,
               "mean_ms": 0.02, "std_ms": 0.001, "ci95_low_ms": 0.019, "ci95_high_ms": 0.021}
    data["backends"]["xla"]["bench"] = {"load_s": 0.05, "sizes": [{"batch": None, "latency": latency}],
                                        "memory": {}, "artifact_bytes": 10, "runner": {}, "config": {}}
    return data


def test_a_huge_integer_where_a_float_goes_is_one_line(bench_results, tmp_path):
    data = copy.deepcopy(bench_results)
    data["backends"]["xla"]["bench"]["load_s"] = 10**400
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data))
    for args in (["report", path, "--out-dir", tmp_path / "r"], ["diff", path, path]):
        proc = run_main(*args, tmp=tmp_path)  # before: OverflowError, exit 70
        assert_one_line(proc, 2, "backends.xla.bench.load_s", "integer of 401 digits")


def test_a_schema_1_results_json_with_a_wrong_shape_is_one_line_in_diff(seed_results, tmp_path):
    data = json.loads(seed_results.read_text())
    data["schema"] = "multiexport.results/1"
    data["backends"]["xla"]["parity"] = {"leaves": 5}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    proc = run_main("diff", path, seed_results, tmp=tmp_path)  # before: TypeError, exit 70
    assert_one_line(proc, 2, str(path), "parity")


@given(path=st.sampled_from(LEGACY_PATHS), value=JSON_VALUES)
def test_diff_of_any_schema_1_shape_is_a_verdict_or_one_line(seed_results, tmp_path, path, value):
    data = json.loads(seed_results.read_text())
    data["schema"] = "multiexport.results/1"
    _put(data, path, value)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    proc = run_main("diff", old, seed_results, tmp=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr
    if proc.returncode == 2:
        assert_one_line(proc, 2, str(old))


def _cuda_present() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("jax_cuda12_plugin", "jax_cuda13_plugin"))


@pytest.mark.skipif(_cuda_present(), reason="a CUDA plugin is installed: JAX_PLATFORMS=cuda may work here")
def test_jax_platforms_naming_an_absent_platform_is_an_environment_error(sandbox):
    proc = sandbox.cli("signature", "multiexport.examples:seed", env={"JAX_PLATFORMS": "cuda"})
    # before: "calling the factory failed: AssertionError:" (a target error), or exit 70 for a numpy target
    assert_one_line(proc, 2, "JAX_PLATFORMS=cuda", "JAX_PLATFORMS=cpu")


def test_a_bad_xla_flags_is_an_environment_error_not_the_parity_failure_code(sandbox):
    proc = sandbox.cli("signature", "multiexport.examples:seed", env={"XLA_FLAGS": "--no_such_xla_flag=1"})
    # before: XLA's own fatal "Unknown flag in XLA_FLAGS" and exit 1, the code of a parity failure
    assert_one_line(proc, 2, "XLA_FLAGS", "--no_such_xla_flag")


def test_a_right_to_left_mark_on_an_ascii_terminal_prints(sandbox):
    target = sandbox.root / "rtl.py"
    target.write_text("import numpy as np\nfrom multiexport import Target\n\ndef f(d):\n    return d['\\u200fx'] + 1\n\n"
                      "target = Target(f, ({'\\u200fx': np.zeros(3, np.float32)},), name='t\\u200fx')\n")
    proc = sandbox.cli("signature", target, env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"})
    assert proc.returncode == 0, proc.stderr  # before: UnicodeEncodeError, exit 70
    assert "\\u200f" in proc.stdout


@pytest.fixture
def small_disk(tmp_path):
    """A real 8 MiB tmpfs mounted at tmp_path/disk (needs the right to mount: root in a container)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_while_writing_results_is_an_environment_error_and_the_run_is_not_left_running(small_disk):
    from multiexport.comparison import CompareConfig, compare
    from multiexport.errors import EnvironmentProblem
    from multiexport.examples import seed

    out = small_disk / "out"

    def fill(message: str) -> None:
        # the exports are on disk, the runs go on in TMPDIR: fill the disk before the results are written
        if ": run " in message and not (small_disk / "filler").exists():
            with open(small_disk / "filler", "wb") as fh:
                try:
                    while True:
                        fh.write(bytes(1 << 16))
                except OSError:
                    pass

    config = CompareConfig(backends=("xla",), out_dir=out, trials=1, bench=None)
    with pytest.raises(EnvironmentProblem, match="no space left") as caught:
        compare(seed(), config, progress=fill)  # before: OSError ENOSPC (exit 70), marker left "running"
    assert "results of this run were not saved" in str(caught.value)
    marker = json.loads((out / ".multiexport-run").read_text())
    assert marker["state"] == "failed"


@pytest.mark.parametrize("command", ["compare", "export"])
def test_a_full_disk_on_the_command_line_is_exit_2_in_one_line(sandbox, small_disk, command):
    """The command line's side of the test above: the user sees exit 2 (the environment) and one line naming
    the output directory, never a traceback or exit 70 (a multiexport bug)."""
    with open(small_disk / "filler", "wb") as fh:  # a real full disk: writes fail with ENOSPC
        try:
            while True:
                fh.write(bytes(1 << 16))
        except OSError:
            pass
    out = small_disk / "out"
    args = (["compare", "multiexport.examples:seed", "--backends", "xla", "--trials", "1", "--no-bench"]
            if command == "compare" else ["export", "multiexport.examples:seed", "--backend", "xla"])
    proc = sandbox.cli(*args, "--out-dir", out)
    # export names the directory it stages in, beside out
    assert_one_line(proc, 2, f"Output '{out if command == 'compare' else small_disk}'", "no space left")
