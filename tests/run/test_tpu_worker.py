"""The TPU worker's logic rehearsed on the CPU (job platform "cpu": the same code, the same rows, on the device
this machine has), and the TPU stage's verdict on a TPU row: pass at 1e-5, or within what the TPU's own bf16
passes move the leaf, said in the reason; above both, parity-failed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from multiexport import api
from multiexport.comparison.tpu_stage import TPU_PARITY, judge_tpu_row
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature, load_target

from ..conftest import REPO

SPEC = "benchmarks.tpu_models:mlp"


def test_the_worker_times_every_runner_and_saves_the_outputs_the_stage_judges(tmp_path):
    target = load_target(SPEC)
    api.export(target, tmp_path / "xla", "xla")
    feed = {k: np.asarray(v) for k, v in build_signature(target).example_feed().items()}
    save_npz(tmp_path / "feed.npz", feed)
    job = {"targets": {"mlp": SPEC}, "feeds": {"mlp": str(tmp_path / "feed.npz")},
           "artifacts": {"mlp": str(tmp_path / "xla")}, "out": str(tmp_path), "bench_time": 0.05,
           "matmul_precision": "highest", "platform": "cpu"}
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "multiexport.run.tpu_worker", str(tmp_path / "job.json")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "tpu.json").read_text())
    rows = {row["runner"]: row for row in result["rows"]}
    assert set(rows) == {"jax.jit", "jax.jit highest", "xla"}
    assert all(row["status"] == "ok" and row["p50_ms"] > 0 and row["calls"] >= 10 for row in rows.values())
    assert rows["xla"]["err"] == {"out.logits": 0.0} and rows["xla"]["h2d_ms"] > 0 and rows["xla"]["d2h_ms"] > 0
    overhead = result["overhead"][0]
    assert overhead["ratio"] == overhead["runner_p50_ms"] / overhead["bare_p50_ms"]
    saved = load_npz(tmp_path / "mlp.tpu.npz", "TPU outputs")
    # the reference ran at "highest", so the chip's own default is saved too: the stage's bound for bf16 passes
    assert set(saved) == {"jax.jit/out.logits", "jax.jit highest/out.logits", "xla/out.logits",
                          "jax.jit default/out.logits"}


def test_a_tpu_row_passes_within_the_tpus_own_arithmetic_and_fails_above_it():
    def row(err: float) -> dict:
        return {"runner": "xla", "status": "ok", "reason": "", "err": {"out": err}}

    assert judge_tpu_row(row(0.0), {"out": 0.0})["status"] == "ok"
    assert judge_tpu_row(row(TPU_PARITY / 2), {})["status"] == "ok"
    within = judge_tpu_row(row(1.3e-3), {"out": 2.0e-3})
    assert within["status"] == "ok" and "within the TPU's own arithmetic" in within["reason"]
    above = judge_tpu_row(row(5e-3), {"out": 2.0e-3})
    assert above["status"] == "parity-failed" and "Output 'out' | error / max|ref| 0.005, expected <= 0.002" in above[
        "reason"]
    assert judge_tpu_row({"runner": "xla", "status": "no-tpu", "reason": "none"}, {})["status"] == "no-tpu"
