"""The regression gate's A/B in one run: the baseline's artifacts timed in the same rounds as the new ones.

Real compares, real workers, a real slowdown (the planted spin every timed call of the new artifacts
gets from $MULTIEXPORT_PLANTED_SLOWDOWN; the baseline's workers never get it)."""

from __future__ import annotations

import hashlib
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from multiexport.comparison.baseline import BASELINE_ROUNDS
from multiexport.comparison.memory_plan import AVAILABLE_ENV as MEMORY_ENV
from multiexport.measure.pairing import PLANTED_ENV

from ..conftest import run_cli

pytestmark = pytest.mark.subprocess

FAST = ("--backends", "xla", "--bench-time", "0.2", "--trials", "1")


def tree(directory: Path) -> dict[str, str]:
    """Every entry under `directory` with its bytes' sha256 (a directory as 'dir'): what 'unchanged' means."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(directory.rglob("*"))}


def said(proc) -> str:
    """stderr as one line (the terminal console wraps long lines)."""
    return " ".join(proc.stderr.split())


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ab") / "base"
    run_cli("compare", *FAST, "--out-dir", out, check=True)
    return out


def test_a_planted_slowdown_is_caught_on_the_paired_ratio_and_the_baseline_is_untouched(baseline, tmp_path):
    before = tree(baseline)
    proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "new", "--baseline", baseline / "results.json",
                   "--junit", tmp_path / "j.xml", env={PLANTED_ENV: "3"})
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "timed in the same rounds as the new ones (paired A/B)" in said(proc)  # found beside it, and said
    [line] = [x for x in proc.stdout.splitlines() if "REGRESSION" in x]
    assert "latency@" in line and "[paired A/B]" in line and "&gt;" not in proc.stdout
    assert "on each round's p10;" in line  # the per-round statistic, said
    pairing = json.loads((tmp_path / "new" / "results.json").read_text())["pairing"]
    assert pairing["baseline"] == str(baseline) and not pairing["baseline_failures"]
    assert pairing["rounds"] == BASELINE_ROUNDS  # more, shorter slices than a plain compare's 5
    [ratio] = pairing["baseline_ratios"]
    assert (ratio["faster"], ratio["slower"]) == ("baseline:xla", "xla") and ratio["ci95_low"] > 1.5
    assert 0 < ratio["base_ms"] < ratio["ratio"] * ratio["base_ms"] and ratio["level"] in (0.95, 0.99)
    # past the threshold: a fresh pair of workers measured it again, and the slowdown was in both
    [again] = pairing["confirmations"]
    assert (again["faster"], again["slower"]) == ("baseline:xla", "xla") and again["ci95_low"] > 1.5
    assert "a fresh process pair over" in line and "not confirmed" not in line
    # the new-vs-baseline pair is kept apart from the compare's own ratios (the report's)
    assert all("baseline:" not in r["faster"] + r["slower"] for r in pairing["ratios"])
    case = next(c for c in ET.parse(tmp_path / "j.xml").getroot() if c.attrib["name"].startswith("latency@"))
    assert case.find("properties/property").attrib == {"name": "comparison", "value": "paired A/B"}
    assert case.find("failure").attrib["message"].startswith("[paired A/B]")
    assert {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}["process_pairs"] == "2"
    assert tree(baseline) == before  # read-only input: nothing written into it, nothing changed


def test_one_slow_worker_process_is_not_read_as_a_regression(baseline, tmp_path):
    """The false alarm seen under load: one worker process of an unchanged artifact slow for the whole run
    (planted here in the first new worker only, 3x: every round of its pair says so). The fresh pair started to
    confirm it does not share the offset, and the verdict is no regression, said as such."""
    proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "new", "--baseline-artifacts", baseline,
                   env={PLANTED_ENV: "3:first"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    [line] = [x for x in proc.stdout.splitlines() if "latency@" in x]
    assert "[paired A/B]" in line and "not confirmed (its interval reaches the threshold" in line
    pairing = json.loads((tmp_path / "new" / "results.json").read_text())["pairing"]
    [first], [again] = pairing["baseline_ratios"], pairing["confirmations"]
    assert first["slower"] == "xla" and first["ci95_low"] > 1.5 and again["ratio"] < 1.5


def test_baseline_artifacts_alone_gate_latency_and_gone_artifacts_are_judged_cross_run(baseline, tmp_path):
    artifacts_only = tmp_path / "artifacts"
    shutil.copytree(baseline / "xla", artifacts_only / "xla")
    proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "new", "--baseline-artifacts", artifacts_only,
                   env={PLANTED_ENV: "3"})
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "no results.json there: latency is all it judges" in said(proc)
    checks = [x for x in proc.stdout.splitlines() if "[paired A/B]" in x or "[cross-run]" in x]
    assert len(checks) == 1 and "REGRESSION" in checks[0] and "[paired A/B]" in checks[0]
    lone = tmp_path / "lone" / "results.json"  # a results.json whose artifacts are gone
    lone.parent.mkdir()
    shutil.copy(baseline / "results.json", lone)
    proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "again", "--baseline", lone)
    assert "latency is judged cross-run" in said(proc)
    [line] = [x for x in proc.stdout.splitlines() if "latency@" in x]
    assert "[cross-run]" in line and "threshold" in line and "not paired: no baseline artifacts" in line


def test_runners_that_do_not_fit_together_are_timed_as_pairs_alone_never_cross_run(baseline, tmp_path):
    """The whole gate's one A/A false alarm under load: too little memory for every runner at once sent the
    compare to sequential mode, and its latency was judged across runs. Now each backend's new and baseline
    artifacts are timed as a pair by themselves. 3 GiB planned: 60% of it holds the pair (two workers) but
    not the three runners (xla, its baseline, jax.jit), nor the four of a confirming pair (then the first pair
    goes before the fresh one starts)."""
    proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "new", "--baseline-artifacts", baseline,
                   env={PLANTED_ENV: "3", MEMORY_ENV: str(3 << 30)})
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    pairing = json.loads((tmp_path / "new" / "results.json").read_text())["pairing"]
    assert pairing["mode"] == "sequential" and "timed as a pair by themselves" in pairing["reason"], pairing
    [ratio], [again] = pairing["baseline_ratios"], pairing["confirmations"]
    assert ratio["slower"] == "xla" and ratio["ci95_low"] > 1.5 and again["ci95_low"] > 1.5
    assert not pairing["baseline_failures"] and pairing["rounds"] == BASELINE_ROUNDS
    [line] = [x for x in proc.stdout.splitlines() if "latency@" in x]
    assert "REGRESSION" in line and "[paired A/B]" in line and "a fresh process pair over" in line
    # too little memory even for the pair: cross-run, and the line says why it was not paired
    proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "small", "--baseline-artifacts", baseline,
                   env={MEMORY_ENV: str(1 << 30)})
    [line] = [x for x in proc.stdout.splitlines() if "latency@" in x]
    assert "[cross-run]" in line and "not timed beside its baseline even as a pair alone" in line, proc.stdout


def test_a_baseline_directory_that_is_not_one_is_one_line_and_exit_2(baseline, tmp_path):
    forged = tmp_path / "forged"
    shutil.copytree(baseline / "xla", forged / "xla")
    manifest = json.loads((forged / "xla" / "manifest.json").read_text())
    manifest["files"]["module"] = "../../outside.bin"  # a path out of the artifact
    (forged / "xla" / "manifest.json").write_text(json.dumps(manifest))
    before = tree(forged)
    cases = {"forged": ("--baseline-artifacts", forged), "missing": ("--baseline-artifacts", tmp_path / "nope"),
             "overlap": ("--baseline-artifacts", tmp_path)}
    errors = {}
    for what, option in cases.items():
        proc = run_cli("compare", *FAST, "--out-dir", tmp_path / "new", *option)
        assert proc.returncode == 2, (what, proc.stderr[-2000:])
        assert proc.stderr.count("multiexport: error:") == 1 and "Traceback" not in proc.stderr, (what, proc.stderr)
        errors[what] = said(proc)
    assert str(forged / "xla") in errors["forged"] and "outside.bin" in errors["forged"], errors
    assert "is missing" in errors["missing"] and "overlaps --out" in errors["overlap"], errors
    assert tree(forged) == before
    assert not (tmp_path / "new" / "results.json").exists()


def zoo_gate(out: Path, env: dict | None = None):
    """The paired zoo gate on one small model and backend, its baseline exported by HEAD's committed code."""
    import os
    import subprocess
    import sys

    from ..conftest import REPO

    cmd = [sys.executable, "-m", "benchmarks.zoo", "--baseline-ref", "HEAD", "--build-baseline", "always", "--quick", "--models", "mlp",
           "--backends", "xla", "--out", str(out), "--paired-slowdown", "1.3", "--junit", str(out / "junit.xml")]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})


