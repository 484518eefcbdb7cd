"""examples/cpp builds with one command against the installed multiexport and answers the seed question."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multiexport.backends.xla.runtime import find_pjrt_header, find_pjrt_plugin
from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.leaves import build_signature
from multiexport.native.build import NativeBuildError

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


def readme_cpp_blocks() -> list[str]:
    """The README's fenced ```sh blocks that run examples/cpp (those naming `make -C examples/cpp`), verbatim."""
    import re

    text = (REPO / "README.md").read_text()
    return [b for b in re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M) if "make -C examples/cpp" in b]


def fnv1a64(array: np.ndarray) -> str:
    """The hash batch_openvino prints: FNV-1a 64 over the array's C-order bytes, 16 hex digits."""
    h = 1469598103934665603
    for byte in np.ascontiguousarray(array).tobytes():
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_the_readme_lines_for_examples_cpp_run_as_written(tmp_path):
    """The README's examples/cpp block, run line by line as written with bash in a fresh directory: the seed
    example prints 45 and the parameter order, the OpenVINO one's outputs at batch 1 and 8 equal `multiexport
    run` on the same inputs, bit for bit. Nothing in the lines is replaced: the directory holds a copy of
    examples/cpp (so the builds land there, not in the checkout) and `.venv`, a link to the venv running the
    tests (what `make setup` makes); PYTHONPATH names the checkout, as the venv's editable install would; no
    venv is on PATH."""
    import json
    import os

    from multiexport.backends.openvino.native import find_openvino_cpp

    blocks = readme_cpp_blocks()
    assert len(blocks) == 1, "README.md: expected one ```sh block running make -C examples/cpp"
    lines = [x for x in blocks[0].splitlines() if x.strip() and not x.lstrip().startswith("#")]
    assert any("run-openvino" in x for x in lines) and any(x.startswith("make -C examples/cpp run ") for x in lines)
    if shutil.which("make") is None or shutil.which("c++") is None:
        pytest.skip("no make or c++ on PATH")
    try:
        find_pjrt_header()
        find_pjrt_plugin()
        find_openvino_cpp()
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    pytest.importorskip("flax", reason="mlp_dynamic is a flax.linen example: pip install 'multiexport[flax]'")
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix) or not (venv / "bin" / "multiexport").exists():
        pytest.skip(f"the tests run outside a venv holding the multiexport script ({sys.prefix}): the lines use .venv/bin")

    work = tmp_path / "checkout"
    shutil.copytree(REPO / "examples" / "cpp", work / "examples" / "cpp",
                    ignore=shutil.ignore_patterns("seed_pjrt", "batch_openvino", "*.o"))
    (work / ".venv").symlink_to(venv, target_is_directory=True)
    env = _plain_env(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    stdout = ""
    for line in lines:
        proc = subprocess.run(["bash", "-c", line], cwd=work, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, f"README line failed: {line}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        stdout += proc.stdout

    # The seed example: foo.bar dropped, foo.baz the module's one parameter, and the answer 45.
    assert "foo.bar                  dropped: the module never reads it" in stdout
    assert "0: foo.baz (int32) from inputs/input1.npy" in stdout
    assert "output out (int32): 45\n" in stdout

    # The OpenVINO example against the Python runner, at each batch it printed.
    artifact = work / "multiexport-out" / "mlp-ov"
    native = json.loads((artifact / "manifest.json").read_text())["native"]
    example = dict(np.load(artifact / "example_inputs.npz"))
    batched = {a["leaf"] for a in native["args"] if a["shape"] and a["shape"][0] == native["symbolic_dims"][0]}
    printed = {}
    for row in stdout.splitlines():
        if row.startswith("batch ") and " fnv1a64=" in row:
            head, rest = row.split(": ", 1)
            name, rest = rest.split(" [", 1)
            printed[(int(head.split()[1]), name)] = (rest.split("]")[0], rest.split("fnv1a64=")[1].split()[0])
    assert {n for n, _ in printed} == {1, 8}, stdout
    for n in (1, 8):
        # Row r of a batched leaf is the example's row r % its batch, as batch_openvino.cpp builds it.
        feed = {k: np.take(v, np.arange(n) % v.shape[0], axis=0) if k in batched else v for k, v in example.items()}
        np.savez(tmp_path / f"in{n}.npz", **feed)
        subprocess.run([sys.executable, "-m", "multiexport", "run", str(artifact), "--inputs", str(tmp_path / f"in{n}.npz"),
                        "--save-outputs", str(tmp_path / f"out{n}.npz")], check=True, capture_output=True, timeout=600)
        want = dict(np.load(tmp_path / f"out{n}.npz"))
        assert {name for m, name in printed if m == n} == set(want)
        for name, value in want.items():
            shape, digest = printed[(n, name)]
            assert shape == ", ".join(map(str, value.shape)), (n, name, shape, value.shape)
            assert digest == fnv1a64(value), f"batch {n} {name}: the C++ output differs from multiexport run's"
