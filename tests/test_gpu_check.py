"""benchmarks/gpu_check.sh and benchmarks/gpu_check.py: their arguments, the summary they write, and (slow)
the whole check rehearsed the way the device machine runs it: a throwaway venv holding only the device's
package set (CPU JAX), multiexport installed with --no-deps from the carried wheels, no index; the GPU rows
are then `no-gpu` rows with JAX's reason and every CPU row runs for real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check

from .conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
DEVICE_COMMAND = """run(command='bash benchmarks/gpu_check.sh "$OUT"', carry=[".whl"], timeout_s=480)"""


def _bash(*args: str, env: dict | None = None, timeout: float = 60, script: Path = SCRIPT):
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def test_help_names_the_device_command_and_the_fetch():
    proc = _bash("--help")
    assert proc.returncode == 0, proc.stderr
    assert DEVICE_COMMAND in proc.stdout
    assert "bash benchmarks/gpu_check.sh --fetch" in proc.stdout
    assert DEVICE_COMMAND in (REPO / "README.md").read_text()  # documented where users look, the same line


def test_no_output_directory_is_a_usage_error():
    proc = _bash()
    assert proc.returncode == 2
    assert "OUT_DIR is required" in proc.stderr


def test_without_carried_wheels_it_says_to_fetch_them(tmp_path):
    copy = tmp_path / "repo" / "benchmarks"
    copy.mkdir(parents=True)
    for name in ("gpu_check.sh", "gpu_wheels.txt"):
        shutil.copy(REPO / "benchmarks" / name, copy / name)
    proc = _bash(str(tmp_path / "out"), script=copy / "gpu_check.sh")
    assert proc.returncode == 2
    assert "no wheels in" in proc.stderr and "--fetch" in proc.stderr and 'carry=[".whl"]' in proc.stderr


def test_the_carried_wheels_are_pinned_and_not_on_the_device_already():
    lines = [line.strip() for line in (REPO / "benchmarks" / "gpu_wheels.txt").read_text().splitlines()]
    wanted = [line for line in lines if line and not line.startswith("#")]
    assert wanted and all("==" in line for line in wanted), wanted
    device = {
        line.split("==")[0]
        for line in (REPO / "benchmarks" / "gpu_device_set.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert not device & {line.split("==")[0] for line in wanted}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["out", "--models", "seed,resnet"], "--models"),
        (["out", "--batch-sizes", "1,x"], "--batch-sizes"),
        (["out", "--batch-sizes", "0"], "sizes >= 1"),
        (["out", "--bench-time", "0"], "--bench-time"),
        ([], "OUT_DIR is required"),
    ],
)
def test_bad_arguments_are_refused_with_the_option_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_arguments_become_the_config():
    config, summarize = gpu_check.parse_args(
        ["o", "--models", "seed", "--batch-sizes", "2,4", "--bench-time", "0.1", "--no-native"]
    )
    assert summarize is None
    assert config == gpu_check.CheckConfig(Path("o"), ("seed",), (2, 4), 0.1, 20, False, None)


def _results() -> dict:
    """A results.json as a GPU machine writes it: GPU and CPU rows, a no-gpu row, the other formats."""
    leaf = {"passed": True, "max_abs": 1e-6, "max_rel": 2e-6, "err_scale": 3.1e-7, "trials": 4, "reasons": []}
    rows = [
        gpu_check.Row(
            "mlp_dynamic",
            "jax.jit",
            "jax.jit on the GPU",
            "gpu",
            sizes={"b=1": {"p50_ms": 0.05, "h2d_ms": 0.02, "d2h_ms": 0.01}},
        ),
        gpu_check.Row(
            "mlp_dynamic",
            "xla",
            "jax.jit(Exported.call) on the GPU",
            "gpu",
            parity={"out.logits": leaf},
            sizes={"b=1": {"p50_ms": 0.051}, "b=64": {"p50_ms": 0.06}},
        ),
        gpu_check.Row(
            "mlp_dynamic",
            "xla native",
            "pjrt_run + xla_cuda_plugin.so",
            "gpu",
            parity={"out.logits": {**leaf, "passed": False, "reasons": ["Output 'out.logits' | 3 of 4"]}},
            status="parity-failed",
            reason="Output 'out.logits' | 3 of 4",
            sizes={"b=1": {"p50_ms": 0.03, "compile_ms": 250.0}},
        ),
        gpu_check.Row("seed", "xla native", "pjrt_run", "cpu", "not-available", "no PJRT CPU plugin"),
        gpu_check.Row("", "iree", "IREE", "-", "not-available", "not available here: no IREE"),
    ]
    from dataclasses import asdict

    return {
        "schema": gpu_check.SCHEMA,
        "gpu": "cuda:0",
        "gpu_reason": "",
        "seconds": 93.5,
        "environment": {
            "python": "3.12.3",
            "machine": "x86_64 16 cores",
            "export_platform": "cuda",
            "versions": {"jax": "0.11.2"},
            "nvidia_smi": "NVIDIA H200, 580.1, 143771 MiB",
        },
        "native_plugins": {
            "gpu": {
                "header": "/r/.whl/include",
                "program": "/c/pjrt_run",
                "plugin": "/s/jax_plugins/xla_cuda13/xla_cuda_plugin.so",
                "pjrt_api_version": "0.90",
                "stablehlo_minimum_version": "0.9.0",
                "stablehlo_current_version": "1.13.0",
            }
        },
        "rows": [asdict(r) for r in rows],
    }


def test_the_summary_is_one_table_row_per_size_and_lists_what_could_not_run():
    text = gpu_check.summary_markdown(_results())
    lines = text.splitlines()
    assert "- GPU: cuda:0; nvidia-smi: NVIDIA H200, 580.1, 143771 MiB" in lines
    assert any("xla_cuda_plugin.so, PJRT C API 0.90, StableHLO 0.9.0..1.13.0" in line for line in lines)
    assert "| mlp_dynamic | jax.jit | gpu | ok | - | b=1 | 50 us | 20 us | 10 us |  |" in lines
    assert "| mlp_dynamic | xla | gpu | ok | 1/1 leaves, err 3.1e-07 | b=1 | 51 us | - | - |  |" in lines
    assert "|  |  |  |  |  | b=64 | 60 us | - | - |  |" in lines
    assert (
        "| mlp_dynamic | xla native | gpu | parity-failed | 0/1 leaves, err 3.1e-07 | b=1 | 30 us (compile "
        "250.00 ms) | - | - | Output 'out.logits' | 3 of 4 |"
    ) in lines
    assert "| seed | xla native | cpu | not-available | - | - | - | - | - | no PJRT CPU plugin |" in lines
    assert "- **iree**: not available here: no IREE" in lines


def test_an_incomplete_run_says_so():
    assert gpu_check.summary_markdown({**_results(), "complete": False}).startswith(
        "# GPU check (incomplete: stopped before the last model)"
    )


def test_summarize_rewrites_the_summary_from_a_results_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(_results()))
    assert gpu_check.main(["--summarize", str(tmp_path / "results.json")]) == 0
    assert (tmp_path / "summary.md").read_text() == gpu_check.summary_markdown(_results())


def _device_python() -> str:
    """Python 3.12 as on the device machine (.ci/find-python312.sh), else this one."""
    proc = subprocess.run(["bash", str(REPO / ".ci" / "find-python312.sh")], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else sys.executable


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_check_runs_on_the_device_package_set_with_no_gpu(tmp_path):
    """The rehearsal: what the device machine would do, on this CPU machine, in a venv under tmp_path."""
    env_dir = tmp_path / "device-venv"
    subprocess.run([_device_python(), "-m", "venv", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",  # bytecode for every module of jax, scipy, ...: most of the install's time
            "--disable-pip-version-check",
            "-r",
            str(REPO / "benchmarks" / "gpu_device_set.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if install.returncode != 0:
        pytest.skip(f"the device package set cannot be installed here (no index?): {install.stderr[-300:]}")
    # A fetch that stopped half-way (wheels without the header) is fetched again, not run as if complete.
    if not list((REPO / ".whl").glob("*.whl")) or not (REPO / ".whl" / "include" / "pjrt_c_api.h").is_file():
        fetched = _bash("--fetch", timeout=300)
        if fetched.returncode != 0:
            pytest.skip(f"bash benchmarks/gpu_check.sh --fetch failed (no index?): {fetched.stderr[-300:]}")
    out = tmp_path / "out"
    proc = _bash(
        str(out),
        "--models",
        "seed,mlp_dynamic",
        "--batch-sizes",
        "1,8",
        "--bench-time",
        "0.05",
        "--min-iters",
        "5",
        timeout=400,
        env={
            "GPU_CHECK_PYTHON": str(python),
            "MULTIEXPORT_NATIVE_CACHE": str(tmp_path / "native"),
            "TMPDIR": str(tmp_path),
            "GPU_CHECK_COMPARE": "0",
        },
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    versions = results["environment"]["versions"]
    assert versions["jax"] == "0.11.2" and versions["onnxruntime"] == "1.30.0"
    assert "tensorflow" not in versions and results["gpu"] is None
    rows = {(r["model"], r["format"], r["device"]): r for r in results["rows"]}
    for model in ("seed", "mlp_dynamic"):
        for fmt in ("jax.jit", "xla", "xla native"):
            gpu_row = rows[(model, fmt, "gpu")]
            assert gpu_row["status"] == "no-gpu" and "sees no GPU" in gpu_row["reason"]
        for fmt in ("xla", "onnx"):
            row = rows[(model, fmt, "cpu")]
            assert row["status"] == "ok", row
            assert row["parity"] and all(leaf["passed"] for leaf in row["parity"].values())
            assert all(figures["p50_ms"] > 0 for figures in row["sizes"].values())
        assert rows[(model, "jax.jit", "cpu")]["sizes"]  # with h2d/d2h timed apart
        assert all("h2d_ms" in f and "d2h_ms" in f for f in rows[(model, "jax.jit", "cpu")]["sizes"].values())
    assert set(rows[("mlp_dynamic", "xla", "cpu")]["sizes"]) == {"b=1", "b=8"}
    # The device has no CPU PJRT plugin: that row says so; pjrt_run itself was built against the carried header.
    assert rows[("seed", "xla native", "cpu")]["status"] == "not-available"
    assert results["native_plugins"]["cpu"]["header"] == str(REPO / ".whl" / "include")
    assert Path(results["native_plugins"]["cpu"]["program"]).is_relative_to(tmp_path / "native")
    for fmt in ("savedmodel", "iree", "litert", "openvino"):
        assert rows[("", fmt, "-")]["status"] == "not-available"
        assert "not available here" in rows[("", fmt, "-")]["reason"]
    # Only what comes back from the device machine's OUT (8 files at most): artifacts stayed in the temp dir.
    assert {p.name for p in out.iterdir()} <= {"results.json", "summary.md", "log.txt", "install.log"}
    assert results["complete"]
    summary = (out / "summary.md").read_text()
    assert "| mlp_dynamic | onnx | cpu | ok |" in summary
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("multiexport-gpu-check.")]  # its temp dir is gone
    shutil.rmtree(env_dir)
