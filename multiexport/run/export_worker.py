"""An export worker: export a target with one or more backends, isolated from the parent and from the other
converters (`python -m multiexport.run.worker export ...`, see run/worker.py).

The worker exports from the compare's handed target (`--handoff`, leaves/handed.py) while its exports need only
the StableHLO modules handed, and builds the target the first time one needs the function itself (an export
that needed it is exported again, from the start, from the built target). Each export leaves export.json or
error.json in its own OUT_DIR; a clean failure does not stop the next.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import InternalError
from ..exporting.contract import ExportOptions
from ..exporting.pipeline import export_artifact
from ..exporting.registry import get_backend
from ..exporting.symbolic_check import remember
from ..files import write_text_atomic
from ..files.npz import load_npz
from ..leaves import build_signature, load_target
from ..leaves.factory_cache import use_in_export_worker
from ..leaves.handed import NeedsTarget, read_handed
from ..measure.bench import memory_now
from ..system.descendants import DescendantPeak
from .messages import ExportReply, TargetLoad, decode, encode
from .worker_io import CLEAN_FAILURE, add_register_option, register_entries, write_failure
from .workers import AHEAD


def export_main(argv: list[str], built: _Targets | None = None, ran: list[str] | None = None) -> int:
    """Export TARGET with BACKEND into ARTIFACT_DIR, isolated from the parent (and from other converters).

    `--then BACKEND ARTIFACT_DIR OUT_DIR OPTIONS` (repeatable) exports more backends in this process after
    the first: compare sends a stage and the backends built on it together (the framework is imported and
    the target traced once; a `stage_artifact` counts only once this process has made it). Each export
    leaves export.json or error.json in its own OUT_DIR and a clean failure does not stop the next.
    `--pool N --claim-as K`: the last N exports are shared with other workers; this one does each only if
    it claims it first (creates OUT_DIR/claim, holding K, where none exists), else skips it.
    `export --ahead TARGET`: build TARGET first, then read this command line (a JSON list) on stdin
    (`_export_ahead`). built: the target that built, for the command line read. ran: where given, the backends
    this process exported (or tried to) are appended to it, in order (a shared export another worker claimed
    is not).
    """
    if len(argv) > 1 and argv[1] == AHEAD:
        return _export_ahead(argv)
    parser = argparse.ArgumentParser(prog="python -m multiexport.run.worker export")
    parser.add_argument("mode")
    parser.add_argument("target")
    parser.add_argument("backend")
    parser.add_argument("artifact", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--options", default="{}", help="ExportOptions as JSON (run.messages' codec)")
    parser.add_argument("--then", nargs=4, action="append", default=[],
                        metavar=("BACKEND", "ARTIFACT_DIR", "OUT_DIR", "OPTIONS"), help="one more export after it")
    parser.add_argument("--pool", type=int, default=0, help="how many of the last exports are shared")
    parser.add_argument("--claim-as", default="0", help="what this worker writes in a claim")
    parser.add_argument("--handoff", type=Path,
                        help="the compare's handed target (exporting/handoff.py): exports that need only its "
                        "modules do not build the target")
    parser.add_argument("--expected", type=Path,
                        help=".npz of jax.jit's outputs at the target's example (the compare's reference): the "
                        "symbolic check's, so this worker need not compile the target for it")
    add_register_option(parser)
    args = parser.parse_args(argv)
    jobs = [(args.backend, args.artifact, args.out, args.options),
            *((b, Path(a), Path(o), opts) for b, a, o, opts in args.then)]
    first_shared = len(jobs) - max(args.pool, 0)  # jobs from this index on are shared with other workers
    with_stage: set[int] = set()  # shared exports claimed with their stage (below)

    def mine(i: int) -> bool:  # an own export, or a shared one this worker claimed first
        if i < first_shared or i in with_stage:
            return True
        if not _claim(jobs[i][2], args.claim_as):
            return False
        # What builds on this export is claimed with it: exported in this worker right after, it starts from the
        # stage this worker writes (another worker would convert the stage again: it reuses only its own)
        for j in range(i + 1, len(jobs)):
            if _stage_of(jobs[j][3]) == str(Path(jobs[i][1]).resolve()) and _claim(jobs[j][2], args.claim_as):
                with_stage.add(j)
        return True

    try:
        register_entries(args.register)
    except Exception as exc:
        for i, job in enumerate(jobs):
            if mine(i):
                write_failure(job[2], exc, "export")
        return CLEAN_FAILURE
    targets = _Targets(args.target, args.handoff, args.expected) if built is None else built.given(args)
    made: set[str] = set()
    returncode = 0
    for i, job in enumerate(jobs):  # each shared export is claimed only when this worker reaches it
        if mine(i):
            returncode = max(returncode, targets.export(job, made))
            if ran is not None:
                ran.append(job[0])
    return returncode


class _Targets:
    """The target as this worker exports it: the compare's handed one (`--handoff`, leaves/handed.py: no build)
    while its exports need only the modules handed, else built (once, on the first export that needs it; a
    build that fails is the failure of each export that needs it)."""

    def __init__(self, spec: str, handoff: Path | None, expected: Path | None):
        self.spec, self.expected = spec, expected
        self.built: tuple[Any, Any, str, TargetLoad] | None = None
        self.failed: Exception | None = None
        self.handed = None
        if handoff is not None:
            try:
                self.handed = read_handed(handoff)
            except Exception:  # noqa: BLE001  (unreadable: build the target, as without a handoff)
                self.handed = None
            else:
                self._remember(self.handed.fn, self.handed.signature)

    def given(self, args: argparse.Namespace) -> "_Targets":
        """This target (built ahead) for the command line read after: its reference outputs remembered for
        the symbolic check; its handoff read only where the build failed (the exports that need only the
        handed modules are made from them, as in a worker that never built)."""
        if args.target != self.spec:
            raise InternalError(f"the ahead export worker built {self.spec!r}, then was told to export {args.target!r}")
        self.expected = args.expected
        if self.built is not None:
            fn, signature, _, _ = self.built
            self._remember(fn, signature)
        elif args.handoff is not None:
            with contextlib.suppress(Exception):  # unreadable: each export fails with the build's failure
                self.handed = read_handed(args.handoff)
        return self

    def export(self, job, made: set[str]) -> int:
        """Export one job: from the handed target until this worker has built the target (then from that: an
        export that needs the function would be tried twice), and from the built one when it needs it."""
        if self.handed is not None and self.built is None:
            try:
                return _export_one(self.handed.fn, self.handed.signature, self.handed.fingerprint, job, made)
            except NeedsTarget:
                pass  # its staging directory is gone (outdir.claimed): export it again from the built target
        try:
            fn, signature, fingerprint, loaded = self._build()
        except Exception as exc:
            write_failure(job[2], exc, "export")
            return CLEAN_FAILURE
        return _export_one(fn, signature, fingerprint, job, made, loaded)

    def _build(self) -> tuple[Any, Any, str, TargetLoad]:
        if self.failed is not None:
            raise self.failed
        if self.built is None:
            try:
                target, loaded = _load_with_factory_cache(self.spec)
                signature = build_signature(target)
                self.built = (target.fn, signature, signature.fingerprint(target.fn), loaded)
            except Exception as exc:
                self.failed = exc
                raise
            self._remember(target.fn, signature)
        return self.built

    def _remember(self, fn, signature) -> None:
        """The compare's reference outputs at the example, for the symbolic check (best effort: a file that does
        not read, or outputs that do not fit, leave the check to compute its own)."""
        if self.expected is not None:
            try:
                remember(fn, signature, load_npz(self.expected, "The compare's reference outputs"))
            except Exception:  # noqa: BLE001
                pass


def export_built(argv: list[str], spec: str, target: Any, load: TargetLoad, ran: list[str]) -> int:
    """Run the export command line `argv` with `target`, which this process built from `spec` already (the
    reference's paired worker, run.serve): what `export_main` would return. load: how it was built (each
    export's `TargetLoad`). ran: the backends exported here are appended to it."""
    targets = _Targets(spec, None, None)
    signature = build_signature(target)
    targets.built = (target.fn, signature, signature.fingerprint(target.fn), load)
    return export_main(argv, built=targets, ran=ran)


def _export_ahead(argv: list[str]) -> int:
    """`export --ahead TARGET [--register ...]`: build TARGET now (a failure is kept, and is each export's that
    needs the target), then run the command line read on stdin (a JSON list, --register added); nothing read
    (the compare did not use this worker): exit 0."""
    parser = argparse.ArgumentParser(prog="python -m multiexport.run.worker export --ahead")
    parser.add_argument("mode")
    parser.add_argument(AHEAD, action="store_true", required=True)
    parser.add_argument("target")
    add_register_option(parser)
    args = parser.parse_args(argv)
    targets = _Targets(args.target, None, None)
    with contextlib.suppress(Exception):  # kept in targets.failed
        targets._build()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    given = json.loads(line)
    if not isinstance(given, list) or not all(isinstance(a, str) for a in given):
        raise InternalError(f"the ahead export worker read {line[:200]!r}, expected a JSON list of arguments")
    return export_main([*given, *(a for r in args.register for a in ("--register", r))], built=targets)


def _stage_of(options_json: str) -> str | None:
    """The resolved stage directory an export's options name, or None (none, or options that do not read: the
    export itself reports those)."""
    try:
        stage = json.loads(options_json).get("stage_artifact")
    except (ValueError, AttributeError):
        return None
    return str(Path(stage).resolve()) if isinstance(stage, str) and stage else None


def _claim(out: Path, token: str) -> bool:
    """Whether this worker is the first to claim the shared export whose directory is `out` (an exclusive
    create: of two workers reaching it at once, exactly one gets it)."""
    try:
        fd = os.open(out / "claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as claim:
        claim.write(token)
    return True


def _load_with_factory_cache(spec: str) -> tuple[Any, TargetLoad]:
    """The TARGET, built from the programs the parent's load compiled (signature/factory_cache.py) when the
    parent recorded them, and how it was built."""
    import jax


    cached = use_in_export_worker()
    counts = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}

    def count(event: str, **_: object) -> None:
        if event in counts:
            counts[event] += 1

    jax.monitoring.register_event_listener(count)
    t0 = time.perf_counter()
    try:
        target = load_target(spec)
    finally:
        jax.monitoring.unregister_event_listener(count)
    return target, TargetLoad(seconds=time.perf_counter() - t0, factory_cache=bool(cached),
                              cache_hits=counts["/jax/compilation_cache/cache_hits"],
                              cache_misses=counts["/jax/compilation_cache/cache_misses"])


def _export_one(fn, signature, fingerprint: str, job, made: set[str], loaded: TargetLoad | None = None) -> int:
    import dataclasses


    name, artifact, out, options_json = job
    backend = None
    try:
        options = decode(ExportOptions, options_json, f"Export options of '{name}'")
        if options.stage_artifact and str(Path(options.stage_artifact).resolve()) not in made:
            # not made by this process: whatever is there may be stale
            options = dataclasses.replace(options, stage_artifact=None)
        backend = get_backend(name)
        t0, c0 = time.perf_counter(), _cpu_with_children()
        with DescendantPeak() as children:  # a converter's own processes hold memory too
            export_artifact(backend, fn, signature, artifact, options)
        write_text_atomic(out / "export.json", encode(ExportReply(
            seconds=time.perf_counter() - t0, cpu_seconds=_cpu_with_children() - c0, fingerprint=fingerprint,
            peak_rss_bytes=memory_now()["peak_rss_bytes"], target_load=loaded,
            child_peak_rss_bytes=children.peak_bytes)))
        made.add(str(Path(artifact).resolve()))
    except Exception as exc:
        write_failure(out, exc, "export", backend)
        return CLEAN_FAILURE
    return 0


def _cpu_with_children() -> float:
    """CPU seconds this process used so far, and the children it waited for (iree-compile runs in one)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system
