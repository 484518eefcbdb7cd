"""The compare's own timeline: each progress step with when it began, so results.json says where the seconds went."""

from __future__ import annotations

import time

from ..results import Step


class Timeline:
    """Steps marked as they begin, on the clock of the process that started the command.

    start: a `time.perf_counter()` value (default: now), so a caller that built the target first (the CLI,
    `multiexport.compare` given a TARGET string) counts that too.
    """

    def __init__(self, start: float | None = None):
        self.start = time.perf_counter() if start is None else start
        self.marks: list[tuple[float, str]] = []

    def mark(self, what: str) -> None:
        self.marks.append((time.perf_counter() - self.start, what))

    def steps(self) -> list[Step]:
        """Every step with its duration: until the next step began, the last one until now."""
        now = time.perf_counter() - self.start
        ends = [at for at, _ in self.marks[1:]] + [now]
        return [Step(round(at, 3), what, round(max(end - at, 0.0), 3)) for (at, what), end in zip(self.marks, ends)]
