"""A sweep's own files and its spec read bounded: a FIFO or device refused without blocking, a size cap
with a message, nesting and huge numbers one line (never RecursionError/OverflowError), impossible figures
in a journal no row."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import run_cli
from tests.hostile.conftest import assert_one_line

pytestmark = pytest.mark.subprocess

META = {"schema": "multiexport.sweep/1", "uid": "u1", "name": "t", "tasks": ["a"]}
END = {"event": "end", "name": "a", "state": "failed", "exit": 2, "seconds": 1.0, "attempts": 1, "reason": "r",
       "host": "h", "fingerprint": "f"}


def _sweep_dir(out, journal: str | None = None):
    (out / "rows").mkdir(parents=True)
    (out / "sweep.json").write_text(json.dumps(META))
    if journal is not None:
        (out / "progress.jsonl").write_text(journal)
    return out


def test_a_fifo_as_sweep_json_is_refused_without_blocking(tmp_path):
    out = tmp_path / "s"
    (out / "rows").mkdir(parents=True)
    os.mkfifo(out / "sweep.json")  # no writer: a plain open/read would wait for ever (run_cli's timeout)
    proc = run_cli("history", tmp_path / "h.sqlite", "--add", out)
    assert_one_line(proc, 2, "sweep.json' | is a FIFO (named pipe)", "expected a sweep.json")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_journal_that_is_a_fifo_or_a_device_is_refused_without_blocking(tmp_path, special):
    out = _sweep_dir(tmp_path / "s")
    if special == "fifo":
        os.mkfifo(out / "progress.jsonl")
    else:
        os.symlink(special, out / "progress.jsonl")
    proc = run_cli("diff", "--sweep", out, out)
    assert_one_line(proc, 2, "progress.jsonl", "FIFO" if special == "fifo" else "symbolic link")


def test_a_journal_past_the_size_cap_is_refused_with_its_size(tmp_path):
    out = _sweep_dir(tmp_path / "s", journal="")
    with open(out / "progress.jsonl", "r+b") as fh:
        fh.truncate(65 << 20)  # sparse: costs no disk
    proc = run_cli("diff", "--sweep", out, out)
    assert_one_line(proc, 2, "progress.jsonl' | is 68157440 bytes, more than the 67108864 bytes")


def test_a_journal_line_nested_deep_or_holding_huge_numbers_is_skipped_not_a_crash(tmp_path):
    lines = ["[" * 100_000 + "]" * 100_000,
             '{"event": "end", "name": "a", "exit": 1' + "0" * 5000 + "}",
             json.dumps({**END, "seconds": -5.0}), json.dumps({**END, "seconds": float("inf")}),
             json.dumps({**END, "seconds": 10 ** 400}), json.dumps({**END, "exit": 10 ** 30}),
             json.dumps({**END, "state": "done \x1b[2J<script>"}), json.dumps({**END, "attempts": 10 ** 20})]
    out = _sweep_dir(tmp_path / "s", journal="\n".join(lines) + "\n")
    proc = run_cli("sweep", "--merge", out, "--out-dir", tmp_path / "m")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads((tmp_path / "m" / "summary.json").read_text()) == {}  # no line was a row
    matrix = (tmp_path / "m" / "matrix.md").read_text()
    assert "\x1b" not in matrix and "<script>" not in matrix


SPECS = {
    "deep array": ("[sweep]\nargs = " + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deep"),
    "deep inline table": ("[sweep]\nx = " + "{a = " * 30_000 + "1" + "}" * 30_000 + "\n", "nested too deep"),
    "nested past the limit": ("[sweep]\nx = " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 16 levels"),
    "5000-digit timeout": ("[sweep]\ntimeout = 1" + "0" * 5000 + "\n", "holds a value TOML cannot read"),
    "400-digit timeout": ("[sweep]\ntimeout = 1" + "0" * 400 + "\n[[target]]\ntarget = \"m:x\"\n",
                          "got an integer of 401 digits, expected a number of seconds > 0"),
    "400-digit cpus": ("[[target]]\ntarget = \"m:x\"\nresources = { cpus = 1" + "0" * 400 + " }\n",
                       "resources.cpus | got an integer of 401 digits"),
    "negative memory": ("[[target]]\ntarget = \"m:x\"\nresources = { memory_gib = -1 }\n",
                        "resources.memory_gib | got -1"),
    "infinite timeout": ("[[target]]\ntarget = \"m:x\"\ntimeout = inf\n", "got inf, expected a number of seconds"),
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_a_hostile_spec_is_one_line(tmp_path, case):
    text, fragment = SPECS[case]
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    assert_one_line(run_cli("sweep", spec, "--list"), 2, f"Sweep spec '{spec}'", fragment)


def test_a_spec_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    spec = tmp_path / "s.toml"
    os.mkfifo(spec)
    assert_one_line(run_cli("sweep", spec, "--list"), 2, f"Sweep spec '{spec}' | is a FIFO (named pipe)")
