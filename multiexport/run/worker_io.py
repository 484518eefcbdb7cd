"""What every worker process (run.worker's one-shot modes and run.serve's server) does the same way: register
the backends its parent registered, load a runner for an artifact or the jax.jit reference, and write a
typed error.json when it fails, so the parent tells a clean error from a crash.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InternalError, MultiexportError
from ..exporting.contract import RunOptions
from ..exporting.manifest import Manifest
from ..exporting.registry import get_backend, register
from ..files import write_text_atomic
from ..leaves import build_signature, load_target
from ..measure.reference import ReferenceRunner
from .messages import WorkerFailure, encode

if TYPE_CHECKING:
    from .messages import WorkerFailure


def add_register_option(parser) -> None:
    """The `--register NAME=module:Class` option every worker mode takes (backends the parent registered)."""
    parser.add_argument("--register", action="append", default=[], metavar="NAME=module:Class",
                        help="a backend the parent registered at run time")


def register_entries(entries: list[str]) -> None:
    """Register the backends the parent registered at run time (NAME=module:Class each) in this process."""
    for entry in entries:
        name, _, locator = entry.partition("=")
        register(name, locator)


CLEAN_FAILURE = 3  # a worker's exit code once it wrote error.json: the parent reads the failure from there


def write_failure(out: Path, exc: BaseException, stage: str, backend=None) -> WorkerFailure:
    """error.json for a failure (see `failure_of`); returns what it wrote."""
    failure = failure_of(exc, stage, backend)
    write_text_atomic(out / "error.json", encode(failure))
    return failure


def failure_of(exc: BaseException, stage: str, backend=None) -> WorkerFailure:
    """A failure, typed: the backend's own classification first, then the error's category."""
    memory = memory_error(exc)
    known = backend.classify(exc, stage) if backend is not None and not isinstance(exc, MultiexportError) else None
    if memory is not None:  # whoever wrapped it (a backend's export error, a converter's), memory ran out
        category, message = "out-of-memory", f"MemoryError while {stage}: {memory}"
    elif known:
        category, message = known
    elif isinstance(exc, InternalError):
        category, message = "internal-error", f"{exc}\n{traceback.format_exc()}"
    elif isinstance(exc, MultiexportError):
        category = getattr(exc, "category", None) or f"{stage}-failed"
        if category in ("run-failed", "export-failed") and stage != category.split("-")[0]:
            category = f"{stage}-failed"
        message = str(exc)
    else:
        category, message = f"{stage}-failed", " ".join(f"{type(exc).__name__}: {exc}".split())[:3000]
    return WorkerFailure(category, message)


def memory_error(exc: BaseException) -> MemoryError | None:
    """The MemoryError `exc` is or was raised from (its __cause__ / __context__ chain), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def load_runner(args, target=None):
    """(runner, backend) for the artifact or, in reference mode, for the target (`target`: already loaded)."""
    if args.mode == "reference":
        target = load_target(args.source) if target is None else target
        return ReferenceRunner(target, build_signature(target), device=args.device, threads=args.threads), None

    manifest = Manifest.read(args.source)
    if manifest.supports.get("x64"):  # this process is ours: 64-bit mode on for everything, no per-call cost
        import jax

        jax.config.update("jax_enable_x64", True)
    backend = get_backend(manifest.backend)
    options = RunOptions(device=args.device, threads=args.threads, trust_artifact=args.trust_artifact)
    return backend.load(args.source, options), backend
