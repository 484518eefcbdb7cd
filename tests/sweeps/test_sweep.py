"""Sweeps run for real: compares in processes of their own, a real kill and a resume, a compare that dies,
the history and the gate across two sweeps, and the machine's timing lock."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.subprocess

MODEL = """
import os, time
import numpy as np
from multiexport import Target

def {name}():
    hold = os.path.join(os.path.dirname(__file__), "hold-{name}")
    while os.path.exists(hold):  # the kill test holds this target here until the sweep is killed
        time.sleep(0.1)
    return Target(lambda x: {body}, args=(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4),), name="{name}")
"""


def _models(tmp_path: Path, bodies: dict[str, str]) -> None:
    for name, body in bodies.items():
        (tmp_path / f"{name}.py").write_text(MODEL.format(name=name, body=body))


def _spec(tmp_path: Path, names, backends=("xla",), args=("--no-bench", "--trials", "1")) -> Path:
    text = f"[sweep]\nname = \"t\"\nbackends = {json.dumps(list(backends))}\nargs = {json.dumps(list(args))}\n\n"
    text += "".join(f"[[target]]\ntarget = \"{n}.py:{n}\"\nname = \"{n}\"\n\n" for n in names)
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def _journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]


def test_a_sweep_killed_midway_and_resumed_loses_no_finished_row_and_repeats_none(tmp_path):
    _models(tmp_path, {"first": "x * 2", "second": "x + 1", "third": "x - 3"})
    spec, out = _spec(tmp_path, ["first", "second", "third"]), tmp_path / "out"
    (tmp_path / "hold-second").write_text("")  # `second` waits in its factory while this exists
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "multiexport", "sweep", str(spec), "--out-dir", str(out), "--jobs",
                                 "1"], cwd=REPO, stdout=log, stderr=log)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        events = _journal(out) if (out / "progress.jsonl").exists() else []
        if any(e["event"] == "start" and e["name"] == "second" for e in events):
            break
        assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
        time.sleep(0.2)
    else:
        proc.kill()
        proc.wait()
        pytest.fail("the sweep never reached its second target")
    first = out / "rows" / "first" / "results.json"
    before = (first.stat().st_mtime_ns, first.read_bytes())
    proc.send_signal(signal.SIGKILL)  # no handler runs: what is left is what a crash leaves
    proc.wait(timeout=30)
    (tmp_path / "hold-second").unlink()
    assert not (out / "rows" / "third").exists()
    resumed = run_cli("sweep", spec, "--out-dir", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "3 task(s), 2 to run, 1 kept from before" in resumed.stderr
    starts = {}
    for e in _journal(out):
        if e["event"] == "start":
            starts[e["name"]] = starts.get(e["name"], 0) + 1
    assert starts == {"first": 1, "second": 2, "third": 1}  # `second` re-run: it had not finished
    assert (first.stat().st_mtime_ns, first.read_bytes()) == before  # kept, not recomputed
    summary = json.loads((out / "summary.json").read_text())
    assert {n: (r["state"], r["backends"]["xla"]["status"]) for n, r in summary.items()} == {
        "first": ("done", "ok"), "second": ("done", "ok"), "third": ("done", "ok")}
    again = run_cli("sweep", spec, "--out-dir", out)
    assert again.returncode == 2 and "is a sweep already" in again.stderr and "--resume" in again.stderr


def test_a_compare_that_dies_is_run_once_more_then_reported_and_the_others_finish(tmp_path):
    _models(tmp_path, {"fine": "x * 2"})
    (tmp_path / "crash.py").write_text("import os, signal\n\ndef crash():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    spec = tmp_path / "sweep.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\nargs = ["--no-bench", "--trials", "1"]\n\n'
                    '[[target]]\ntarget = "crash.py:crash"\nname = "crash"\n\n[[target]]\ntarget = "fine.py:fine"\nname = "fine"\n')
    out = tmp_path / "out"
    proc = run_cli("sweep", spec, "--out-dir", out)
    assert proc.returncode == 3, proc.stderr[-3000:]  # a row without results
    summary = json.loads((out / "summary.json").read_text())
    assert summary["crash"]["state"] == "died" and summary["crash"]["attempts"] == 2
    assert "killed by SIGKILL" in summary["crash"]["reason"]
    assert summary["fine"]["state"] == "done" and summary["fine"]["backends"]["xla"]["status"] == "ok"
    assert "- crash: **died** after 2 attempt(s): compare was killed by SIGKILL" in proc.stdout
    assert "killed by SIGKILL" in (out / "rows" / "crash.log").read_text()
    assert (out / "matrix.html").read_text().count("<tr>") == 4  # header, two rows, the ok count


def test_the_history_says_when_a_row_changed_status_and_the_sweep_gate_fails_on_it(tmp_path):
    """Two sweeps into one history: the second's ONNX row of `model` changed (its input became float8, which
    ONNX Runtime's Python binding cannot carry). `history --changes` names the sweep it changed in, `diff
    --sweep` fails on it with a JUnit file, and `sweep --baseline-sweep` gates the same way."""
    history = tmp_path / "history.sqlite"
    _models(tmp_path, {"model": "x * 2"})
    spec = _spec(tmp_path, ["model"], backends=("xla", "onnx"))
    first = run_cli("sweep", spec, "--out-dir", tmp_path / "a", "--history", history)
    assert first.returncode == 0, first.stderr[-3000:]
    (tmp_path / "model.py").write_text((tmp_path / "model.py").read_text().replace(
        "np.linspace(-2, 2, 12, dtype=np.float32)", "np.linspace(-2, 2, 12).astype(__import__('ml_dtypes').float8_e4m3fn)"))
    second = run_cli("sweep", spec, "--out-dir", tmp_path / "b", "--history", history, "--baseline-sweep", tmp_path / "a",
                     "--junit", tmp_path / "junit.xml")
    assert second.returncode == 1, second.stderr[-3000:]  # the sweep ran; the gate found the regression
    assert "model/onnx" in second.stdout and "REGRESSION" in second.stdout
    changes = run_cli("history", history, "--changes", "--model", "model", "--backend", "onnx", check=True).stdout
    lines = changes.strip().splitlines()
    assert lines[0].startswith("model/onnx: first recorded as ok in sweep 't'")
    assert lines[1].startswith("model/onnx: ok -> unsupported-dtype in sweep 't'") and "versions: the same" in lines[1]
    rows = json.loads(run_cli("history", history, "--model", "model", "--json", check=True).stdout)
    assert [(r["backend"], r["status"]) for r in rows] == [("onnx", "ok"), ("xla", "ok"), ("onnx", "unsupported-dtype"),
                                                           ("xla", "ok")]
    assert all(r["versions"].get("jax") and r["machine"]["cpu"] for r in rows)
    gate = run_cli("diff", "--sweep", tmp_path / "a", tmp_path / "b", "--junit", tmp_path / "gate.xml")
    assert gate.returncode == 1 and "model/onnx" in gate.stdout
    assert 'failures="1"' in (tmp_path / "gate.xml").read_text() or "<failure" in (tmp_path / "gate.xml").read_text()
    same = run_cli("diff", "--sweep", tmp_path / "a", tmp_path / "a")
    assert same.returncode == 0, same.stdout
    # A third sweep whose target no longer imports: every backend row of the model changed, to `failed`
    (tmp_path / "model.py").write_text("raise ImportError('gone')\n")
    third = run_cli("sweep", spec, "--out-dir", tmp_path / "c", "--history", history)
    assert third.returncode == 3, third.stderr[-3000:]
    xla = run_cli("history", history, "--changes", "--model", "model", "--backend", "xla", check=True).stdout
    assert xla.strip().splitlines()[-1].startswith("model/xla: ok -> failed in sweep 't'")
    assert "versions: unknown (a task that wrote no results)" in xla and "gone" in xla


def _compare_holding(tmp_path: Path, lock: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "multiexport", "compare", "--backends", "xla", "--trials", "1",
                             "--bench-time", "0.2", "--rounds", "2", "--out-dir", str(tmp_path / name)], cwd=REPO,
                            env={**os.environ, "MULTIEXPORT_TIMING_LOCK": str(lock)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(proc: subprocess.Popen, text: str) -> str:
    err = ""
    while text not in err:
        line = proc.stderr.readline()
        assert line, f"compare ended without printing {text!r}: {err}"
        err += line
    return err


@pytest.mark.parametrize("held, waits_at", [
    (fcntl.LOCK_SH, "another compare is running beside this one"),  # another compare exporting: we may not time
    (fcntl.LOCK_EX, "another compare is timing"),                    # another compare timing: we may not even start
])
def test_a_compare_times_only_when_no_other_compare_runs_on_the_machine(tmp_path, held, waits_at):
    """The lock a sweep gives its compares, held here as another compare would hold it: the compare waits
    (exporting nothing while another times; timing nothing while another exports) and finishes once released."""
    lock = tmp_path / "timing.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, held)
    proc = _compare_holding(tmp_path, lock, "c")
    try:
        err = _wait_for(proc, waits_at)
        assert proc.poll() is None and not (tmp_path / "c" / "results.json").exists()
        assert ("xla: export" in err) == (held == fcntl.LOCK_SH), err  # exported beside a shared holder only
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    _, rest = proc.communicate(timeout=300)
    assert proc.returncode == 0, rest
    results = json.loads((tmp_path / "c" / "results.json").read_text())
    assert results["backends"]["xla"]["bench"]["sizes"][0]["latency"]["n"] > 0


def test_shards_cover_the_spec_once_and_merge_into_one_sweep_the_gate_and_history_read(tmp_path):
    _models(tmp_path, {"one": "x * 2", "two": "x + 1", "three": "x - 3"})
    spec = _spec(tmp_path, ["one", "two", "three"])
    for i in (1, 2):
        proc = run_cli("sweep", spec, "--shard", f"{i}/2", "--out-dir", tmp_path / f"s{i}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    shards = [json.loads((tmp_path / f"s{i}" / "summary.json").read_text()) for i in (1, 2)]
    assert [sorted(s) for s in shards] == [["one", "three"], ["two"]]
    merged = run_cli("sweep", "--merge", tmp_path / "s1", tmp_path / "s2", "--out-dir", tmp_path / "all")
    assert merged.returncode == 0, merged.stderr[-3000:]
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert sorted(summary) == ["one", "three", "two"]
    assert all(r["state"] == "done" and r["backends"]["xla"]["status"] == "ok" for r in summary.values())
    assert run_cli("diff", "--sweep", tmp_path / "all", tmp_path / "all").returncode == 0
    lost = run_cli("diff", "--sweep", tmp_path / "all", tmp_path / "s1")  # `two` is missing from s1
    assert lost.returncode == 1 and "two" in lost.stdout
    added = run_cli("history", tmp_path / "h.sqlite", "--add", tmp_path / "all", "--model", "two", "--json", check=True)
    assert [(r["model"], r["backend"], r["status"]) for r in json.loads(added.stdout)] == [("two", "xla", "ok")]
    again = run_cli("sweep", "--merge", tmp_path / "s1", "--out-dir", tmp_path / "all")
    assert again.returncode == 2 and "is a sweep already" in again.stderr
