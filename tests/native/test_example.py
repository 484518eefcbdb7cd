"""examples/cpp builds with one command against the installed multiexport and answers the seed question."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.native.build import NativeBuildError, find_pjrt_header, find_pjrt_plugin

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


def _seed_xla(tmp_path):
    """The seed target, its signature, and its XLA artifact under tmp_path/seed."""
    target = case("seed").make()
    sig = build_signature(target)
    return target, sig, get_backend("xla").export(target.fn, sig, tmp_path / "seed", ExportOptions()).directory


def test_the_seed_question_answered_in_cpp(example, tmp_path):
    program, plugin = example
    target, sig, directory = _seed_xla(tmp_path)
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


def _plain_env(**extra):
    """An environment with no venv on PATH: what a user's shell in the checkout has before activating."""
    import os

    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return {"PATH": path, "HOME": os.environ.get("HOME", "/"), **extra}


def test_make_run_needs_no_python_and_finds_the_plugin_itself(example, tmp_path):
    """The README's line, `make -C examples/cpp run ARTIFACT=DIR`, with no PYTHON= and no venv on PATH: the
    Makefile uses the checkout's venv and passes the installed plugin (the program alone once died with
    'no PJRT plugin given', and make without PYTHON= with "No module named 'multiexport'")."""
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in the checkout (make setup makes it)")
    target, sig, directory = _seed_xla(tmp_path)
    proc = subprocess.run(["make", "-s", "-C", str(REPO / "examples" / "cpp"), f"OUT={tmp_path}", "run",
                           f"ARTIFACT={directory}"], capture_output=True, text=True, env=_plain_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = int(reference_outputs(target, sig, sig.example_feed())["out"])
    assert f"output out (int32): {want}\n" in proc.stdout


def test_the_program_takes_the_plugin_from_the_environment_or_says_how_to_give_it(example, tmp_path):
    program, plugin = example
    target, sig, directory = _seed_xla(tmp_path)
    proc = subprocess.run([str(program), str(directory)], capture_output=True, text=True,
                          env={"MULTIEXPORT_PJRT_PLUGIN": str(plugin)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    missing = subprocess.run([str(program), str(directory)], capture_output=True, text=True, env={}, timeout=60)
    assert missing.returncode != 0 and "MULTIEXPORT_PJRT_PLUGIN" in missing.stderr


def test_make_with_a_python_lacking_multiexport_says_what_to_do(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("no make")
    proc = subprocess.run(["make", "-C", str(REPO / "examples" / "cpp"), f"OUT={tmp_path}", "PYTHON=/usr/bin/false"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "cannot import multiexport: run `make setup`" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing half-built
