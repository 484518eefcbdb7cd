"""Device selection: the decision logic with fakes, the runtimes' real "no GPU" answers on this CPU machine."""

from __future__ import annotations

import json

import pytest

from multiexport import UsageError, examples
from multiexport.comparison import compare
from multiexport.exporting import Availability, ExportOptions
from multiexport.measure.bench import BenchConfig
from multiexport.run.devices import probe_gpu, resolve

from ..conftest import run_cli

YES, NO = Availability(True, "1 GPU(s): H200"), Availability(False, "sees no GPU")


def test_auto_picks_the_gpu_only_when_every_backend_sees_one():
    plan = resolve("auto", {"xla": YES, "onnx": YES})
    assert plan.chosen == "gpu" and not plan.excluded
    plan = resolve("auto", {"xla": YES, "onnx": NO})
    assert plan.chosen == "cpu" and plan.note == "using the CPU: no GPU for onnx"
    assert plan.found == {"xla": {"gpu": True, "reason": YES.reason}, "onnx": {"gpu": False, "reason": NO.reason}}


def test_gpu_reports_backends_that_cannot_use_it_instead_of_falling_back():
    plan = resolve("gpu", {"xla": YES, "onnx": NO})
    assert plan.chosen == "gpu" and plan.excluded == {"onnx": "sees no GPU"}


def test_cpu_and_bad_choices():
    assert resolve("cpu", {}).chosen == "cpu"
    with pytest.raises(UsageError, match="expected one of cpu, gpu, tpu, auto"):
        resolve("npu", {})


def test_gpu_artifacts_are_lowered_for_both_platforms():
    assert ExportOptions.for_device("gpu").platforms == ("cpu", "cuda")
    assert ExportOptions.for_device("cpu").platforms == ("cpu",)  # not None: a GPU machine's default is cuda


def test_runtimes_answer_no_gpu_here_with_their_reasons():
    found = probe_gpu(["xla", "savedmodel", "onnx", "iree", "nope"])
    assert not any(s.ok for s in found.values())
    assert "JAX" in found["xla"].reason and "multiexport[gpu]" in found["xla"].reason
    assert "TensorFlow" in found["savedmodel"].reason
    assert "CUDAExecutionProvider" in found["onnx"].reason
    assert "cuda" in found["iree"].reason.lower()
    assert "unknown" in found["nope"].reason or "failed" in found["nope"].reason


def test_compare_on_gpu_without_one_gives_no_gpu_rows(tmp_path):
    res = compare(examples.seed(), backends=["xla"], device="gpu", out_dir=tmp_path, trials=1, bench=None)
    assert res.backends["xla"].status.value == "no-gpu" and "JAX" in res.backends["xla"].reason
    assert res.exit_code == 3
    assert json.loads((tmp_path / "results.json").read_text())["device"]["chosen"] == "gpu"


def test_auto_without_a_gpu_runs_on_the_cpu_and_says_why(tmp_path):
    proc = run_cli("compare", "--backends", "xla", "--device", "auto", "--no-bench", "--out-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "device: requested auto, chose cpu; ran there: xla" in proc.stdout and "[gpu]" in proc.stdout  # escaped
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["device"]["found"]["xla"]["gpu"] is False


def test_include_transfers_times_the_host_to_host_path(tmp_path):
    config = BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=10, bench_time=0.0, include_transfers=True)
    res = compare(examples.mlp(), backends=["xla"], out_dir=tmp_path, trials=1, bench=config)
    bench = res.backends["xla"].bench
    assert bench.config["include_transfers"] is True and bench.sizes[0].latency.n == 10
