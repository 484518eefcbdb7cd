"""Every status a backend row (or one batch size of it) can have, defined once, with what it means.

A row's `reason` says why it has its status and what to do; the meaning here says what the status means
wherever it appears (terminal, results.json, reports, the recommendation, exit codes).
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """A row's status. The value is what results.json and the reports show."""

    OK = "ok"
    PARITY_FAILED = "parity-failed"
    ACCURACY_FAILED = "accuracy-failed"
    UNSUPPORTED_PRECISION = "unsupported-precision"
    UNAVAILABLE = "unavailable"
    NO_GPU = "no-gpu"
    EXPORT_FAILED = "export-failed"
    CONVERTER_ERROR = "converter-error"
    UNSUPPORTED_OP = "unsupported-op"
    UNSUPPORTED_DTYPE = "unsupported-dtype"
    UNSUPPORTED_SIGNATURE = "unsupported-signature"
    UNSUPPORTED_PLATFORM = "unsupported-platform"
    VERSION_SKEW = "version-skew"
    SIZE_LIMIT = "size-limit"
    INVALID_MODEL = "invalid-model"
    COMPILE_FAILED = "compile-failed"
    LOAD_FAILED = "load-failed"
    SESSION_FAILED = "session-failed"
    RUN_FAILED = "run-failed"
    BENCH_FAILED = "bench-failed"
    CRASHED = "crashed"
    KILLED = "killed"
    OUT_OF_MEMORY = "out-of-memory"
    TIMEOUT = "timeout"
    NONDETERMINISTIC_TARGET = "nondeterministic-target"
    INTERRUPTED = "interrupted"
    INTERNAL_ERROR = "internal-error"
    SIZE_UNSUPPORTED = "size-unsupported"
    NOT_RUN = "not-run"
    INSUFFICIENT_MEMORY = "insufficient-memory"

    @property
    def meaning(self) -> str:
        return MEANING[self]

    @property
    def exit_code(self) -> int:
        """0 faithful, 1 parity failed, 2 the target is at fault, 3 the backend failed, 70 multiexport's bug."""
        return EXIT.get(self, 3)

    @property
    def is_failure(self) -> bool:
        return self not in (Status.OK, Status.SIZE_UNSUPPORTED)

    @classmethod
    def parse(cls, value: str) -> "Status":
        try:
            return cls(value)
        except ValueError:
            return cls.EXPORT_FAILED if value.endswith("-failed") else cls.RUN_FAILED


MEANING: dict[Status, str] = {
    Status.OK: "the artifact ran from disk and every output leaf matched jax.jit within tolerance at every size it "
               "supports",
    Status.PARITY_FAILED: "the artifact ran, but some output leaf differs from jax.jit beyond its tolerance",
    Status.ACCURACY_FAILED: "a reduced-precision artifact (fp16, int8) ran, but some output leaf is beyond its "
                            "accuracy budget against jax.jit (cosine, error/scale, SQNR, top-k agreement)",
    Status.UNSUPPORTED_PRECISION: "the format (or this target) has no artifact at the precision asked for: the row "
                                  "names what is missing; no float artifact is made in its place",
    Status.UNAVAILABLE: "the backend's libraries are not installed here",
    Status.NO_GPU: "the backend cannot use a GPU here, so it was not run on the CPU instead",
    Status.EXPORT_FAILED: "the export failed for a reason no narrower category covers",
    Status.CONVERTER_ERROR: "the converter itself failed (a converter bug or limitation, not the model's math)",
    Status.UNSUPPORTED_OP: "the format or its converter has no implementation for an op the function uses",
    Status.UNSUPPORTED_DTYPE: "the format, converter or runtime cannot take a dtype the function uses",
    Status.UNSUPPORTED_SIGNATURE: "the format cannot express the function's inputs or outputs as they are",
    Status.UNSUPPORTED_PLATFORM: "the artifact was not built for the platform asked for",
    Status.VERSION_SKEW: "the installed consumer cannot read what the producer wrote (a newer StableHLO, op or "
                         "serialization version than it supports)",
    Status.SIZE_LIMIT: "the artifact would pass a size limit of the format (e.g. ONNX's 2 GB protobuf)",
    Status.INVALID_MODEL: "the converter wrote a model that fails the format's own validation",
    Status.COMPILE_FAILED: "the format's compiler rejected the module",
    Status.LOAD_FAILED: "the runtime could not load the artifact",
    Status.SESSION_FAILED: "the runtime could not create a session for the artifact",
    Status.RUN_FAILED: "the runtime failed while running the artifact",
    Status.BENCH_FAILED: "the artifact failed during the benchmark",
    Status.CRASHED: "the worker process died (a segfault or abort in native code)",
    Status.KILLED: "the worker process was killed by a signal, with no evidence of running out of memory",
    Status.OUT_OF_MEMORY: "the worker ran out of memory (a MemoryError, or the kernel's out-of-memory killer)",
    Status.TIMEOUT: "the worker did not finish within --timeout",
    Status.NONDETERMINISTIC_TARGET: "the target gives different values from run to run (random numbers without a "
                                    "fixed seed), so no export can be checked against it",
    Status.INTERRUPTED: "the run was stopped (Ctrl-C or a signal) before this row finished",
    Status.INTERNAL_ERROR: "a bug in multiexport itself, not a verdict about the model or the format",
    Status.SIZE_UNSUPPORTED: "the artifact does not support this size (it was built for other sizes only); not "
                             "checked and not timed there",
    Status.NOT_RUN: "not run, because an earlier step of this row failed",
    Status.INSUFFICIENT_MEMORY: "not started: the compare's memory plan, before any export, found that this "
                                "backend's export or runner alone needs more memory than is available (the row "
                                "says how much each needs)",
}

EXIT: dict[Status, int] = {
    Status.OK: 0,
    Status.SIZE_UNSUPPORTED: 0,
    Status.PARITY_FAILED: 1,
    Status.ACCURACY_FAILED: 1,
    Status.UNSUPPORTED_PRECISION: 0,  # an honest "this format has no such variant", not a failure of the run
    Status.NONDETERMINISTIC_TARGET: 2,
    Status.INTERNAL_ERROR: 70,
}

assert set(MEANING) == set(Status), "every status has a meaning"
