"""`compare`: parity per backend in worker processes, failures isolated as categorised rows."""

from __future__ import annotations

import json

import pytest

from multiexport import UsageError, examples
from multiexport.comparison import compare
from multiexport.results import Status

from ..conftest import run_cli


def test_a_numerically_wrong_backend_fails_parity_with_exit_code_1(tmp_path, fault_backends):
    results = compare(examples.mlp(), backends=["xla", "xla_perturbed"], out_dir=tmp_path, trials=1, bench=None)
    assert results.backends["xla"].status is Status.OK
    bad = results.backends["xla_perturbed"]
    assert bad.status is Status.PARITY_FAILED and "Output 'out.logits'" in bad.reason
    assert results.exit_code == 1


def test_crash_hang_raise_kill_and_export_failure_become_rows_and_others_finish(tmp_path, fault_backends):
    results = compare(
        examples.seed(), backends=["xla_crash", "xla_hang", "xla_raise", "xla_oom", "xla_killed", "xla_export_fails",
                                   "xla"],
        out_dir=tmp_path, trials=1, timeout=20, bench=None,
    )
    rows = {name: (r.status.value, r.reason) for name, r in results.backends.items()}
    assert rows["xla"][0] == "ok"
    assert rows["xla_crash"][0] == "crashed" and "SIGABRT" in rows["xla_crash"][1]
    assert rows["xla_hang"][0] == "timeout" and "20 s" in rows["xla_hang"][1]
    assert rows["xla_raise"] == ("run-failed", "RuntimeError: runtime refused the inputs")
    assert rows["xla_oom"][0] == "out-of-memory" and "MemoryError" in rows["xla_oom"][1]
    # SIGKILL without evidence of memory pressure is `killed`, never a guessed out-of-memory
    assert rows["xla_killed"][0] == "killed" and "SIGKILL" in rows["xla_killed"][1], rows["xla_killed"]
    assert rows["xla_export_fails"][0] == "export-failed" and "reduce_precision" in rows["xla_export_fails"][1]
    assert results.exit_code == 3
    for name in ("xla_crash", "xla_hang", "xla_raise", "xla_killed"):
        assert results.backends[name].bench is None  # no latency for a row that failed
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["backends"]) == set(rows) and data["backends"]["xla"]["parity"]["passed"]


def test_the_costliest_exports_start_first_and_the_pool_hands_out_the_rest_costliest_first():
    """Groups are ordered by their summed export_cost, so with two slots the SavedModel chain and IREE's compile
    get the two workers and the ONNX chain and XLA are pooled: IREE taken last from the pool ran alone at the end."""
    from multiexport.comparison.exports import WorkerPlan, export_groups, plan_workers
    from multiexport.exporting.registry import backend_class

    todo = ["xla", "savedmodel", "onnx", "iree", "litert", "openvino"]
    groups = export_groups(todo)
    assert groups == [["savedmodel", "litert"], ["iree"], ["onnx", "openvino"], ["xla"]]
    costs = [sum(backend_class(n).export_cost for n in g) for g in groups]
    assert costs == sorted(costs, reverse=True)
    assert plan_workers(groups, 2) == [WorkerPlan(("savedmodel", "litert"), ("onnx", "openvino", "xla")),
                                       WorkerPlan(("iree",), ("onnx", "openvino", "xla"))]
    assert export_groups(["xla", "onnx"]) == [["onnx"], ["xla"]]  # not the compare's order: the costlier first


def test_groups_beyond_the_slots_become_a_pool_every_worker_takes_from():
    from multiexport.comparison.exports import WorkerPlan, plan_workers

    groups = [["savedmodel", "litert"], ["onnx", "openvino"], ["xla"], ["iree"]]
    pool = ("xla", "iree")
    assert plan_workers(groups, 2) == [WorkerPlan(("savedmodel", "litert"), pool), WorkerPlan(("onnx", "openvino"), pool)]
    assert plan_workers(groups, 4) == [WorkerPlan(tuple(g)) for g in groups]  # a slot each: no pool
    assert plan_workers(groups, 1) == [WorkerPlan(("savedmodel", "litert"), ("onnx", "openvino", "xla", "iree"))]
    assert plan_workers(groups, 0) == plan_workers(groups, 1)


def test_a_backend_starts_from_its_stage_only_when_its_worker_exported_the_stage_before_it():
    from multiexport.comparison.exports import _stage_in

    merged = ["onnx", "openvino", "xla", "savedmodel", "litert"]
    assert _stage_in(merged, "openvino") == "onnx" and _stage_in(merged, "litert") == "savedmodel"
    assert _stage_in(merged, "xla") is None and _stage_in(merged, "onnx") is None
    assert _stage_in(["litert", "savedmodel"], "litert") is None  # its stage comes after it: from the target


