"""The onnx-node runner: an onnxruntime-node session in a `node` process, fed and fetched by leaf name.

What is timed: `time_own_calls` times session.run back to back inside Node (process.hrtime.bigint), the cost a
Node.js server calling onnxruntime-node pays; the harness's clock around `run_prepared` would add the pipe round
trip from Python to Node, which no deployed server pays. Both are recorded (`describe`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import RunError, Runner, leaf_message

from .process import JS_TYPES, NodeSession


@dataclass
class Prepared:
    """A feed resident in the node process: its id there (`NodeSession.feed`)."""

    feed_id: int


class OnnxNodeRunner(Runner):
    """Runs model.onnx through onnxruntime-node (its CPU execution provider) in a Node.js process."""

    # onnxruntime-node has no getter for a session's threads: the value set in its SessionOptions
    # (intraOpNumThreads, inter-op 1, sequential execution) is what is reported, as LiteRT does.
    threads_key = "intra_op_threads"

    def __init__(self, manifest, directory, options, session: NodeSession, facts: dict[str, Any]):
        super().__init__(manifest, directory, options)
        self.session = session
        self.facts = facts
        self.node_ns: list[int] = []
        self.round_trip_ns: list[int] = []
        self.calling_path = (f"onnxruntime-node {facts.get('runtime_version')} InferenceSession.run (cpu EP) in "
                             f"Node.js {facts.get('node')}, feeds resident in Node as ort.Tensors; driven from Python "
                             "over a pipe (one JSON line per call)")

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Prepared:
        tensors = []
        for leaf, a in zip(self.manifest.inputs, arrays):
            if leaf.param is None:
                continue
            if a.dtype.name not in JS_TYPES:
                raise RunError(leaf_message("Input", leaf.name, a.dtype.name, "a dtype onnxruntime-node has a tensor "
                               f"type for ({', '.join(JS_TYPES)})"), backend="onnx-node", category="unsupported-dtype")
            tensors.append((str(leaf.param), a))
        try:
            return Prepared(self.session.feed(tensors))
        except Exception as exc:
            raise node_error(exc, self.directory, "moving the inputs into node") from exc

    def _run_impl(self, prepared: Prepared) -> None:
        import time

        t0 = time.perf_counter_ns()
        try:
            self.node_ns.append(self.session.run(prepared.feed_id))
        except Exception as exc:
            raise node_error(exc, self.directory, "session.run") from exc
        self.round_trip_ns.append(time.perf_counter_ns() - t0)

    def _fetch_impl(self, prepared: Prepared) -> Sequence[Any]:
        try:
            outputs = dict(self.session.fetch(prepared.feed_id))
        except Exception as exc:
            raise node_error(exc, self.directory, "session.run") from exc
        return [outputs[str(leaf.param)] for leaf in self.manifest.outputs]

    def time_own_calls(self, prepared: Prepared, warmup: int, min_calls: int, max_calls: int,
                       seconds: float) -> np.ndarray:
        """Nanoseconds per session.run timed inside Node, with the harness's warm-up and stopping rule."""
        self._check_open()
        try:
            return self.session.timed(prepared.feed_id, warmup, min_calls, max_calls, seconds)
        except Exception as exc:
            raise node_error(exc, self.directory, "timing session.run in node") from exc

    def _close_impl(self) -> None:
        self.session.close()

    def _describe_impl(self) -> dict[str, Any]:
        node = np.asarray(self.node_ns, dtype=np.float64) / 1e6
        trips = np.asarray(self.round_trip_ns, dtype=np.float64) / 1e6
        return {**self.facts, "intra_op_threads": self.options.thread_count, "node_ms_p50": float(np.median(node)) if node.size else None,
                "round_trip_ms_p50": float(np.median(trips)) if trips.size else None, "timed_in_node": True,
                "timing": "the row's latency is session.run timed inside Node by process.hrtime (what a Node.js "
                          "server pays); round_trip_ms_p50 is the test rig's Python -> pipe -> Node -> Python time"}


def node_error(exc: Exception, directory, what: str) -> RunError:
    """Node's failure as one typed line."""
    text = " ".join(str(exc).split())[:600]
    return RunError(f"Artifact '{directory}' | onnxruntime-node failed during {what}: {text}", backend="onnx-node",
                    category="run-failed")
