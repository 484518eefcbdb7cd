"""Export for where it will run: `compare --platforms cpu,tpu` lowers the XLA artifact for both (as `export` does),
and `run` / `native --device tpu` take the artifact's TPU platform or refuse, in one line before any runtime or
plugin loads, an artifact lowered without it, or a format with no TPU runtime. Run on this CPU machine: no TPU."""

from __future__ import annotations

import json

import pytest

from multiexport import api
from multiexport.leaves import load_target

from .conftest import run_cli

SPEC = "benchmarks.tpu_models:mlp"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("platforms")
    target = load_target(SPEC)
    api.export(target, root / "cpu", "xla", platforms=["cpu"])
    api.export(target, root / "both", "xla", platforms=["cpu", "tpu"])
    return root


def _one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_compare_lowers_the_xla_artifact_for_the_platforms_asked(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("compare", SPEC, "--backends", "xla", "--platforms", "cpu,tpu", "--no-bench", "--trials", "1",
                   "--out-dir", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    manifest = json.loads((out / "xla" / "manifest.json").read_text())
    assert manifest["supports"]["platforms"] == ["cpu", "tpu"]  # the CPU row's own platform first: it ran on it
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["platforms"] == ["cpu", "tpu"] and results["backends"]["xla"]["status"] == "ok"


def test_compare_refuses_an_unknown_platform_in_one_line(tmp_path):
    proc = run_cli("compare", SPEC, "--backends", "xla", "--platforms", "cpu,tpuu", "--out-dir", tmp_path / "out")
    assert proc.returncode == 2
    assert "Option 'platforms' | got cpu, tpuu, expected distinct names among cpu, cuda, rocm, tpu" in _one_line(proc)
    assert not (tmp_path / "out").exists()


def test_run_on_the_tpu_refuses_an_artifact_lowered_for_the_cpu_only(artifacts):
    proc = run_cli("run", artifacts / "cpu", "--device", "tpu")
    assert proc.returncode == 2
    assert (f"Artifact '{artifacts / 'cpu'}' | lowered for cpu, expected tpu for --device tpu: re-export with "
            "--platforms cpu,tpu") in _one_line(proc)


def test_run_on_the_tpu_takes_the_tpu_platform_and_says_when_jax_sees_none(artifacts):
    # lowered for the TPU: past the refusal, the XLA runner asks JAX for the TPU (none on this machine)
    proc = run_cli("run", artifacts / "both", "--device", "tpu", env={"JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 3
    assert "Device 'tpu' | JAX sees none" in _one_line(proc)
    assert run_cli("run", artifacts / "both", "--device", "cpu").returncode == 0  # the CPU branch of the same module


def test_run_on_the_tpu_refuses_a_format_without_a_tpu_runtime(tmp_path):
    pytest.importorskip("onnxruntime")
    api.export(load_target(SPEC), tmp_path / "onnx", "onnx")
    proc = run_cli("run", tmp_path / "onnx", "--device", "tpu")
    assert proc.returncode == 2
    assert "is a 'onnx' artifact, which has no TPU runtime here, expected device cpu" in _one_line(proc)


def test_native_on_the_tpu_refuses_a_cpu_only_artifact_before_looking_for_libtpu(artifacts):
    proc = run_cli("native", artifacts / "cpu", "--device", "tpu", "--print-command")
    assert proc.returncode == 2
    assert "lowered for cpu, expected tpu for --device tpu: re-export with --platforms cpu,tpu" in _one_line(proc)
    # lowered for the TPU, it goes on to look for libtpu's plugin (not installed here): another refusal
    both = run_cli("native", artifacts / "both", "--device", "tpu", "--print-command")
    assert both.returncode != 0 and "lowered for" not in both.stderr and "TPU" in both.stderr
