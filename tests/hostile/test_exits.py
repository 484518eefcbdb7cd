"""Exit codes by cause, when the target's code ends a process or memory runs out (issue 28): 0 means every
backend faithful and 70 a bug in multiexport, so neither may come from a target that exits, and a worker
that runs out of memory is `out-of-memory` whichever way it did (a MemoryError, the kernel's OOM killer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import REPO
from .conftest import assert_one_line

pytestmark = pytest.mark.subprocess

TARGETS = textwrap.dedent("""
    import dataclasses, os, sys
    import numpy as np
    from multiexport.examples import seed

    IN_WORKER = sys.argv[0].endswith(os.path.join("run", "worker.py"))  # python -m multiexport.run.worker
    CODE = int(os.environ.get("HOSTILE_EXIT", "0"))

    def _with(fn_in_worker=None, fn_here=None):
        target = seed()
        def fn(*args, **kwargs):
            act = fn_in_worker if IN_WORKER else fn_here
            if act is not None:
                act()
            return target.fn(*args, **kwargs)
        return dataclasses.replace(target, fn=fn)

    def factory_exits():
        os._exit(CODE)

    def trace_exits():
        return _with(fn_here=lambda: os._exit(CODE))

    def exits_in_worker():
        return _with(fn_in_worker=lambda: os._exit(CODE))

    def memory_error_in_worker():  # numpy's own MemoryError: 4 EiB cannot be had
        return _with(fn_in_worker=lambda: np.empty(1 << 62, np.uint8))

    def allocates_in_worker():  # 3 GiB touched for real, in a cgroup that allows 2 GiB
        return _with(fn_in_worker=lambda: np.ones(3 << 30, np.uint8).sum())
""")


@pytest.fixture
def targets(sandbox) -> Path:
    path = sandbox.root / "targets.py"
    path.write_text(TARGETS)
    sandbox.rebase()
    return path


def _compare(sandbox, spec: str, code: int = 0, *extra):
    out = sandbox.root / "o"
    proc = sandbox.cli("compare", spec, "--backends", "xla", "--no-bench", "--out-dir", out, *extra,
                       env={"HOSTILE_EXIT": str(code)})
    return proc, out


@pytest.mark.parametrize("code", [0, 3])
@pytest.mark.parametrize("where", ["factory_exits", "trace_exits"])
def test_a_target_calling_os_exit_in_the_command_is_a_usage_error_never_its_code(sandbox, targets, where, code):
    """os._exit(0) from the factory or the trace ended compare with 0 (every backend faithful) with nothing
    checked; os._exit(3) with 3 and no word."""
    proc, out = _compare(sandbox, f"{targets}:{where}", code)
    assert_one_line(proc, 2, f"os._exit({code})", "nothing was checked")
    assert not out.exists() or not (out / "results.json").exists()
    assert sandbox.tmp_left() == []


@pytest.mark.parametrize("code", [0, 70])
def test_a_target_calling_os_exit_only_in_a_worker_is_that_rows_failure(sandbox, targets, code):
    """In the export worker: 70 (a bug in multiexport) before, from 'exited without a result'."""
    proc, out = _compare(sandbox, f"{targets}:exits_in_worker", code)
    assert proc.returncode == 3, proc.stderr
    row = json.loads((out / "results.json").read_text())["backends"]["xla"]
    assert row["status"] == "export-failed" and f"os._exit({code})" in row["reason"], row


def test_a_memory_error_in_a_worker_is_out_of_memory(sandbox, targets):
    proc, out = _compare(sandbox, f"{targets}:memory_error_in_worker")
    assert proc.returncode == 3, proc.stderr
    row = json.loads((out / "results.json").read_text())["backends"]["xla"]
    assert row["status"] == "out-of-memory" and "MemoryError" in row["reason"], row


def test_a_late_usage_error_leaves_no_new_output_directory(sandbox):
    """A tolerance naming no output leaf is found once the signature is built, after --out was claimed."""
    out = sandbox.root / "new" / "o"
    proc = sandbox.cli("compare", "multiexport.examples:seed", "--backends", "xla", "--no-bench", "--out-dir", out,
                       "--tol", "no_such_leaf=rtol:1e-3")
    assert_one_line(proc, 2, "no_such_leaf")
    assert not out.exists()


def _memory_cgroup_v1() -> Path | None:
    """This process's v1 memory cgroup directory, when a child cgroup can be made in it (root, cgroup v1)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                here = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
                return here if os.access(here, os.W_OK) and (here / "memory.oom_control").is_file() else None
    except (OSError, ValueError):
        return None
    return None


def test_a_real_oom_kill_under_cgroup_v1_is_out_of_memory(sandbox, targets):
    """The kernel's OOM killer ends the export worker in a v1 memory cgroup limited to 2 GiB: the row said
    'killed ... no sign of running out of memory' (only cgroup v2's memory.events was read)."""
    parent = _memory_cgroup_v1()
    if parent is None:
        pytest.skip("needs a writable cgroup v1 memory controller (root on a cgroup v1 or hybrid machine)")
    group = parent / f"multiexport-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(2 << 30))
        out = sandbox.root / "o"
        script = f'echo $$ > {group}/cgroup.procs && exec "$@"'
        proc = subprocess.run(["sh", "-c", script, "sh", sys.executable, "-m", "multiexport", "compare",
                               f"{targets}:allocates_in_worker", "--backends", "xla", "--no-bench", "--out-dir", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TMPDIR": str(sandbox.tmp)})
        assert proc.returncode == 3, proc.stderr
        row = json.loads((out / "results.json").read_text())["backends"]["xla"]
        assert row["status"] == "out-of-memory" and "out-of-memory killer" in row["reason"], row
    finally:
        group.rmdir()
