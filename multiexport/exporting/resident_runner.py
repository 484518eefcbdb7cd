"""A runner whose runtime lives in another process that keeps the feeds: a JavaScript engine (Node.js, a
browser page) holding an ONNX Runtime session, driven by feed ids over a pipe or a protocol.

The feed is moved into that process once (`prepare`), then each timed call names it by id, so what the harness
times is the call, not the transfer of the inputs. What the runtime costs is timed inside that process
(`time_own_calls`): the round trip to it is the test rig's, which no deployed caller pays; both are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Collection, Protocol, Sequence

import numpy as np

from ..errors import RunError, leaf_message
from .options import RunOptions
from .runner import Runner

if TYPE_CHECKING:
    from .manifest import Manifest


class ResidentSession(Protocol):
    """The other process's session: tensors in by name (an id back), a call on an id, named outputs out."""

    def feed(self, tensors: Sequence[tuple[str, np.ndarray]]) -> int: ...

    def run(self, feed_id: int) -> Any: ...

    def fetch(self, feed_id: int) -> list[tuple[str, np.ndarray]]: ...

    def timed(self, feed_id: int, warmup: int, min_calls: int, max_calls: int, seconds: float) -> np.ndarray: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ResidentFeed:
    """A feed resident in the other process."""

    feed_id: int  # its id there (`ResidentSession.feed`)


def check_session_inputs(session: ResidentSession, names: Sequence[str], manifest: "Manifest", directory: Path,
                         who: str) -> None:
    """Close `session` and refuse the artifact (load-failed) when the graph inputs `names` it says it takes are not
    the ones the manifest binds; `who` names the session in the message ("the page's session")."""
    bound = [str(leaf.param) for leaf in manifest.inputs if leaf.param is not None]
    if sorted(names) != sorted(bound):
        session.close()
        raise RunError(f"Artifact '{directory}' | {who} takes {list(names)}, the manifest binds {bound}",
                       backend=manifest.backend, category="load-failed")


class ResidentFeedRunner(Runner):
    """Runs an artifact through a `ResidentSession`; a subclass names its runtime and turns failures into errors.

    Subclasses set `runtime` (the runtime's name in messages), `dtypes` (the dtype names it has tensor types for)
    and `place` (where the session lives: "Node", "the page"), and implement `error`.
    """

    runtime: ClassVar[str] = ""
    dtypes: ClassVar[Collection[str]] = ()
    place: ClassVar[str] = ""

    def __init__(self, manifest: "Manifest", directory: Path, options: RunOptions, session: ResidentSession,
                 facts: dict[str, Any]):
        super().__init__(manifest, directory, options)
        self.session = session
        self.facts = facts  # the runtime's versions and start-up figures, reported by describe()
        self.run_results: list[Any] = []  # what each session.run returned (a time measured there, or None)
        self.round_trip_ns: list[int] = []  # each driven call as the harness saw it: the test rig's round trip

    def error(self, exc: Exception, what: str) -> RunError:
        """The other process's failure during `what` as one typed line."""
        raise NotImplementedError

    def _prepare_impl(self, arrays: list[np.ndarray]) -> ResidentFeed:
        tensors = []
        for leaf, a in zip(self.manifest.inputs, arrays):
            if leaf.param is None:
                continue
            if a.dtype.name not in self.dtypes:
                raise RunError(leaf_message("Input", leaf.name, a.dtype.name, f"a dtype {self.runtime} has a tensor "
                               f"type for ({', '.join(self.dtypes)})"), backend=self.manifest.backend,
                               category="unsupported-dtype")
            tensors.append((str(leaf.param), a))
        try:
            return ResidentFeed(self.session.feed(tensors))
        except Exception as exc:
            raise self.error(exc, f"moving the inputs into {self.place}") from exc

    def _run_impl(self, prepared: ResidentFeed) -> None:
        t0 = time.perf_counter_ns()
        try:
            self.run_results.append(self.session.run(prepared.feed_id))
        except Exception as exc:
            raise self.error(exc, "session.run") from exc
        self.round_trip_ns.append(time.perf_counter_ns() - t0)

    def _fetch_impl(self, prepared: ResidentFeed) -> Sequence[Any]:
        try:
            outputs = dict(self.session.fetch(prepared.feed_id))
        except Exception as exc:
            raise self.error(exc, "session.run") from exc
        return [outputs[str(leaf.param)] for leaf in self.manifest.outputs]

    def time_own_calls(self, prepared: ResidentFeed, warmup: int, min_calls: int, max_calls: int,
                       seconds: float) -> np.ndarray:
        """Nanoseconds per session.run timed inside the other process, with the harness's warm-up and stopping
        rule (at least min_calls, until `seconds`): the runtime's own cost, not the round trip."""
        self._check_open()
        try:
            return self.session.timed(prepared.feed_id, warmup, min_calls, max_calls, seconds)
        except Exception as exc:
            raise self.error(exc, f"timing session.run in {self.place}") from exc

    def _close_impl(self) -> None:
        self.session.close()

    def round_trip_ms_p50(self) -> float | None:
        """The median round trip of the calls driven one by one, in ms (None: none driven)."""
        trips = np.asarray(self.round_trip_ns, dtype=np.float64) / 1e6
        return float(np.median(trips)) if trips.size else None
