"""The command line's vocabulary: options grouped per concern in `--help`, one meaning per flag name across
subcommands, and the old spellings kept for one release (they work, and say the new name once on stderr)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import subprocess
import sys
from pathlib import Path

import pytest

from multiexport.cli.flags import DEPRECATED, DeprecatedAlias
from multiexport.cli.parser import build_parser
from multiexport.cli.sweep_commands import compare_refusal
from multiexport.files.npz import load_npz

from ..conftest import REPO, run_cli


@functools.lru_cache(maxsize=1)
def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and a.help is not argparse.SUPPRESS and a.dest != "help"]


@pytest.mark.parametrize("command", [c for c in _subparsers() if c != "backends"])
def test_every_option_of_every_command_is_in_a_group_of_its_concern(command):
    p = _subparsers()[command]
    ungrouped = [a.dest for a in p._optionals._group_actions if a in _options(p)]
    assert not ungrouped, f"{command}: options outside a titled group: {ungrouped}"
    text = p.format_help()
    for group in p._action_groups[2:]:  # the titled ones, as --help prints them
        if group._group_actions:
            assert f"\n{group.title}:\n" in text


def test_compare_shows_its_options_in_sections_not_one_list():
    text = _subparsers()["compare"].format_help()
    for title in ("what to export", "where to write", "formats", "parity", "timing", "native consumers", "devices",
                  "processes", "regression gate"):
        assert f"\n{title}:\n" in text, title
    assert "\noptions:\n  -h, --help            show this help message and exit\n\n" in text  # nothing else there


def test_a_flag_name_means_one_thing_across_commands():
    """Same name -> same kind of value (one value or a list, the same type) in every command that has it."""
    kinds: dict[str, set] = {}
    for p in _subparsers().values():
        for action in _options(p):
            for flag in action.option_strings:
                kinds.setdefault(flag, set()).add((type(action).__name__, action.nargs, action.type))
    assert {flag: k for flag, k in kinds.items() if len(k) > 1} == {}
    parsers = _subparsers()
    flags = {c: {f for a in _options(p) for f in a.option_strings} for c, p in parsers.items()}
    assert not any("--out" in f or "--plugin" in f or "--native-plugin" in f for f in flags.values())
    assert all("--out-dir" in flags[c] for c in ("export", "compare", "report", "sweep"))
    assert all("--save-outputs" in flags[c] and "--pjrt-plugin" in flags[c] for c in ("native",))
    assert "--save-outputs" in flags["run"] and "--pjrt-plugin" in flags["compare"]
    # one precision in export (an artifact has one), a list in compare, as --backend and --backends
    assert "--precision" in flags["export"] and "--precisions" in flags["compare"]
    assert "--precision" not in flags["compare"] and "--backend" not in flags["compare"]


MINIMAL = {"export": [], "compare": [], "report": ["r.json"], "sweep": [], "run": ["DIR"], "native": ["DIR"]}
VALUES = {"--precision": "fp32,fp16"}


@pytest.mark.parametrize("command, old, new", [(c, o, n) for c, m in DEPRECATED.items() for o, n in m.items()])
def test_an_old_spelling_still_works_and_says_the_new_one_once(command, old, new):
    value = VALUES.get(old, "some/path")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        by_old = build_parser().parse_args([command, *MINIMAL[command], old, value])
    quiet = io.StringIO()
    with contextlib.redirect_stderr(quiet):
        by_new = build_parser().parse_args([command, *MINIMAL[command], new, value])
    assert vars(by_old) == vars(by_new) and quiet.getvalue() == ""
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and f"{old} is deprecated, use {new}" in lines[0], err.getvalue()
    p = _subparsers()[command]
    assert f"{old} (use {new})" in p.epilog and "Deprecated spellings" in p.format_help()  # listed in the help
    assert any(isinstance(a, DeprecatedAlias) and old in a.option_strings for a in p._actions)


def test_old_spellings_work_end_to_end(tmp_path):
    """A script of the release before: export --out, run --out; same files as the new spellings."""
    old = run_cli("export", "--out", tmp_path / "a")
    assert old.returncode == 0, old.stderr
    assert "--out is deprecated, use --out-dir" in old.stderr and (tmp_path / "a" / "manifest.json").is_file()
    proc = run_cli("run", tmp_path / "a", "--out", tmp_path / "o.npz")
    assert proc.returncode == 0 and "--out is deprecated, use --save-outputs" in proc.stderr, proc.stderr
    new = run_cli("run", tmp_path / "a", "--save-outputs", tmp_path / "n.npz")
    assert new.returncode == 0 and "deprecated" not in new.stderr, new.stderr
    assert load_npz(tmp_path / "o.npz")["out"] == load_npz(tmp_path / "n.npz")["out"]


def test_export_without_an_output_directory_is_one_line():
    proc = run_cli("export")
    assert proc.returncode == 2 and "Option '--out-dir' | missing" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_sweep_checks_the_output_directory_by_either_spelling():
    base = ["compare", "t.py:t", "--backends", "xla"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert compare_refusal([*base[:2], "--out-dir", "OUT", *base[2:]]) is None
        assert compare_refusal([*base[:2], "--out", "OUT", *base[2:]]) is None
        refused = compare_refusal([*base[:2], "--out-dir", "OUT", *base[2:], "--out-dir", "ELSEWHERE"])
    assert refused is not None and "--out-dir" in refused


def test_importing_the_cli_imports_no_heavy_framework():
    heavy = ("jax", "jaxlib", "tensorflow", "jax2onnx", "onnxruntime", "onnx", "iree", "flax", "openvino", "ray")
    code = f"import sys, multiexport.cli; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_the_parser_is_built_by_one_function_that_runs_no_command():
    """The docs' CLI reference is generated from `build_parser()`: handlers are names, not imports."""
    for command, p in _subparsers().items():
        assert isinstance(p.get_default("handler"), str), command
    assert Path(REPO, "multiexport", "cli", "parser.py").is_file()