def test_the_zoo_gate_times_a_commits_own_artifacts_beside_the_new_ones(tmp_path):
    import subprocess

    from benchmarks.zoo import resolve_ref

    from ..conftest import REPO

    if resolve_ref(REPO, "HEAD")[0] is None:
        pytest.skip("a clone without history: the zoo gate falls back to cross-run (its own test below)")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    proc = zoo_gate(tmp_path / "same")  # this tree against HEAD's code: the same artifacts, nothing flagged
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    combined = json.loads((tmp_path / "same" / "zoo-results.json").read_text())
    assert combined["baseline_ref"]["commit"] == head and not combined["baseline_ref"]["failed"]
    assert combined["models"]["mlp"]["pairing"]["baseline_ratios"]  # timed in the same rounds, not cross-run
    gates = [x for x in proc.stdout.splitlines() if "latency (paired A/B" in x]
    assert len(gates) == 1 and gates[0].split()[0] == "ok" and "rounds each" in gates[0], proc.stdout[-3000:]
    assert not (tmp_path / "same" / "baseline-ref" / "src").exists()  # the commit's tree goes once it exported
    proc = zoo_gate(tmp_path / "slowed", env={PLANTED_ENV: "2"})  # every timed call of the new artifacts 2x
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    gates = [x for x in proc.stdout.splitlines() if "REGRESSION" in x]
    assert len(gates) == 1 and "latency (paired A/B" in gates[0] and "[paired A/B]" in gates[0], proc.stdout[-3000:]
    case = next(c for c in ET.parse(tmp_path / "slowed" / "junit.xml").getroot() if c.find("failure") is not None)
    assert case.find("properties/property").attrib == {"name": "comparison", "value": "paired A/B"}


def test_a_clone_without_history_names_why_the_zoo_gate_is_cross_run(tmp_path):
    import subprocess

    from benchmarks.zoo import export_inputs_changed, resolve_ref

    from ..conftest import REPO

    shallow = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{REPO}", str(shallow)], check=True,
                   capture_output=True)
    assert resolve_ref(shallow, "auto") == (None, "a shallow clone (no history)")
    head = subprocess.run(["git", "-C", str(shallow), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert not export_inputs_changed(shallow, head)  # a fresh clone of that commit: its artifacts would be these
    (shallow / "multiexport" / "exporting" / "pipeline.py").write_text("# changed\n")
    assert export_inputs_changed(shallow, head)
    commit, why = resolve_ref(REPO, "no-such-ref")
    assert commit is None and "no-such-ref" in why
