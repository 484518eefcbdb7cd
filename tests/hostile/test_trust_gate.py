"""One trust gate for every path that loads an artifact (issue 28, code execution): `run`, `native`, compare's
workers and the Python API all pass `Backend.check_untrusted` before a format that carries code is loaded,
and a manifest field is data, never a program path.

The hostile SavedModels are real (tests/hostile/evil_savedmodel.py: a WriteFile in the serving function, or in
a resource initializer that runs while the SavedModel loads), run through the real TF C API consumer.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from multiexport import ArtifactError

from .conftest import assert_one_line, build_evil_savedmodels, copy_evil, edit_manifest

MODES = ("serving", "load")


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    return build_evil_savedmodels(tmp_path_factory, "evil-native", MODES)


def _written(evil: Path, mode: str) -> list[str]:
    return sorted(p.name for p in evil.glob(f"PWNED-{mode}*"))


def _tf_run_buildable() -> None:
    from multiexport.native.build import NativeBuildError, recipe

    try:
        recipe("tf_run")
    except NativeBuildError as exc:
        pytest.skip(f"tf_run cannot be built here: {exc}")


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_native_refuses_a_file_writing_savedmodel_before_the_tf_c_api_loads_it(evil, sandbox, mode):
    _tf_run_buildable()
    art = copy_evil(evil, mode, sandbox)
    proc = sandbox.cli("native", art)  # a fresh process: the gate may be TF's first import, and stays one line
    assert_one_line(proc, 2, str(art), "WriteFile", "--trust-artifact")
    assert not _written(evil, mode), "the planted SavedModel ran"
    proc = sandbox.main("native", art, "--print-command")
    assert_one_line(proc, 2, "WriteFile", "--trust-artifact")
    assert "tf_run" not in proc.stdout
    sandbox.assert_untouched()
    assert not sandbox.tmp_left()


@pytest.mark.subprocess
@pytest.mark.slow
def test_native_trust_artifact_is_the_one_way_to_run_it(evil, sandbox):
    _tf_run_buildable()
    art = copy_evil(evil, "serving", sandbox)
    try:
        proc = sandbox.main("native", art, "--trust-artifact")
        assert proc.returncode == 0, proc.stderr
        assert "45" in proc.stdout
        assert _written(evil, "serving") == ["PWNED-serving"]  # it is a program: trusted, it runs
    finally:
        for p in evil.glob("PWNED-serving*"):
            p.unlink()


@pytest.mark.slow
def test_the_python_api_and_the_backend_contract_refuse_it_too(evil, sandbox):
    from multiexport.exporting.registry import get_backend
    from multiexport.native.run import run

    art = copy_evil(evil, "serving", sandbox)
    with pytest.raises(ArtifactError, match="WriteFile.*--trust-artifact"):
        get_backend("savedmodel").check_untrusted(art)
    with pytest.raises(ArtifactError, match="WriteFile.*--trust-artifact"):
        run(art, {})
    assert not _written(evil, "serving")
    sandbox.assert_untouched()


@pytest.mark.slow
def test_a_planted_savedmodel_is_never_reused_as_the_stage_litert_converts(evil, sandbox):
    """The LiteRT export loads the SavedModel stage it builds on: a planted one beside it is exported afresh."""
    from multiexport.examples import seed
    from multiexport.exporting import ExportOptions
    from multiexport.exporting.pipeline import reusable_stage
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature

    art = copy_evil(evil, "serving", sandbox)
    assert reusable_stage(get_backend("savedmodel"), build_signature(seed()), ExportOptions(), str(art)) is None
    assert not _written(evil, "serving")


# -- IREE: native.tools is data -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seed_iree(tmp_path_factory) -> Path:
    pytest.importorskip("iree.runtime")
    from multiexport import export
    from multiexport.examples import seed

    out = tmp_path_factory.mktemp("trust-iree") / "iree"
    export(seed(), out, "iree")
    return out


def _planted_program(sandbox) -> tuple[Path, Path]:
    """An executable of the attacker's that leaves a file behind when it runs."""
    pwned = sandbox.root.parent / "PWNED-tool"
    program = sandbox.root.parent / "evil-tool.sh"
    program.write_text(f"#!/bin/sh\necho ran > '{pwned}'\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program, pwned


@pytest.mark.subprocess
@pytest.mark.parametrize("field", ["run", "benchmark"])
@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_an_iree_manifest_naming_its_own_tool_is_refused_and_never_printed(seed_iree, sandbox, field, how):
    art = sandbox.root / "iree"
    shutil.copytree(seed_iree, art)
    program, pwned = _planted_program(sandbox)
    named = str(program) if how == "absolute" else os.path.relpath(program, art)
    edit_manifest(art, lambda m: m["native"]["tools"].update({field: named}))
    sandbox.rebase()
    args = ("--iters", "2") if field == "benchmark" else ()
    for trust in ((), ("--trust-artifact",)):  # a manifest field is data: trusting the artifact does not make it a program
        proc = sandbox.main("native", art, *args, *trust)
        assert_one_line(proc, 2, f"native.tools.{field}", "expected")
        assert not pwned.exists(), "the manifest's program ran"
        proc = sandbox.main("native", art, "--print-command", *trust)
        assert_one_line(proc, 2, "native.tools.")
        assert named not in proc.stdout and str(program) not in proc.stdout
    sandbox.assert_untouched()
    assert not sandbox.tmp_left()


@pytest.mark.subprocess
def test_an_untouched_iree_artifact_still_runs_natively(seed_iree, sandbox):
    art = sandbox.root / "iree"
    shutil.copytree(seed_iree, art)
    proc = sandbox.main("native", art, "--print-command")
    assert proc.returncode == 0, proc.stderr
    assert "_runtime_libs/iree-run-module" in proc.stdout
    proc = sandbox.main("native", art)
    assert proc.returncode == 0, proc.stderr
    assert "45" in proc.stdout
    assert json.loads((art / "manifest.json").read_text())["native"]["tools"]["run"] == "iree-run-module"
