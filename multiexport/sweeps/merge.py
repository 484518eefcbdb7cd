"""`multiexport sweep --merge A B ... --out ALL`: the shards of one sweep (`--shard i/n`, run on separate CI
jobs) as one sweep directory, which `diff --sweep`, `history --add` and the matrix read like any other.

Each ended row's results.json, reports and log are copied (not its artifacts); a task in two shards keeps
the later directory's row. The merged sweep.json names the directories and sweeps it came from.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from ..files import confined, write_bytes_atomic, write_text_atomic
from ..files.bounded import read_bytes
from . import matrix
from .state import SCHEMA, SWEEP_FILE, RowOutcome, SweepDir, now

COPIED = ("results.json", "report.md", "report.html")
_COPY_LIMIT = 256 << 20  # a results.json or report past this is not one a compare wrote


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
    confined.make_dirs(out, "rows", f"Sweep '{out}'")
    meta = {"schema": SCHEMA, "uid": uuid.uuid4().hex, "name": sweeps[0].meta.get("name", "merged"),
            "spec": sweeps[0].meta.get("spec"), "spec_sha256": sweeps[0].meta.get("spec_sha256"), "shard": None,
            "executor": "merged", "commit": sweeps[0].meta.get("commit"), "created": now(), "tasks": list(rows),
            "fingerprints": {n: o.fingerprint for n, (_, o) in rows.items()},
            "merged_from": [{"directory": str(s.root.resolve()), "uid": s.meta.get("uid"), "shard": s.meta.get("shard")}
                            for s in sweeps]}

    write_text_atomic(out / SWEEP_FILE, json.dumps(meta, indent=1) + "\n")
    merged = SweepDir(out, meta)
    for name, (sweep, outcome) in rows.items():
        for file_name in COPIED:  # each source checked link-free (every component), read bounded, no FIFO
            source = sweep.row_file(name, file_name)
            if os.path.lexists(source):
                data = read_bytes(source, f"Sweep '{sweep.root}' row", _COPY_LIMIT, UsageError,
                                  "expected a file the sweep's compare wrote", follow=False)
                confined.make_dirs(out, f"rows/{name}", merged.what)
                write_bytes_atomic(merged.row_file(name, file_name), data)
        log = sweep.log_path(name)
        if os.path.lexists(log):
            data = read_bytes(log, f"Sweep '{sweep.root}' log", _COPY_LIMIT, UsageError,
                              "expected a log the sweep wrote", follow=False)
            write_bytes_atomic(merged.log_path(name), data)
        merged.record_end(outcome)
    result = matrix.rows_of(out, merged.ended(), list(rows))
    matrix.write(out, result, f"sweep {meta['name']} (merged from {len(sweeps)})")
    return result


__all__ = ["merge"]
