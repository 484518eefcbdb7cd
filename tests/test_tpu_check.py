"""benchmarks/tpu_check.sh and benchmarks/tpu_check.py: their arguments, the summary they write, and (slow) the whole
check rehearsed on this CPU machine the way the lent TPU machine runs it, with the TPU announced as it announces it
(TPU_ACCELERATOR_TYPE): the TPU rows are then `no-tpu` rows with JAX's or libtpu's own reason, every CPU row runs
for real, and nothing in the check's own process opens a TPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import tpu_check
from benchmarks.tpu_summary import summary_markdown

from .conftest import REPO

SCRIPT = REPO / "benchmarks" / "tpu_check.sh"
DEVICE_COMMAND = """run(command='bash benchmarks/tpu_check.sh "$OUT"', carry=[".tpu-wheels"], timeout_s=580)"""


def _bash(*args: str, env: dict | None = None, timeout: float = 60, script: Path = SCRIPT):
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def test_help_names_the_device_command_and_the_fetch():
    proc = _bash("--help")
    assert proc.returncode == 0, proc.stderr
    assert DEVICE_COMMAND in proc.stdout and "bash benchmarks/tpu_check.sh --fetch" in proc.stdout
    assert DEVICE_COMMAND in (REPO / "README.md").read_text()  # documented where users look, the same line
    assert ".tpu-wheels/" in (REPO / ".gitignore").read_text().splitlines()


def test_no_output_directory_is_a_usage_error():
    proc = _bash()
    assert proc.returncode == 2 and "OUT_DIR is required" in proc.stderr


def test_without_carried_wheels_it_says_to_fetch_them(tmp_path):
    copy = tmp_path / "repo" / "benchmarks"
    copy.mkdir(parents=True)
    shutil.copy(SCRIPT, copy / "tpu_check.sh")
    proc = _bash(str(tmp_path / "out"), script=copy / "tpu_check.sh")
    assert proc.returncode == 2
    assert "no wheels in" in proc.stderr and "--fetch" in proc.stderr and 'carry=[".tpu-wheels"]' in proc.stderr


@pytest.mark.parametrize("argv, message", [(["o", "--models", "seed,resnet"], "--models"),
                                           (["o", "--bench-time", "0"], "--bench-time"),
                                           ([], "OUT_DIR is required")])
def test_bad_arguments_are_refused_with_the_option_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        tpu_check.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def _results() -> dict:
    """A results.json as the TPU machine wrote it (2026-12-05, trimmed)."""
    return {
        "schema": tpu_check.SCHEMA, "seconds": 129.0, "tpu_device": "TPU v5 lite (tpu, 1 chip(s) seen)",
        "tpu_reason": "", "environment": {"tpu": "a TPU (/dev/vfio/1, TPU_ACCELERATOR_TYPE=v5litepod-4)",
                                          "python": "3.11.7", "cores": 13, "versions": {"jax": "0.10.2"},
                                          "libtpu": "/x/libtpu/libtpu.so", "tpu_env": ["TPU_SKIP_MDS_QUERY"]},
        "rows": [
            {"model": "mlp", "runner": "xla", "device": "tpu", "status": "ok", "reason": "",
             "vs": "jax.jit on the TPU", "err": {"out.logits": 0.0}, "p50_ms": 0.548, "ci95_ms": [0.533, 0.554],
             "calls": 1890, "h2d_ms": 0.584, "d2h_ms": 0.456},
            {"model": "mlp", "runner": "xla native", "device": "tpu", "status": "ok", "reason": "",
             "vs": "the XLA artifact", "err": {"out.logits": 0.0}, "bit_exact": True, "p50_ms": 0.452,
             "ci95_ms": [0.445, 0.467], "calls": 200, "compile_ms": 1007.0},
            {"model": "mlp", "runner": "xla native", "device": "cpu", "status": "not-available",
             "reason": "no PJRT CPU plugin"},
        ],
        "overhead": [{"model": "mlp", "runner_p50_ms": 0.548, "bare_p50_ms": 0.542, "ratio": 1.010, "calls": 1890}],
        "precision": [{"model": "mlp", "leaf": "out.logits", "row": "xla (cpu)", "vs_tpu_default": 5.1e-3,
                       "vs_tpu_highest": 1.5e-5, "tpu_default_vs_highest": 5.1e-3, "tpu_arithmetic": 5.1e-3,
                       "converter": 0.0, "explained": 1.0}],
        "compare": {"command": "multiexport compare", "exit": 3, "seconds": 11.0, "jax_platforms": "cpu",
                    "rows": {"xla": "ok", "onnx": "unavailable"}},
    }


def test_the_summary_has_a_row_per_runner_the_overhead_the_precision_table_and_the_default_compare():
    lines = summary_markdown(_results()).splitlines()
    assert "- TPU: TPU v5 lite (tpu, 1 chip(s) seen)" in lines
    assert ("| mlp | xla | tpu | ok | 0 (equal) | jax.jit on the TPU | 548 us [533 us, 554 us] | 1890 | 584 us | "
            "456 us |  |") in lines
    assert ("| mlp | xla native | tpu | ok | 0 (bit-exact) | the XLA artifact | 452 us [445 us, 467 us] | 200 | - | - "
            "| compile 1007 ms |") in lines
    assert "| mlp | xla native | cpu | not-available | - | - | - | - | - | - | no PJRT CPU plugin |" in lines
    assert "| mlp | 548 us | 542 us | 1.010 |" in lines
    assert "| mlp | out.logits | xla (cpu) | 5.1e-03 | 1.5e-05 | 5.1e-03 | 5.1e-03 | 0.0e+00 | 100% |" in lines
    assert any("exit 3 in 11 s; JAX_PLATFORMS of its processes: cpu; rows: xla: ok, onnx: unavailable" in line
               for line in lines)


def test_summarize_rewrites_the_summary_from_a_results_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(_results()))
    assert tpu_check.main(["--summarize", str(tmp_path / "results.json")]) == 0
    assert (tmp_path / "summary.md").read_text() == summary_markdown(_results())


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_check_rehearsed_on_the_cpu_gives_no_tpu_rows_with_the_reason(tmp_path):
    """The device script as it runs there, on this machine's venv (nothing installed: TPU_CHECK_INSTALL=0)."""
    import sys

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_") and k != "JAX_PLATFORMS"}
    env.update(TPU_CHECK_INSTALL="0", TPU_CHECK_PYTHON=sys.executable, TPU_ACCELERATOR_TYPE="v5litepod-4",
               TMPDIR=str(tmp_path))
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "--models", "seed,mlp", "--bench-time", "0.1",
                           "--no-compare"], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    tpu = [r for r in data["rows"] if r["device"] == "tpu"]
    assert len(tpu) == 8 and {r["status"] for r in tpu} == {"no-tpu"}, tpu  # 3 JAX runners + native, 2 models
    assert all(r["reason"] for r in tpu)
    assert data["tpu_reason"].startswith("JAX sees no TPU")
    assert any("no TPU PJRT plugin: libtpu is not installed" in r["reason"] for r in tpu if r["runner"] == "xla native")
    cpu = {(r["model"], r["runner"]): r for r in data["rows"] if r["device"] == "cpu"}
    for model in ("seed", "mlp"):
        for runner in ("jax.jit", "xla"):
            row = cpu[(model, runner)]
            assert row["status"] == "ok" and row["p50_ms"] > 0 and max(row["err"].values()) == 0.0, row
        assert cpu[(model, "xla native")]["status"] in ("ok", "not-available")
    summary = (out / "summary.md").read_text()
    assert "JAX sees no TPU" in summary and "| seed | xla | cpu | ok |" in summary
    assert not list(tmp_path.glob("multiexport-tpu-check.*"))  # the work directory is gone