@pytest.mark.subprocess
def test_two_stage_chains_in_one_worker_each_start_from_their_own_stage(tmp_path):
    """One slot, two chains: one worker exports savedmodel, litert, onnx, openvino in turn; openvino (third
    after its stage's chain began) starts from the ONNX file this worker just wrote, not from the SavedModel."""
    from multiexport.exporting import Manifest

    seen: list[str] = []
    results = compare(examples.seed(), backends=["savedmodel", "litert", "onnx", "openvino"], out_dir=tmp_path,
                      trials=1, bench=None, export_jobs=1, target_spec="multiexport.examples:seed",
                      progress=seen.append)
    assert all(r.status is Status.OK for r in results.backends.values()), {n: r.reason for n, r in results.backends.items()}
    assert any("1 at a time in 1 worker(s)" in line for line in seen), seen
    assert "openvino: export in a worker process (the first worker free)" in seen
    for name, stage in (("litert", "savedmodel"), ("openvino", "onnx")):
        how = Manifest.read(tmp_path / name).format["stage"]
        assert how["made"].startswith("reused") and how["reused_from"] == stage, (name, how)


@pytest.mark.parametrize("backends", [("xla_export_crashes", "xla", "iree"), ("xla", "xla_export_crashes", "iree")])
def test_a_pooled_export_is_taken_by_one_worker_and_a_death_in_the_pool_fails_alone(tmp_path, fault_backends, backends):
    """Two slots, three exports: the cheapest is pooled (iree, the costliest, has a worker; the two xla exports
    cost the same, so the compare's order decides). Whether the export that aborts its worker is one's own or
    the pooled one, it alone is `crashed`; the others are exported once each and pass."""
    from multiexport.comparison.exports import export_groups

    pooled = export_groups(list(backends))[-1][0]
    assert pooled == backends[1]  # the crashing export is own in the first case, pooled in the second
    seen: list[str] = []
    results = compare(examples.seed(), backends=list(backends), out_dir=tmp_path, trials=1, bench=None, export_jobs=2,
                      target_spec="multiexport.examples:seed", progress=seen.append)
    assert f"{pooled}: export in a worker process (the first worker free)" in seen
    assert any(f"then each takes the next of {pooled}" in line for line in seen), seen
    crashed = results.backends["xla_export_crashes"]
    assert crashed.status is Status.CRASHED and "SIGABRT" in crashed.reason
    for name in ("xla", "iree"):
        assert results.backends[name].status is Status.OK and results.backends[name].parity.passed, name
    # iree is planned once (own, or pooled) and never exported again alone: no worker died holding it
    planned = [line for line in seen if line.startswith("iree: export in a worker process")]
    assert len(planned) == 1, planned
    # the export that died after another in its worker is judged alone, in a fresh worker
    assert seen.count("xla_export_crashes: export in a worker process") == 1
    # the overlapping exports are one step of the timeline (each export's seconds are its row's), not a step
    # per export that would hold the whole phase's seconds
    steps = [step.what for step in results.timeline]
    assert sum(what.startswith("export with") for what in steps) == 1
    assert not any(what.startswith(("xla: export", "iree: export")) for what in steps), steps


@pytest.mark.parametrize("order", [("xla_export_crashes", "xla"), ("xla", "xla_export_crashes")])
def test_an_export_that_kills_a_shared_worker_fails_alone(tmp_path, fault_backends, order):
    """Two exports in one worker (one slot): the one that aborts the process is `crashed`, the other is
    exported (again, alone, when it came after the crash) and passes; neither starts from the other's artifact."""
    seen: list[str] = []
    results = compare(examples.seed(), backends=list(order), out_dir=tmp_path, trials=1, bench=None, export_jobs=1,
                      target_spec="multiexport.examples:seed", progress=seen.append)
    assert results.backends["xla"].status is Status.OK and results.backends["xla"].parity.passed
    crashed = results.backends["xla_export_crashes"]
    assert crashed.status is Status.CRASHED and "SIGABRT" in crashed.reason
    assert f"{order[1]}: export in a worker process (the first worker free)" in seen
    assert "stage" not in json.loads((tmp_path / "xla" / "manifest.json").read_text())["format"]


def test_an_unknown_backend_name_is_a_usage_error_before_any_work(tmp_path):
    with pytest.raises(UsageError, match=r"Backend 'nope' \| unknown, expected one of: xla"):
        compare(examples.seed(), backends=["xla", "nope"], out_dir=tmp_path)
    assert not (tmp_path / "results.json").exists()


def test_cli_compare_on_the_seed_example(tmp_path):
    proc = run_cli("compare", "--backends", "xla", "--out-dir", tmp_path, "--trials", "1", "--bench-time", "0.05")
    assert proc.returncode == 0, proc.stderr
    assert "xla" in proc.stdout and "foo.bar" in proc.stdout  # the dropped leaf is shown
    assert "xla: export" in proc.stderr  # progress
    steps = [line for line in proc.stderr.splitlines() if "target 'seed' built" in line or "signature of" in line]
    assert "target 'seed' built" in steps[0] and "signature of" in steps[1]  # the clock runs from before the build
    assert "p50 ms" in proc.stdout and "reference" in proc.stdout  # latency beside the jax.jit baseline
    assert json.loads((tmp_path / "results.json").read_text())["backends"]["xla"]["status"] == "ok"


