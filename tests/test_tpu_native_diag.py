"""benchmarks/tpu_native_diag.py rehearsed on the CPU (--platform cpu, the PJRT CPU plugin): jax's own serialized
CompileOptions captured from its compile, pjrt_run given them (--compile-options) and jax's module (--program), each
variant's outputs against multiexport's XLA runner; and pjrt_run reading the options and program it is given."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from multiexport.backends.xla import runtime as pjrt

from .conftest import REPO


@pytest.fixture(scope="module")
def diag(tmp_path_factory):
    try:
        pjrt.find_pjrt_header()
        pjrt.find_pjrt_plugin(device="cpu")
    except Exception as exc:  # noqa: BLE001 - pjrt_run needs both
        pytest.skip(f"no PJRT CPU plugin or pjrt_c_api.h here: {exc}")
    out = tmp_path_factory.mktemp("diag")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.tpu_native_diag", str(out), "--platform", "cpu",
                           "--models", "mlp"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_every_variant_runs_and_is_compared_with_the_runner(diag):
    result = json.loads((diag / "native_diag.json").read_text())
    variants = [r["variant"][0] for r in result["rows"]]
    assert variants == ["A", "B", "C", "D"]  # one artifact on the CPU: lowered for it alone
    # on the CPU plugin jax's options and jax's module change nothing: every variant is bit-exact with the runner
    assert all(r["status"] == "ok" and r["bit_exact"] and r["err"] == {"out.logits": 0.0} for r in result["rows"])
    assert result["compiled"]["mlp-alone"]["chosen"] == "jit_call"
    options = (diag / "mlp-alone.jax_options.pb").read_bytes()
    assert len(options) == result["compiled"]["mlp-alone"]["options_bytes"] > 100  # jax's, not the 6-byte default
    assert "| mlp | alone | B manifest program + jax's options | ok | out.logits 0 | True |" in (
        diag / "native_diag.md").read_text()


def test_pjrt_run_compiles_with_the_options_and_program_it_is_given(diag, tmp_path):
    from multiexport import api
    from multiexport.examples import seed
    from multiexport.native.run import command

    artifact = tmp_path / "seed"
    api.export(seed(), artifact, "xla")
    argv, env = command(artifact, outputs_dir=str(tmp_path / "o"), device="cpu")
    (tmp_path / "empty.pb").write_bytes(b"")
    given = subprocess.run([*argv, "--compile-options", str(tmp_path / "empty.pb")], cwd=artifact, env=env,
                           capture_output=True, text=True, timeout=120)
    assert given.returncode == 1 and "is empty: it must hold a CompileOptionsProto" in given.stderr
    program = subprocess.run([*argv, "--program", str(tmp_path / "empty.pb")], cwd=artifact, env=env,
                             capture_output=True, text=True, timeout=120)
    assert program.returncode == 1 and "conversion requires module with `main` function" in program.stderr
    ok = subprocess.run([*argv, "--compile-options", str(diag / "mlp-alone.jax_options.pb")], cwd=artifact, env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr  # jax's options, from another module, compile this one too
