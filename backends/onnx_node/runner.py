"""The onnx-node runner: an onnxruntime-node session in a `node` process, fed and fetched by leaf name.

What is timed: `time_own_calls` times session.run back to back inside Node (process.hrtime.bigint), the cost a
Node.js server calling onnxruntime-node pays; the harness's clock around `run_prepared` would add the pipe round
trip from Python to Node, which no deployed server pays. Both are recorded (`describe`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from multiexport.sdk import ResidentFeedRunner, RunError

from .process import JS_TYPES, NodeSession


class OnnxNodeRunner(ResidentFeedRunner):
    """Runs model.onnx through onnxruntime-node (its CPU execution provider) in a Node.js process."""

    runtime: ClassVar[str] = "onnxruntime-node"
    dtypes: ClassVar[tuple[str, ...]] = tuple(JS_TYPES)
    place: ClassVar[str] = "Node"
    # onnxruntime-node has no getter for a session's threads: the value set in its SessionOptions
    # (intraOpNumThreads, inter-op 1, sequential execution) is what is reported, as LiteRT does.
    threads_key = "intra_op_threads"

    def __init__(self, manifest, directory, options, session: NodeSession, facts: dict[str, Any]):
        super().__init__(manifest, directory, options, session, facts)
        self.calling_path = (f"onnxruntime-node {facts.get('runtime_version')} InferenceSession.run (cpu EP) in "
                             f"Node.js {facts.get('node')}, feeds resident in Node as ort.Tensors; driven from Python "
                             "over a pipe (one JSON line per call)")

    def error(self, exc: Exception, what: str) -> RunError:
        return node_error(exc, self.directory, what)

    def _describe_impl(self) -> dict[str, Any]:
        node = np.asarray(self.run_results, dtype=np.float64) / 1e6  # session.run returns Node's own ns per call
        return {**self.facts, "intra_op_threads": self.options.thread_count, "node_ms_p50": float(np.median(node)) if node.size else None,
                "round_trip_ms_p50": self.round_trip_ms_p50(), "timed_in_node": True,
                "timing": "the row's latency is session.run timed inside Node by process.hrtime (what a Node.js "
                          "server pays); round_trip_ms_p50 is the test rig's Python -> pipe -> Node -> Python time"}


def node_error(exc: Exception, directory, what: str) -> RunError:
    """Node's failure as one typed line."""
    text = " ".join(str(exc).split())[:600]
    return RunError(f"Artifact '{directory}' | onnxruntime-node failed during {what}: {text}", backend="onnx-node",
                    category="run-failed")
