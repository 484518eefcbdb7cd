"""What a sweep says is true and safe to use: a target is never parsed as a flag (no false verdict under
the user's name), `--list` lines pasted into a shell run that compare and nothing else, resources the local
executor cannot give are a row saying so, and a spec of 20 000 targets is listed (not stuck for minutes)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_cli
from tests.hostile.conftest import assert_one_line

pytestmark = pytest.mark.subprocess


@pytest.mark.parametrize("target", ["--no-bench", "--help", "-h", "--trials=1"])
def test_a_target_that_looks_like_a_flag_is_refused_not_replaced_by_the_built_in_example(tmp_path, target):
    """Before: compare took it as a flag, ran its built-in example, and the row was done/ok under `mine`."""
    spec = tmp_path / "s.toml"
    spec.write_text(f'[sweep]\nbackends = ["xla"]\n[[target]]\ntarget = "{target}"\nname = "mine"\n')
    for args in (("sweep", spec, "--list"), ("sweep", spec, "--out-dir", tmp_path / "out")):
        assert_one_line(run_cli(*args), 2, "target 1.target", f"got {target!r}, which starts with '-'")
    assert not (tmp_path / "out").exists()


def test_list_lines_pasted_into_a_shell_run_the_compare_and_nothing_a_spec_smuggled_in(tmp_path):
    smuggled = "models/x$(touch PWNED)`touch PWNED2`;touch PWNED3.py:build"
    spec = tmp_path / "s.toml"
    spec.write_text(f'[sweep]\nbackends = ["xla"]\nargs = ["--tol", "1e-3"]\n[[target]]\ntarget = "{smuggled}"\n'
                    'name = "m"\ntags = ["q\\u001b]0;title\\u0007"]\n')
    proc = run_cli("sweep", spec, "--list", check=True)
    line = proc.stdout.strip()
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout  # the tag's escape shown, not sent
    command = line[line.index("multiexport "):]
    # A real shell runs the pasted line, with `multiexport` a function that prints each argument it got
    shell = subprocess.run(["bash", "-c", 'multiexport() { printf "%s\\n" "$@"; }\n' + command], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines() == ["compare", smuggled, "--out-dir", "OUT/m", "--backends", "xla", "--tol", "1e-3"]
    assert not list(tmp_path.glob("PWNED*"))


def test_resources_the_local_executor_cannot_honour_are_a_row_saying_so_never_ok(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\nargs = ["--no-bench", "--trials", "1"]\n'
                    '[[target]]\ntarget = "multiexport.examples:seed"\nname = "elsewhere"\n'
                    'resources = { arch = "sparc64", cpus = 4096 }\n')
    out = tmp_path / "out"
    proc = run_cli("sweep", spec, "--out-dir", out)
    assert proc.returncode == 3, proc.stderr[-3000:]
    row = json.loads((out / "summary.json").read_text())["elsewhere"]
    assert row["state"] == "unschedulable" and row["backends"] == {}
    assert "the local executor cannot honour resources arch 'sparc64'" in row["reason"] and "4096 cpus" in row["reason"]
    assert not (out / "rows" / "elsewhere").exists()  # no compare ran


def test_a_spec_of_20000_targets_is_listed(tmp_path):
    """Before: a compare parser built and run per target; 20 000 printed nothing in 5 minutes. Now one parse
    per distinct flags (the subprocess's timeout is the guard; the README gives the measured time)."""
    spec = tmp_path / "big.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\nargs = ["--no-bench"]\n'
                    + "".join(f'[[target]]\ntarget = "m.py:build"\nname = "t{i}"\n' for i in range(20_000)))
    proc = subprocess.run([sys.executable, "-m", "multiexport", "sweep", str(spec), "--list"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 20_000 and lines[-1].split()[0] == "t19999"
    assert shlex.split(lines[0])[1:] == ["multiexport", "compare", "m.py:build", "--out-dir", "OUT/t0", "--backends",
                                         "xla", "--no-bench"]


def test_a_flag_compare_refuses_is_still_refused_for_every_target_sharing_it(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nbackends = ["xla"]\n' + "".join(
        f'[[target]]\ntarget = "m.py:build"\nname = "t{i}"\nargs = ["--trials", "{"x" if i == 2 else 1}"]\n'
        for i in range(4)))
    assert_one_line(run_cli("sweep", spec, "--list"), 2, "target 't2'", "invalid int value: 'x'")
