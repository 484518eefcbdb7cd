"""`multiexport sweep --merge A B ... --out ALL`: the shards of one sweep (`--shard i/n`, run on separate CI
jobs) as one sweep directory, which `diff --sweep`, `history --add` and the matrix read like any other.

Each ended row's results.json, reports and log are copied (not its artifacts); a task in two shards keeps
the later directory's row. The merged sweep.json names the directories and sweeps it came from.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from . import matrix
from .state import SCHEMA, SWEEP_FILE, RowOutcome, SweepDir, now

COPIED = ("results.json", "report.md", "report.html")


def merge(directories: Sequence[Path], out: Path) -> list[matrix.Row]:
    """Merge sweep `directories` into the new sweep directory `out`; returns its rows."""
    if not directories:
        raise UsageError("Option '--merge' | no directories, expected the sweep directories to merge")
    SweepDir.check_usable(out, resume=False)
    sweeps = [SweepDir.read(Path(d)) for d in directories]
    rows: dict[str, tuple[SweepDir, RowOutcome]] = {}
    for sweep in sweeps:
        for name, outcome in sweep.ended().items():
            rows[name] = (sweep, outcome)
    (out / "rows").mkdir(parents=True, exist_ok=True)
    meta = {"schema": SCHEMA, "uid": uuid.uuid4().hex, "name": sweeps[0].meta.get("name", "merged"),
            "spec": sweeps[0].meta.get("spec"), "spec_sha256": sweeps[0].meta.get("spec_sha256"), "shard": None,
            "executor": "merged", "commit": sweeps[0].meta.get("commit"), "created": now(), "tasks": list(rows),
            "fingerprints": {n: o.fingerprint for n, (_, o) in rows.items()},
            "merged_from": [{"directory": str(s.root.resolve()), "uid": s.meta.get("uid"), "shard": s.meta.get("shard")}
                            for s in sweeps]}
    from ..files import write_text_atomic

    write_text_atomic(out / SWEEP_FILE, json.dumps(meta, indent=1) + "\n")
    merged = SweepDir(out, meta)
    for name, (sweep, outcome) in rows.items():
        source, target = sweep.row_dir(name), merged.row_dir(name)
        for file_name in COPIED:
            if (source / file_name).is_file() and not (source / file_name).is_symlink():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source / file_name, target / file_name)
        log = sweep.log_path(name)
        if log.is_file() and not log.is_symlink():
            shutil.copyfile(log, merged.log_path(name))
        merged.record_end(outcome)
    result = matrix.rows_of(out, merged.ended(), list(rows))
    matrix.write(out, result, f"sweep {meta['name']} (merged from {len(sweeps)})")
    return result


__all__ = ["merge"]
