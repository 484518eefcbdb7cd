"""A sweep directory is not trusted: a link planted at any component under --out is refused in one line,
exit 2, and nothing outside is deleted, written or read through it (resume, the history, merge).
Also: nothing beside a spec runs instead of multiexport."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import run_cli
from tests.hostile.conftest import assert_one_line

pytestmark = pytest.mark.subprocess

SEED = 'target = "multiexport.examples:seed"\nname = "seed"\n'


def _spec(tmp_path, body=SEED, args='["--no-bench", "--trials", "1"]'):
    spec = tmp_path / "spec" / "sweep.toml"
    spec.parent.mkdir(exist_ok=True)
    spec.write_text(f'[sweep]\nname = "t"\nbackends = ["xla"]\nargs = {args}\n\n[[target]]\n{body}')
    return spec


def _sweep_dir(out, tasks=("seed",), ended=()):
    """A sweep directory as `multiexport sweep` leaves it after a kill: its sweep.json, a journal."""
    (out / "rows").mkdir(parents=True)
    (out / "sweep.json").write_text(json.dumps({"schema": "multiexport.sweep/1", "uid": "u1", "name": "t",
                                                "tasks": list(tasks), "fingerprints": {}}))
    lines = [json.dumps({"event": "end", "name": n, "state": "done", "exit": 0, "seconds": 1.0, "attempts": 1,
                         "reason": "", "host": "h", "fingerprint": "f"}) for n in ended]
    (out / "progress.jsonl").write_text("".join(line + "\n" for line in lines))


def _victim(tmp_path):
    outside = tmp_path / "outside"
    (outside / "seed").mkdir(parents=True)
    (outside / "seed" / "precious.txt").write_text("mine")
    return outside


def test_a_resume_through_a_linked_rows_directory_deletes_and_writes_nothing_outside(tmp_path):
    """rows/ -> a directory elsewhere: the resume would rmtree rows/seed (outside/seed) and run the compare
    there. Refused before anything is touched."""
    spec, out, outside = _spec(tmp_path), tmp_path / "out", _victim(tmp_path)
    _sweep_dir(out)
    (out / "rows").rmdir()
    os.symlink(outside, out / "rows")
    proc = run_cli("sweep", spec, "--out-dir", out, "--resume")
    assert_one_line(proc, 2, "rows is a symbolic link", "nothing was changed")
    assert (outside / "seed" / "precious.txt").read_text() == "mine"
    assert sorted(p.name for p in outside.iterdir()) == ["seed"]
    assert sorted(p.name for p in (outside / "seed").iterdir()) == ["precious.txt"]


def test_a_resume_through_a_linked_row_directory_leaves_its_target_alone(tmp_path):
    """rows/seed -> elsewhere (the last component a link): the link itself is removed, never followed."""
    spec, out, outside = _spec(tmp_path), tmp_path / "out", _victim(tmp_path)
    _sweep_dir(out)
    os.symlink(outside / "seed", out / "rows" / "seed")
    proc = run_cli("sweep", spec, "--out-dir", out, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (outside / "seed").iterdir()) == ["precious.txt"]
    assert (out / "rows" / "seed" / "results.json").is_file() and not (out / "rows" / "seed").is_symlink()


def test_a_history_link_in_the_sweep_directory_creates_no_database_elsewhere(tmp_path):
    spec, out = _spec(tmp_path), tmp_path / "out"
    _sweep_dir(out)
    os.symlink(tmp_path / "elsewhere.sqlite", out / "history.sqlite")
    proc = run_cli("sweep", spec, "--out-dir", out, "--resume")
    assert_one_line(proc, 2, "history.sqlite is a symbolic link")
    assert not os.path.lexists(tmp_path / "elsewhere.sqlite")
    assert not (out / "rows" / "seed").exists()  # refused before any compare ran


def test_a_merge_copies_nothing_from_where_a_row_s_link_points(tmp_path):
    shard, outside = tmp_path / "shard", tmp_path / "outside"
    _sweep_dir(shard, ended=("seed",))
    outside.mkdir()
    (outside / "results.json").write_text('{"secret": "not the sweep\'s"}')
    os.symlink(outside, shard / "rows" / "seed")
    proc = run_cli("sweep", "--merge", shard, "--out-dir", tmp_path / "all")
    assert_one_line(proc, 2, "rows/seed is a symbolic link")
    assert not (tmp_path / "all" / "rows" / "seed" / "results.json").exists()


def test_a_sweep_s_own_files_read_through_a_linked_row_are_no_row(tmp_path):
    """diff --sweep reads each done row's results.json: through a linked rows/NAME it is refused, one line."""
    shard, outside = tmp_path / "shard", tmp_path / "outside"
    _sweep_dir(shard, ended=("seed",))
    outside.mkdir()
    (outside / "results.json").write_text("{}")
    os.symlink(outside, shard / "rows" / "seed")
    proc = run_cli("diff", "--sweep", shard, shard)
    assert_one_line(proc, 2, "rows/seed is a symbolic link")


def test_a_multiexport_package_beside_a_spec_does_not_run_and_a_module_target_there_still_imports(tmp_path):
    """Each compare starts from the spec's folder; a `multiexport/` there (or multiexport.py) would be what
    `python -m multiexport` ran. Started with -P it is not on the module path, while `model:build` (a module
    beside the spec) still resolves."""
    spec = _spec(tmp_path, 'target = "model:build"\nname = "model"\n')
    folder = spec.parent
    trap = "import pathlib; pathlib.Path(__file__).resolve().parents[1].joinpath('PWNED').write_text('ran')\n"
    (folder / "multiexport").mkdir()
    (folder / "multiexport" / "__init__.py").write_text(trap)
    (folder / "multiexport" / "__main__.py").write_text(trap)
    (folder / "model.py").write_text("import numpy as np\nfrom multiexport import Target\n\n\ndef build():\n"
                                     "    return Target(lambda x: x * 2, args=(np.ones((2, 3), np.float32),))\n")
    out = tmp_path / "out"
    proc = run_cli("sweep", spec, "--out-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (folder / "PWNED").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"]["state"] == "done" and summary["model"]["backends"]["xla"]["status"] == "ok"
    assert " -P -m multiexport compare model:build" in (out / "rows" / "model.log").read_text()
