"""`compare`: parity per backend in worker processes, failures isolated as categorised rows."""

from __future__ import annotations

import json

import pytest

from multiexport import examples
from multiexport.comparison import compare

from .conftest import run_cli


def test_a_numerically_wrong_backend_fails_parity_with_exit_code_1(tmp_path, fault_backends):
    results = compare(examples.mlp(), backends=["xla", "xla_perturbed"], out_dir=tmp_path, trials=1, bench=None)
    assert results.backends["xla"].status == "ok"
    bad = results.backends["xla_perturbed"]
    assert bad.status == "parity-failed" and "Output 'out.logits'" in bad.reason
    assert results.exit_code == 1


def test_crash_hang_raise_and_export_failure_become_rows_and_others_finish(tmp_path, fault_backends):
    results = compare(
        examples.seed(), backends=["xla_crash", "xla_hang", "xla_raise", "xla_oom", "xla_export_fails", "nope", "xla"],
        out_dir=tmp_path, trials=1, timeout=20, bench=None,
    )
    rows = {name: (r.status, r.reason) for name, r in results.backends.items()}
    assert rows["xla"][0] == "ok"
    assert rows["xla_crash"][0] == "crashed" and "signal 6" in rows["xla_crash"][1]
    assert rows["xla_hang"][0] == "timeout" and "20 s" in rows["xla_hang"][1]
    assert rows["xla_raise"] == ("run-failed", "RuntimeError: runtime refused the inputs")
    assert rows["xla_oom"][0] == "out-of-memory" and "MemoryError" in rows["xla_oom"][1]
    assert rows["xla_export_fails"][0] == "export-failed" and "reduce_precision" in rows["xla_export_fails"][1]
    assert rows["nope"][0] == "unavailable"
    assert results.exit_code == 3
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["backends"]) == set(rows) and data["backends"]["xla"]["parity"]["passed"]


def test_cli_compare_on_the_seed_example(tmp_path):
    proc = run_cli("compare", "--backends", "xla", "--out", tmp_path, "--trials", "1", "--bench-time", "0.05")
    assert proc.returncode == 0, proc.stderr
    assert "xla" in proc.stdout and "foo.bar" in proc.stdout  # the dropped leaf is shown
    assert "xla: export" in proc.stderr  # progress
    assert "p50 ms" in proc.stdout and "reference" in proc.stdout  # latency beside the jax.jit baseline
    assert json.loads((tmp_path / "results.json").read_text())["backends"]["xla"]["status"] == "ok"


@pytest.mark.parametrize("args, message", [
    (["--tol", "out.nope=rtol:1"], "Tolerance 'out.nope' | matched no leaf"),
    (["--val-range", "foo.baz=3:1"], "LOW < HIGH"),
    (["--trials", "0"], "expected >= 1"),
    (["--dim-sizes", "b=2"], "Dimension 'b' | not symbolic"),
    (["--batch-sizes", "1,x"], "expected sizes >= 1"),
    (["--batch-sizes", "1,8"], "expected exactly one"),
    (["--min-iters", "0"], "min-iters >= 1"),
])
def test_cli_compare_usage_errors_exit_2(args, message, tmp_path):
    proc = run_cli("compare", "--backends", "xla", "--out", tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_cli_compare_with_named_inputs_from_npz(tmp_path):
    import numpy as np

    from multiexport.arrays_io import save_npz

    save_npz(tmp_path / "in.npz", {"foo.bar": np.zeros(10, np.int32), "foo.baz": np.full(10, 2, np.int32)})
    proc = run_cli("compare", "--backends", "xla", "--out", tmp_path / "o", "--inputs", tmp_path / "in.npz", "--no-bench")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "results.json").read_text())["trials"] == ["inputs"]


def test_a_ctrl_c_swallowed_by_a_destructor_still_stops_the_worker_wait(tmp_path, monkeypatch):
    """CI once hung here: the KeyboardInterrupt landed in a ZipFile.__del__, was printed and dropped."""
    import os
    import signal
    import sys

    from multiexport.comparison import _remembers_ctrl_c, _run_process

    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: swallowed.append(info.exc_type))

    class InterruptedWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # Python code, where the handler runs and raises

    pid_file = tmp_path / "pid"
    worker = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                                    "time.sleep(120)"]

    @_remembers_ctrl_c
    def body():
        InterruptedWhileCollected()  # collected at once: the Ctrl-C arrives inside __del__
        return _run_process(worker, tmp_path, timeout=60)

    # A runner launched in the background (`cmd &`) starts with SIGINT ignored; give it Python's default.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            body()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert swallowed == [KeyboardInterrupt]  # the fault was real: the exception never reached the caller
    assert not pid_file.exists() or not _alive(int(pid_file.read_text()))


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
