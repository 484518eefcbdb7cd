"""Hostile input (issue 16): real hostile files on disk, and the contract every refusal keeps.

The contract: a user mistake is one stderr line, `multiexport: error: ...`, naming the file or leaf and
what was expected, exit 2; a backend that cannot do something is a categorised row; never a traceback;
nothing written outside the output directory, nothing of the user's deleted.

Hypothesis profiles: "default" (bounded, derandomized, no example database: reproducible in CI and
leaves no .hypothesis directory) and "nightly" (1000 examples), chosen by $HYPOTHESIS_PROFILE.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir


def _private_hypothesis_home() -> None:
    """Hypothesis caches (unicode tables, constants) go to a temporary directory, removed at exit: with
    database=None as well, a test run leaves no .hypothesis directory in the repository."""
    import atexit
    import tempfile

    home = tempfile.mkdtemp(prefix="multiexport-hypothesis-")
    set_hypothesis_home_dir(home)
    atexit.register(shutil.rmtree, home, True)


_private_hypothesis_home()

settings.register_profile(
    "default", max_examples=30, deadline=None, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
settings.register_profile(
    "nightly", max_examples=1000, deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# -- the contract --------------------------------------------------------------------------------------

# TensorFlow's C++ log on load (absl's preamble, then e.g. "I0000 00:00:17.9 6965 port.cc:153] oneDNN custom
# operations are on", which TF 2.21 prints on AVX-512 CPUs whatever TF_CPP_MIN_LOG_LEVEL says): not multiexport's.
_TF_LOG = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\])")


def stderr_lines(proc) -> list[str]:
    """stderr without compare's progress lines ("  1.2s xla: export") and TensorFlow's own C++ log lines."""
    out = []
    for line in proc.stderr.splitlines():
        s = line.strip()
        if not s or _TF_LOG.match(s):
            continue
        head = s.split(" ", 1)[0]
        if head.endswith("s") and head[:-1].replace(".", "", 1).isdigit():
            continue
        out.append(line)
    return out


def assert_one_line(proc, code: int = 2, *fragments: str) -> str:
    """`proc` exited `code` with exactly one `multiexport: ...` line on stderr holding every fragment."""
    lines = stderr_lines(proc)
    assert proc.returncode == code, f"exit {proc.returncode}, expected {code}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{proc.stderr}"
    line = lines[0]
    assert line.startswith("multiexport: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


class Completed:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_main(*args, tmp: Path | None = None) -> Completed:
    """`multiexport.cli.main(ARGS)` in-process, stdout/stderr captured, TMPDIR pointed at `tmp`."""
    import contextlib
    import io
    import tempfile

    from multiexport.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    if tmp is not None:
        os.environ["TMPDIR"], tempfile.tempdir = str(tmp), None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        if tmp is not None:
            if saved_env is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved_env
            tempfile.tempdir = saved_tempdir
    return Completed(code, out.getvalue(), err.getvalue())


class Sandbox:
    """A directory tree to attack, and its parent to watch: what changed outside the allowed places."""

    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmp = root.parent / "tmp"  # TMPDIR of the CLI runs: worker dirs and crash reports land here
        self.tmp.mkdir(exist_ok=True)
        self.user = root / "user"  # the user's own files, which must survive
        self.user.mkdir()
        (self.user / "notes.txt").write_text("precious")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, int]:
        found = {}
        for dirpath, dirs, files in os.walk(self.root):
            for name in dirs + files:
                p = Path(dirpath) / name
                found[str(p.relative_to(self.root))] = -1 if p.is_dir() and not p.is_symlink() else p.lstat().st_size
        return found

    def cli(self, *args, env: dict | None = None, cwd: Path | None = None):
        """`python -m multiexport ARGS` in a fresh process, with TMPDIR in this sandbox's own tmp/."""
        from ..conftest import run_cli

        return run_cli(*args, env={"TMPDIR": str(self.tmp), **(env or {})}, cwd=cwd)

    def main(self, *args):
        """The CLI's own entry point `multiexport.cli.main(ARGS)` in this process (the command line's code path
        without a fresh interpreter): returns a CompletedProcess-like object with the exit code and output."""
        return run_main(*args, tmp=self.tmp)

    def tmp_left(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir())

    def rebase(self) -> None:
        """Take the 'before' snapshot now (after the test laid out its hostile files)."""
        self.before = self.snapshot()

    def assert_untouched(self, *allowed: Path | str) -> None:
        """Nothing created outside `allowed` (paths relative to the sandbox, or absolute), nothing deleted."""
        after = self.snapshot()
        rel = [str(Path(a).relative_to(self.root)) if Path(a).is_absolute() else str(a) for a in allowed]

        def ok(path: str) -> bool:
            return any(path == a or path.startswith(a.rstrip("/") + "/") for a in rel)

        created = sorted(p for p in after if p not in self.before and not ok(p))
        deleted = sorted(p for p in self.before if p not in after)
        assert not created, f"written outside the output directory: {created}"
        assert not deleted, f"deleted: {deleted}"
        assert (self.user / "notes.txt").read_text() == "precious"


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path / "box")


