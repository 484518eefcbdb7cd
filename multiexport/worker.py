"""Worker process: load one artifact from disk and run every trial feed through it.

`python -m multiexport.worker ARTIFACT FEEDS_DIR OUT_DIR [--device cpu]` reads FEEDS_DIR/NNN.npz and
writes OUT_DIR/NNN.npz. It never sees the original function: what it computes comes from the
artifact alone. A failure writes OUT_DIR/error.json ({category, message}) and exits 3, so the parent
can tell a clean error from a crash (signal) or a hang (timeout).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m multiexport.worker")
    parser.add_argument("artifact", type=Path)
    parser.add_argument("feeds", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--register", action="append", default=[], metavar="NAME=module:Class",
                        help="a backend the parent registered at run time")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stage = "load"
    try:
        from .api import load
        from .arrays_io import load_npz, save_npz
        from .registry import register

        for entry in args.register:
            name, _, locator = entry.partition("=")
            register(name, locator)

        runner = load(args.artifact, device=args.device)
        stage = "run"
        for feed_path in sorted(args.feeds.glob("*.npz")):
            save_npz(args.out / feed_path.name, runner(load_npz(feed_path)))
    except Exception as exc:  # reported to the parent as data, never as a traceback on its terminal
        from .manifest import write_text_atomic

        message = f"{type(exc).__name__}: {exc}".strip()
        write_text_atomic(args.out / "error.json", json.dumps({"category": f"{stage}-failed", "message": message}))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
