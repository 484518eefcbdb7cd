"""`multiexport load`: its help, and bad input as one line with exit code 2 before any worker starts."""

from __future__ import annotations


def test_help_explains_the_scenarios(cli):
    proc = cli("load", "--help")
    assert proc.returncode == 0
    for flag in ("--p99-ms", "--rates", "--batch-sizes", "--lanes", "--scenario", "--rounds"):
        assert flag in proc.stdout


def test_a_directory_without_artifacts_is_one_line(cli, tmp_path):
    proc = cli("load", tmp_path, "--out-dir", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "has no manifest.json" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_bad_bound_is_one_line(cli, tmp_path):
    proc = cli("load", tmp_path, "--p99-ms", "-3")
    assert proc.returncode == 2 and "--p99-ms" in proc.stderr