# -- real artifacts and results, made once per session -------------------------------------------------

@pytest.fixture(scope="session")
def seed_xla(tmp_path_factory) -> Path:
    """A real XLA export of the seed example (this multiexport's own), to copy and then attack."""
    from multiexport import export
    from multiexport.examples import seed

    out = tmp_path_factory.mktemp("hostile-seed") / "xla"
    export(seed(), out, "xla")
    return out


@pytest.fixture(scope="session")
def seed_iree(tmp_path_factory) -> Path:
    """A real IREE export of the seed example (its native consumer is IREE's own iree-*-module tools)."""
    pytest.importorskip("iree.runtime")
    pytest.importorskip("iree.compiler")
    from multiexport import export
    from multiexport.examples import seed

    out = tmp_path_factory.mktemp("hostile-seed-iree") / "iree"
    export(seed(), out, "iree")
    return out


@pytest.fixture(scope="session")
def seed_results(tmp_path_factory) -> Path:
    """A real results.json of a compare of the seed example (XLA only, no latency)."""
    from multiexport import compare
    from multiexport.examples import seed

    out = tmp_path_factory.mktemp("hostile-results") / "o"
    compare(seed(), backends=["xla"], out_dir=out, bench=None, trials=1)
    return out / "results.json"


@pytest.fixture
def artifact(seed_xla, sandbox) -> Path:
    """A fresh copy of the seed's XLA artifact inside the sandbox."""
    dst = sandbox.root / "art"
    shutil.copytree(seed_xla, dst)
    sandbox.rebase()
    return dst


def edit_manifest(directory: Path, edit) -> None:
    """Apply `edit(data)` to directory/manifest.json (its return value replaces the document if not None)."""
    import json

    path = directory / "manifest.json"
    data = json.loads(path.read_text())
    new = edit(data)
    path.write_text(json.dumps(data if new is None else new))


def refresh_inventory(directory: Path) -> None:
    """What someone editing an artifact on purpose does: make the manifest's file sizes match again."""
    import json

    from multiexport.exporting.pipeline import inventory

    path = directory / "manifest.json"
    data = json.loads(path.read_text())
    data["inventory"] = inventory(directory)
    path.write_text(json.dumps(data))


def build_evil_savedmodels(tmp_path_factory, name: str, modes) -> Path:
    """Real hostile SavedModels (tests/hostile/evil_savedmodel.py, one per mode), built in a fresh process
    with TensorFlow; each writes the file baked into its graph, under <dir>/PWNED-*, when its code runs."""
    import subprocess
    import sys

    from ..conftest import REPO

    pytest.importorskip("tensorflow")
    work = tmp_path_factory.mktemp(name)
    proc = subprocess.run([sys.executable, "-m", "tests.hostile.evil_savedmodel", str(work), str(work / "PWNED"),
                           *modes], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


def copy_evil(evil: Path, mode: str, sandbox) -> Path:
    """A copy of one hostile artifact in the sandbox (the file it writes stays baked into its graph)."""
    art = sandbox.root / mode
    shutil.copytree(evil / mode, art)
    sandbox.rebase()
    return art
