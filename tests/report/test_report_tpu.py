"""The TPU sections of report.md and report.html: a real `compare --device tpu` rehearsed on the CPU (the TPU worker
with job platform "cpu", MULTIEXPORT_TPU_REHEARSAL=cpu), and results.json's TPU rows re-rendered with a failed and a
bound-judged row as the chip gives them."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from multiexport.report.render import render_html, render_markdown
from multiexport.results import load_results

from ..conftest import REPO
from . import builders


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_a_rehearsed_tpu_compare_shows_the_tpu_rows_and_the_shipped_table(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "multiexport", "compare", "benchmarks.tpu_models:mlp", "--backends",
                           "xla,onnx", "--device", "tpu", "--trials", "1", "--bench-time", "0.05", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**os.environ, "MULTIEXPORT_TPU_REHEARSAL": "cpu"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = (out / "report.md").read_text()
    tpu = _section(report, "TPU rows")
    lines = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in tpu.splitlines() if line.startswith("| ")}
    assert {"jax.jit", "jax.jit highest", "xla"} <= set(lines)
    xla = lines["xla"]  # runner, device, status, error, bound, p50, interval, calls, h2d, d2h, reason
    assert xla[1:5] == ["tpu", "ok", "0", "1e-05"] and float(xla[5]) > 0 and xla[6].startswith("\\[")
    assert int(xla[7]) >= 10 and float(xla[8]) > 0 and float(xla[9]) > 0
    assert "Rehearsal: these TPU rows ran on the CPU" in tpu and "Harness: multiexport's XLA runner" in tpu
    shipped = _section(report, "Trained on TPU, shipped to CPU")
    rows = {line.split(" | ")[1]: line.split(" | ") for line in shipped.splitlines() if line.startswith("| out")}
    assert set(rows) == {"jax.jit (cpu)", "xla (cpu)", "onnx (cpu)"}
    results = json.loads((out / "results.json").read_text())
    onnx_err = max(leaf["stats"]["err_scale"] for leaf in results["backends"]["onnx"]["parity"]["leaves"]
                   if leaf["trial"] == results["trials"][0]["name"])
    shipped_json = {t["row"]: t for t in results["device"]["tpu_rows"]["shipped"]}
    # rehearsed on the CPU, the "TPU" is the CPU: its arithmetic is nothing, the converter is ONNX's own error
    assert shipped_json["onnx (cpu)"]["converter"] == onnx_err
    assert shipped_json["onnx (cpu)"]["vs_tpu_default"] == onnx_err and shipped_json["xla (cpu)"]["converter"] == 0
    page = (out / "report.html").read_text()
    assert "<h2>TPU rows</h2>" in page and "<h2>Trained on TPU, shipped to CPU</h2>" in page and "onnx (cpu)" in page


def _tpu_results(tmp_path, tpu_rows: dict):
    """A results.json with these TPU rows, read back as the report command reads one."""
    made = dataclasses.replace(builders.results(builders.row("xla")),
                               device={"requested": "tpu", "chosen": "cpu", "tpu": True, "tpu_rows": tpu_rows})
    path = tmp_path / "results.json"
    path.write_text(json.dumps(made.to_json()))
    return load_results(path)


def test_a_native_row_above_its_bound_and_a_machine_without_a_tpu_read_as_such(tmp_path):
    rows = {"machine": "a TPU (/dev/vfio/1)", "device": "TPU v5 lite (tpu, 1 chip(s) seen)", "reason": "",
            "rows": [{"runner": "jax.jit", "device": "tpu", "status": "ok", "reason": "", "err": {"out": 0.0},
                      "p50_ms": 0.549, "ci95_ms": [0.546, 0.551], "calls": 1870},
                     {"runner": "xla native", "device": "tpu", "status": "parity-failed", "bit_exact": False,
                      "reason": "Output 'out' | error / max|ref| 0.005, expected <= 0.002", "err": {"out": 5e-3},
                      "p50_ms": 0.48}],
            "overhead": [{"runner_p50_ms": 0.554, "bare_p50_ms": 0.543, "ratio": 1.019}],
            "arithmetic": {"out": {"vs_tpu_default": 2.0e-3, "vs_tpu_highest": 4.7e-6}},
            "bf16_bound": {"out": 2.0e-3}, "tpu_parity": 1e-5,
            "shipped": [{"row": "onnx (cpu)", "leaf": "out", "vs_tpu_default": 2.1e-3, "vs_tpu_highest": 2e-4,
                         "tpu_default_vs_highest": 2.0e-3, "tpu_arithmetic": 2.0e-3, "converter": 1.9e-4,
                         "explained": 2.0e-3 / 2.1e-3, "vs_float64": 2.1e-4}]}
    results = _tpu_results(tmp_path, rows)
    report = render_markdown(results)
    tpu = _section(report, "TPU rows")
    assert ("| xla native | tpu | parity-failed | 0.005 | 0.002 | 0.48 | - | - | - | - | Output 'out' \\| error / "
            "max\\|ref\\| 0.005, expected") in tpu
    assert "| jax.jit | tpu | ok | 0 | - | 0.549 | \\[0.546, 0.551\\] | 1870 | - | - | the TPU reference |" in tpu
    assert "ratio 1.019" in tpu and "0.002 at the default matmul precision, 4.7e-06 at highest" in tpu
    shipped = _section(report, "Trained on TPU, shipped to CPU")
    assert "| vs float64 |" in shipped
    assert "| out | onnx (cpu) | 2.1e-03 | 2.0e-04 | 2.0e-03 | 2.0e-03 | 1.9e-04 | 95% | 2.1e-04 |" in shipped
    assert '<td class="bad">parity-failed</td>' in render_html(results)

    none = _tpu_results(tmp_path, {"machine": "no TPU", "reason": "JAX sees no TPU: no backend 'tpu'",
                                   "rows": [{"runner": "xla", "device": "tpu", "status": "no-tpu",
                                             "reason": "JAX sees no TPU: no backend 'tpu'"}],
                                   "overhead": [], "arithmetic": {}})
    report = render_markdown(none)
    assert "| xla | tpu | no-tpu | - | - | - | - | - | - | - | JAX sees no TPU: no backend 'tpu' |" in report
    assert "- No TPU rows ran: JAX sees no TPU: no backend 'tpu'" in report
    assert "## Trained on TPU, shipped to CPU" not in report


def test_a_compare_without_tpu_rows_has_no_tpu_section(tmp_path):
    results = _tpu_results(tmp_path, {})
    assert "## TPU rows" not in render_markdown(results) and "TPU rows" not in render_html(results)


def test_a_rehearsed_native_tpu_row_has_its_interval_and_is_bit_exact(tmp_path):
    from multiexport.backends.xla import runtime as pjrt

    try:
        pjrt.find_pjrt_header()
        pjrt.find_pjrt_plugin(device="cpu")
    except Exception as exc:  # noqa: BLE001 - the rehearsal's native row runs pjrt_run on the CPU plugin
        pytest.skip(f"no PJRT CPU plugin or pjrt_c_api.h here: {exc}")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "multiexport", "compare", "benchmarks.tpu_models:mlp", "--backends",
                           "xla", "--device", "tpu", "--native", "--trials", "1", "--bench-time", "0.05", "--out-dir",
                           str(out)], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**os.environ, "MULTIEXPORT_TPU_REHEARSAL": "cpu"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    native = next(r for r in json.loads((out / "results.json").read_text())["device"]["tpu_rows"]["rows"]
                  if r["runner"] == "xla native")
    assert native["status"] == "ok" and native["bit_exact"] and native["calls"] == 100
    assert native["ci95_ms"][0] <= native["p50_ms"] <= native["ci95_ms"][1]
    tpu = _section((out / "report.md").read_text(), "TPU rows")
    line = next(line for line in tpu.splitlines() if line.startswith("| xla native |")).split(" | ")
    assert line[2:5] == ["ok", "0 (bit-exact)", "1e-05"] and line[6].startswith("\\[") and line[7] == "100"
