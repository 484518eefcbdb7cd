"""examples/cpp builds with one command against the installed multiexport and answers the seed question."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from multiexport.export import ExportOptions
from multiexport.export.registry import get_backend
from multiexport.native.build import NativeBuildError, find_pjrt_header, find_pjrt_plugin
from multiexport.signature import build_signature

from ..cases import case
from ..conftest import REPO, reference_outputs


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    try:
        find_pjrt_header()
        plugin = find_pjrt_plugin()
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    if shutil.which("make") is None:
        pytest.skip("no make")
    out = tmp_path_factory.mktemp("example")
    subprocess.run(["make", "-C", str(REPO / "examples" / "cpp"), f"PYTHON={sys.executable}", f"OUT={out}"],
                   check=True, capture_output=True, timeout=600)
    return out / "seed_pjrt", plugin


def test_the_seed_question_answered_in_cpp(example, tmp_path):
    program, plugin = example
    target = case("seed").make()
    sig = build_signature(target)
    directory = get_backend("xla").export(target.fn, sig, tmp_path / "seed", ExportOptions()).directory
    proc = subprocess.run([str(program), str(directory), str(plugin)], capture_output=True, text=True, env={},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "foo.bar                  dropped: the module never reads it" in proc.stdout
    assert "0: foo.baz (int32) from inputs/input1.npy" in proc.stdout
    want = int(reference_outputs(target, sig, sig.example_feed())["out"])
    assert f"output out (int32): {want}\n" in proc.stdout


def test_a_symbolic_export_runs_through_its_refined_module(example, tmp_path):
    program, plugin = example
    target = case("symbolic_batch").make()
    sig = build_signature(target)
    directory = get_backend("xla").export(target.fn, sig, tmp_path / "sym", ExportOptions()).directory
    proc = subprocess.run([str(program), str(directory), str(plugin), "--sizes", "b=3"], capture_output=True,
                          text=True, env={}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    want = reference_outputs(target, sig, sig.example_feed())["out.y"].reshape(-1)[:8]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("output out.y (float32):"))
    got = np.array([float(v) for v in line.split(":")[1].split() if v != "..."], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5)  # printed with %g: six significant digits