def test_an_exports_own_child_process_is_in_its_row_at_its_own_peak(tmp_path):
    """LiteRT's export prepares the model in a child process (its XNNPACK partitions): that child's peak resident
    memory is the export's too, in results.json and the report; XLA's export starts no process and has none."""
    pytest.importorskip("ai_edge_litert")
    proc = run_cli("compare", "--backends", "xla,litert", "--out-dir", tmp_path, "--trials", "1", "--no-bench")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())["backends"]
    child = rows["litert"]["export_child_peak_rss_bytes"]
    # its own ~36 MiB: a figure that counted the pages the fork copied would be near the worker's ~750 MiB
    assert child is not None and 16 << 20 < child < rows["litert"]["export_peak_rss_bytes"] // 4, rows["litert"]
    assert rows["xla"]["export_child_peak_rss_bytes"] is None
    assert "(its child " in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--tol", "out.nope=rtol:1"], "Tolerance 'out.nope' | matched no leaf"),
    (["--tol", "out=rtol:inf"], "expected a finite number >= 0"),
    (["--tol", "out=atol:nan"], "expected a finite number >= 0"),
    (["--val-range", "foo.baz=3:1"], "LOW < HIGH"),
    (["--trials", "0"], "Option 'trials' | got 0, expected an integer >= 1"),
    (["--seed", "-1"], "Option 'seed' | got -1, expected an integer >= 0"),
    (["--timeout", "nan"], "Option 'timeout' | got nan"),
    (["--timeout", "0"], "Option 'timeout' | got 0.0"),
    (["--timeout", "-5"], "Option 'timeout' | got -5.0"),
    (["--max-slowdown", "0"], "Option 'max_slowdown' | got 0.0, expected a finite number >= 1"),
    (["--backends", ""], "Option 'backends' | got '', expected at least one of"),
    (["--backends", "xla,nope"], "Backend 'nope' | unknown"),
    (["--threads", "0"], "Option 'threads' | got 0"),
    (["--dim-sizes", "b=2"], "Dimension 'b' | not symbolic"),
    (["--batch-sizes", "1,x"], "expected sizes >= 1"),
    (["--batch-sizes", "1,8"], "expected exactly one"),
    (["--min-iters", "0"], "Option 'min_iters' | got 0"),
    (["--bench-time", "-1"], "Option 'bench_time' | got -1.0"),
    (["--allow-fail", "onnx"], "Option '--allow-fail' | names 'onnx'"),
    (["--backend-option", "xla.bogus=1"], "Option 'xla.bogus' | unknown"),
])
def test_cli_compare_usage_errors_exit_2(args, message, tmp_path):
    proc = run_cli("compare", "--backends", "xla", "--out-dir", tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "results.json").exists()  # refused before any work


def test_cli_compare_with_named_inputs_from_npz(tmp_path):
    import numpy as np

    from multiexport.files.npz import save_npz

    save_npz(tmp_path / "in.npz", {"foo.bar": np.zeros(10, np.int32), "foo.baz": np.full(10, 2, np.int32)})
    proc = run_cli("compare", "--backends", "xla", "--out-dir", tmp_path / "o", "--inputs", tmp_path / "in.npz", "--no-bench")
    assert proc.returncode == 0, proc.stderr
    assert [t["name"] for t in json.loads((tmp_path / "o" / "results.json").read_text())["trials"]] == ["inputs"]


def test_a_compare_with_nothing_to_export_gives_each_row_its_reason(tmp_path):
    """Every row refused before any worker starts (XLA has no fp16 artifact): the rows say why, no crash."""
    results = compare(examples.mlp(), backends=["xla@fp16"], out_dir=tmp_path, trials=1, bench=None,
                      target_spec="multiexport.examples:mlp")
    row = results.backends["xla@fp16"]
    assert row.status is Status.UNSUPPORTED_PRECISION and "no fp16 artifact" in row.reason


def test_when_memory_limits_the_exports_each_group_gets_a_fresh_worker_queued(tmp_path, monkeypatch):
    """Memory for one export at a time (the figure forced to 1): no pool, whose worker would hold every
    framework it exported with at once; each group waits for the slot in a worker of its own."""
    monkeypatch.setenv("MULTIEXPORT_MEMORY_AVAILABLE", str(3 << 29))  # 1.5 GiB: one export (~1 GiB) at a time
    monkeypatch.setenv("MULTIEXPORT_MEMORY_FOOTPRINT", "xla=3x+1,iree=3x+1")  # not their measured, smaller ones
    seen: list[str] = []
    results = compare(examples.seed(), backends=["xla", "iree"], out_dir=tmp_path, trials=1, bench=None, threads=2,
                      target_spec="multiexport.examples:seed", progress=seen.append)
    assert all(r.status is Status.OK for r in results.backends.values())
    assert any(line.startswith("export with xla, iree (1 at a time in 2 worker(s))") for line in seen), seen
