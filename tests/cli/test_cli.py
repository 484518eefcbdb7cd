"""The command line, run as a user runs it: a fresh process each time."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from multiexport.files.npz import load_npz, save_npz

from ..conftest import REPO, run_cli

HEAVY = ("jax", "jaxlib", "tensorflow", "jax2onnx", "onnxruntime", "onnx", "iree", "flax")


def test_help_imports_no_heavy_library():
    code = (
        "import sys\n"
        "from multiexport.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print('LOADED', loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "usage: multiexport" in out and "signature" in out
    assert out.strip().endswith("LOADED []")


@pytest.mark.parametrize("command", ["signature", "export", "run", "backends"])
def test_every_command_has_help(command):
    proc = run_cli(command, "--help")
    assert proc.returncode == 0 and "usage: multiexport" in proc.stdout


def test_signature_answers_the_seed_question():
    rows = json.loads(run_cli("signature", "--json", check=True).stdout)["inputs"]
    assert [(r["name"], r["used"], r["xla_param"]) for r in rows] == [("foo.bar", False, None), ("foo.baz", True, 0)]
    rows = json.loads(run_cli("signature", "multiexport.examples:seed_bar", "--json", check=True).stdout)["inputs"]
    assert [(r["name"], r["used"], r["xla_param"]) for r in rows] == [("foo.bar", True, 0), ("foo.baz", False, None)]
    rows = json.loads(run_cli("signature", "--keep-unused", "--json", check=True).stdout)["inputs"]
    assert [(r["name"], r["used"], r["xla_param"]) for r in rows] == [("foo.bar", True, 0), ("foo.baz", True, 1)]


def test_signature_table_is_readable():
    out = run_cli("signature", check=True).stdout
    assert "foo.bar" in out and "foo.baz" in out
    assert "Pruned (the function never reads them): foo.bar" in out


def test_mlp_signature_names_every_leaf():
    data = json.loads(run_cli("signature", "multiexport.examples:mlp", "--json", check=True).stdout)
    assert [r["name"] for r in data["inputs"]][:2] == ["params.Dense_0.bias", "params.Dense_0.kernel"]
    assert [r["xla_param"] for r in data["inputs"]] == list(range(7))
    assert data["module_kept_var_idx"] == list(range(7))


@pytest.mark.parametrize(
    "args, message",
    [
        (["signature", "no_such_file.py:t"], "Target 'no_such_file.py:t' | file 'no_such_file.py' does not exist"),
        (["signature", "multiexport.examples:nope"], "has no attribute 'nope'"),
        (["run", "/nonexistent-dir"], "Artifact '/nonexistent-dir' | is missing"),
        (["export", "--backend", "nope", "--out-dir", "/tmp/x"], "Backend 'nope' | unknown"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2_or_3(args, message):
    proc = run_cli(*args)
    assert proc.returncode in (2, 3), proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_debug_shows_the_traceback():
    proc = run_cli("--debug", "signature", "multiexport.examples:nope")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_a_target_that_fails_to_trace_is_a_user_error(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(
        "import numpy as np\nfrom multiexport import Target\n"
        "target = Target(lambda x: x @ x, args=(np.ones((2, 3), np.float32),), name='bad')\n"
    )
    proc = run_cli("signature", str(path))
    assert proc.returncode == 2 and "Target 'bad' | fn failed to trace" in proc.stderr


def test_signature_json_stdout_holds_only_the_json_whatever_the_target_prints(tmp_path):
    path = tmp_path / "chatty.py"
    path.write_text("import numpy as np\nfrom multiexport import Target\nprint('hello from the import')\n"
                    "def f(x):\n    print('hello from the trace')\n    return x * 2\n"
                    "target = Target(f, args=(np.ones(3, np.float32),), name='chatty')\n")
    proc = run_cli("signature", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["name"] == "chatty"  # parses: nothing else on stdout
    assert "hello from the import" in proc.stderr and "hello from the trace" in proc.stderr


def test_markup_in_leaf_and_target_names_prints_as_text(tmp_path):
    path = tmp_path / "markup.py"
    path.write_text("import numpy as np\nfrom multiexport import Target\n"
                    "target = Target(lambda d: d['[/]'] * 2, args=({'[/]': np.ones(2, np.float32)},), name='[bold]x[/]')\n")
    proc = run_cli("signature", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "d.[/]" in proc.stdout and "[bold]x[/]" in proc.stdout
    art = tmp_path / "a"
    proc = run_cli("export", str(path), "--out-dir", art)
    assert proc.returncode == 0 and "[bold]x[/]" in proc.stdout, proc.stderr


def test_a_bug_in_multiexport_is_exit_70_with_the_traceback_saved(tmp_path):
    """A deliberate bug: the CLI is run with a handler that raises a plain TypeError."""
    code = ("import sys\nfrom multiexport import cli\nfrom multiexport.cli import commands\n"
            "def broken(args):\n    raise TypeError('an invariant broke')\n"
            "commands.cmd_backends = broken\n"
            "sys.exit(cli.main(['backends']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={**__import__('os').environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 70, proc.stderr
    assert "internal error (a bug in multiexport" in proc.stderr and "Traceback" not in proc.stderr
    saved = list(tmp_path.glob("multiexport-crash-*.txt"))
    assert len(saved) == 1 and str(saved[0]) in proc.stderr and "an invariant broke" in saved[0].read_text()


def test_export_then_run_with_npz_in_and_out(tmp_path):
    art = tmp_path / "mlp"
    out = run_cli("export", "multiexport.examples:mlp_dynamic", "--out-dir", art, check=True).stdout
    assert "parameters: 7 of 7 input leaves" in out and "produced by: multiexport" in out
    example = load_npz(art / "example_inputs.npz")
    feed = dict(example, **{"batch.x": np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32)})
    save_npz(tmp_path / "in.npz", feed)
    run_cli("run", art, "--inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "out.npz", check=True)
    assert load_npz(tmp_path / "out.npz")["out.logits"].shape == (5, 4)
    table = run_cli("run", art, check=True).stdout  # default: the artifact's own example inputs
    assert "out.logits" in table and "(8, 4)" in table


def test_run_rejects_a_wrong_dtype_naming_the_leaf(tmp_path):
    art = tmp_path / "seed"
    run_cli("export", "--out-dir", art, check=True)
    save_npz(tmp_path / "in.npz", {"foo.baz": np.arange(10, dtype=np.float32)})
    proc = run_cli("run", art, "--inputs", tmp_path / "in.npz")
    assert proc.returncode == 2
    assert "Input 'foo.baz' | got float32, expected int32" in proc.stderr


def test_backends_lists_xla():
    assert "xla" in run_cli("backends", check=True).stdout
