"""Hostile input round 2 (issue 28): no runtime telemetry by default, no framework temporaries left behind.

Real exports and runs in fresh processes, with HOME and TMPDIR pointed at the test's own directories: ONNX
Runtime must write no ~/.cache/Microsoft telemetry database and no $TMPDIR/.ses (unless
MULTIEXPORT_RUNTIME_TELEMETRY=1), TensorFlow no `__autograph_generated_file*.py` per SavedModel or LiteRT export.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from multiexport.exporting.registry import backend_class


def _available(name: str) -> bool:
    return backend_class(name)().available().ok


def _left(home, tmp) -> list[str]:
    found = [str(p.relative_to(home.parent)) for p in home.rglob("*") if "Microsoft" in p.parts]
    return found + [p.name for p in tmp.iterdir() if p.name == ".ses" or p.name.startswith("__autograph_generated_file")]


@pytest.fixture
def home(sandbox):
    path = sandbox.root.parent / "home"
    path.mkdir()
    return path


@pytest.mark.skipif(not _available("onnx"), reason="onnx backend not installed")
def test_onnx_export_and_run_write_no_telemetry(sandbox, home):
    import os
    import subprocess
    import sys

    art = sandbox.root / "onnx"
    # ONNX Runtime writes under $XDG_CACHE_HOME when it is set (a CI runner may set it), else under ~/.cache
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    proc = sandbox.cli("export", "multiexport.examples:seed", "--backend", "onnx", "--out-dir", art, env=env)
    assert proc.returncode == 0, proc.stderr

    # The control first, in a home and TMPDIR of its own: the documented switch gives the runtime its own
    # settings back, and so its files. Where this machine's ONNX Runtime writes nothing even then (seen on a
    # CI runner), the check below could not fail, so it is skipped rather than passed. This test process
    # imported multiexport, which set ORT_DISABLE_TELEMETRY for its children: a user's shell has no such value.
    control_home, control_tmp = home.parent / "control-home", home.parent / "control-tmp"
    control_home.mkdir()
    control_tmp.mkdir()
    clean = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    proc = subprocess.run([sys.executable, "-m", "multiexport", "run", str(art)], capture_output=True, text=True,
                          env={**clean, "HOME": str(control_home), "XDG_CACHE_HOME": str(control_home / ".cache"),
                               "TMPDIR": str(control_tmp), "MULTIEXPORT_RUNTIME_TELEMETRY": "1"},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    if not _left(control_home, control_tmp):
        pytest.skip("ONNX Runtime writes no telemetry files on this machine even when allowed: nothing to prevent")

    proc = sandbox.cli("run", art, env=env)
    assert proc.returncode == 0, proc.stderr
    # before: home/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db} and tmp/.ses
    assert _left(home, sandbox.tmp) == []


@pytest.mark.parametrize("backend", ["savedmodel", "litert"])  # both trace through TensorFlow's tf.function
def test_a_tensorflow_export_leaves_no_autograph_files(sandbox, home, backend):
    if not _available(backend):
        pytest.skip(f"{backend} backend not installed")
    proc = sandbox.cli("export", "multiexport.examples:seed", "--backend", backend, "--out-dir",
                       sandbox.root / backend, env={"HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    assert _left(home, sandbox.tmp) == []  # before: one __autograph_generated_file*.py per export


@pytest.mark.subprocess
@pytest.mark.parametrize("backend, timed", [("xla_autograph_export_crashes", False),  # the export worker
                                            ("xla_autograph_run_crashes", False),  # the parity worker
                                            ("xla_autograph_run_crashes", True)])  # the paired serving worker
def test_a_tensorflow_worker_that_crashes_in_native_code_leaves_no_temporaries(tmp_path, monkeypatch, fault_backends,
                                                                                backend, timed):
    """A worker killed by SIGABRT after TensorFlow's autograph wrote its module: the module went into the worker's
    own $TMPDIR, which the compare removed; nothing is left in the user's."""
    import tempfile

    from multiexport import examples
    from multiexport.comparison import compare
    from multiexport.measure.bench import BenchConfig
    from multiexport.results import Status

    pytest.importorskip("tensorflow")
    tmp, evidence = tmp_path / "tmp", tmp_path / "written.txt"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("MULTIEXPORT_TEST_EVIDENCE", str(evidence))
    bench = BenchConfig(warmup_iters=1, warmup_time=0.0, min_iters=5, bench_time=0.1) if timed else None
    results = compare(examples.seed(), backends=[backend, "xla"], out_dir=tmp_path / "out", trials=1, bench=bench,
                      target_spec="multiexport.examples:seed")
    crashed = results.backends[backend]
    assert crashed.status is Status.CRASHED and "SIGABRT" in crashed.reason, (crashed.status, crashed.reason)
    assert results.backends["xla"].status is Status.OK
    written = evidence.read_text().split()
    assert written and all(w.startswith(str(tmp)) and "__autograph_generated_file" in w for w in written)
    assert [w for w in written if Path(w).exists()] == []
    assert sorted(p.name for p in tmp.iterdir()) == []  # before: __autograph_generated_file*.py


def test_the_telemetry_default_keeps_a_value_the_user_set():
    from multiexport.telemetry import SWITCH, quiet_runtimes

    env: dict[str, str] = {}
    quiet_runtimes(env)
    assert env == {"ORT_DISABLE_TELEMETRY": "1"}
    env = {"ORT_DISABLE_TELEMETRY": "0"}
    quiet_runtimes(env)
    assert env == {"ORT_DISABLE_TELEMETRY": "0"}
    env = {SWITCH: "1"}
    quiet_runtimes(env)
    assert env == {SWITCH: "1"}
