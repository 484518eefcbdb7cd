"""Run many artifacts in one fresh process: `python -m tests.run_many JOBS.json`.

JOBS.json: [{"artifact": DIR, "feeds": [[IN.npz, OUT.npz], ...]}, ...]. Each artifact is loaded from disk
alone with `multiexport.load` (the user's path, not the worker's) and run on each feed; a failure is
written to OUT.npz's sibling OUT.error.txt instead of stopping the others.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> int:
    import multiexport
    from multiexport.files.npz import load_npz, save_npz

    for job in json.loads(Path(path).read_text()):
        try:
            runner = multiexport.load(job["artifact"])
        except Exception as exc:  # noqa: BLE001 - reported per job
            for _, out in job["feeds"]:
                Path(out).with_suffix(".error.txt").write_text(f"load: {type(exc).__name__}: {exc}")
            continue
        for feed, out in job["feeds"]:
            try:
                save_npz(out, runner(load_npz(feed)))
            except Exception as exc:  # noqa: BLE001
                Path(out).with_suffix(".error.txt").write_text(f"run: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
