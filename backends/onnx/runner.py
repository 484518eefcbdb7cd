"""The ONNX Runtime runner: a session over model.onnx, inputs bound once through IO binding."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, cast

import numpy as np

from multiexport.sdk import ArtifactError, RunError, Runner

from .convert import first_lines
from .native import ONNX_SESSION_OPTIONS as fixed

# ONNX Runtime's session config keys for its thread pools' spinning (its default is "1": a worker spins
# after its work instead of sleeping, which cuts the wake-up latency of the next call at the cost of busy
# cores between calls). Set explicitly (ONNX_SESSION_OPTIONS) so the configuration is stated and read back
# into the results.
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def session_options(ort, threads: int):
    """The SessionOptions every ONNX Runtime session here gets, as ONNX Runtime documents for latency:
    every graph optimisation (ORT_ENABLE_ALL), `threads` intra-op threads, sequential execution with one
    inter-op thread (one op at a time, like every runtime here), spinning on. The values come from
    ONNX_SESSION_OPTIONS, the table the manifest's native section gives the C consumer (ort_run), so the
    two sessions cannot drift apart."""

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, fixed["graph_optimization_level"])
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = fixed["inter_op_threads"]
    options.execution_mode = getattr(ort.ExecutionMode, fixed["execution_mode"])
    for key, value in fixed["config_entries"].items():
        options.add_session_config_entry(key, value)
    return options


# ONNX Runtime's Python binding names an element type it cannot map to numpy by its ONNX number
# ("Numpy_type 14" is complex64): those are dtypes the runtime cannot take, not a broken run.
_DTYPE_FAILURE = ("Numpy_type", "not supported for", "Unsupported type", "type is not supported",
                  "only supported from non-string numpy arrays")


@dataclass
class Prepared:
    """Inputs as OrtValues on the device (CPU ones share the numpy buffers) and the binding that holds them."""

    values: dict[str, Any]
    binding: Any


class OnnxRunner(Runner):
    """Runs an ONNX Runtime session through IO binding.

    benchmarks/onnx_calling_paths.py measures `run` (numpy in, numpy out), `run_with_ort_values`
    and IO binding side by side: binding inputs once and leaving outputs in ORT's memory was the
    fastest (0.4x `run` per call on the MLP, 0.7-0.8x on the transformer and CNN), preallocating
    the outputs gained nothing more, and `run_with_ort_values` was the slowest (1.8-10x `run`: the
    cost is in ORT 1.32's Python wrapper around it, not in the C call). It is also what a C++ caller
    with a long-lived Ort::IoBinding does.
    """

    threads_key = "intra_op_threads"

    calling_path = ("onnxruntime InferenceSession.run_with_iobinding: inputs bound once as OrtValues on the "
                    "device, outputs left in ORT-allocated device memory (copied to numpy only on fetch)")

    def __init__(self, manifest, directory, options, session):
        super().__init__(manifest, directory, options)
        self.session = session
        self._ort_device = "cuda" if options.device == "gpu" else "cpu"

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Prepared:
        import onnxruntime as ort

        values: dict[str, Any] = {}
        for leaf, a in zip(self.manifest.inputs, arrays):
            if leaf.param is None:
                continue
            try:  # np.require keeps 0-d arrays 0-d (np.ascontiguousarray makes them shape (1,))
                # an ONNX value name: load checked the params against the session's input names
                values[cast(str, leaf.param)] = ort.OrtValue.ortvalue_from_numpy(np.require(a, requirements="C"), self._ort_device, 0)
            except Exception as exc:
                raise _dtype_or_run_error(exc, self.directory, f"input '{leaf.name}' ({leaf.dtype})") from exc
        binding = self.session.io_binding()
        for name, value in values.items():
            binding.bind_ortvalue_input(name, value)
        for leaf in self.manifest.outputs:
            binding.bind_output(leaf.param, self._ort_device, 0)
        return Prepared(values, binding)

    def _run_impl(self, prepared: Prepared) -> None:
        try:
            self.session.run_with_iobinding(prepared.binding)
        except Exception as exc:
            # A node of the graph failed: the converter wrote what this runtime cannot run (the same category
            # whether the parity check or the benchmark meets it first).
            named = NODE_FAILURE.search(str(exc))
            raise RunError(f"Artifact '{self.directory}' | {node_failure(exc)}", backend="onnx",
                           category="invalid-model" if named else "run-failed") from exc
        if self._ort_device != "cpu":
            prepared.binding.synchronize_outputs()

    def _fetch_impl(self, prepared: Prepared) -> Sequence[Any]:
        self._run_impl(prepared)
        try:
            return prepared.binding.copy_outputs_to_cpu()
        except Exception as exc:
            raise _dtype_or_run_error(exc, self.directory, "the outputs") from exc

    def throughput_lanes(self, feed: Any, lanes: int) -> tuple[list[Any], dict[str, Any]]:
        """ONNX Runtime's throughput configuration (its docs: concurrent Run calls on one session, which is
        thread-safe, with the intra-op threads divided between them): a second session over the same model with
        threads // lanes intra-op threads and spinning off (a spinning pool would take the cores the other
        requests need), one IO binding per lane (lanes 0: one per thread). Returns (one synchronous call per lane,
        the configuration as the session reports it)."""
        import onnxruntime as ort

        threads = self.options.thread_count
        count = lanes or threads
        options = session_options(ort, max(1, threads // count))
        for key in SPINNING:
            options.add_session_config_entry(key, "0")
        session = ort.InferenceSession(str(self.manifest.path(self.directory, "model")), options,
                                       providers=self.session.get_providers())
        calls = []
        for _ in range(count):
            prepared = self.prepare(feed)
            binding = session.io_binding()
            for name, value in prepared.values.items():
                binding.bind_ortvalue_input(name, value)
            for leaf in self.manifest.outputs:
                binding.bind_output(leaf.param, self._ort_device, 0)
            calls.append(lambda b=binding: session.run_with_iobinding(b))
        reported = session.get_session_options()
        return calls, {"how": f"one session, {count} concurrent run_with_iobinding calls (one IO binding each), "
                              "spinning off", "lanes": count, "intra_op_threads": reported.intra_op_num_threads,
                       "inter_op_threads": reported.inter_op_num_threads}

    def _describe_impl(self) -> dict[str, Any]:
        options = self.session.get_session_options()
        return {"providers": self.session.get_providers(), "intra_op_threads": options.intra_op_num_threads,
                "inter_op_threads": options.inter_op_num_threads,
                "graph_optimization_level": str(options.graph_optimization_level),
                "execution_mode": str(options.execution_mode),
                **{key.replace("session.", "").replace(".", "_"): options.get_session_config_entry(key) for key in SPINNING}}


# ONNX Runtime's words for a failing node: at run time, and when it builds a session.
NODE_FAILURE = re.compile(r"while running (?P<op>\w+) node\. Name:'(?P<node>[^']*)'"
                          r'|In Node, \("(?P<node2>[^"]*)", (?P<op2>\w+)'
                          r"|implementation for (?P<op3>\w+)\(\d+\) node with name '(?P<node3>[^']*)'")


def node_failure(exc: Exception) -> str:
    """ONNX Runtime's failure, naming the node and its op when the message does: `the graph fails in ONNX
    Runtime at node 'n_MaxPool_3' (MaxPool): <its status message>`."""
    text = f"{type(exc).__name__}: {first_lines(exc)}"
    found = NODE_FAILURE.search(str(exc))
    if not found:
        return f"ONNX Runtime failed: {text}"
    node = found.group("node") or found.group("node2") or found.group("node3") or ""
    op = found.group("op") or found.group("op2") or found.group("op3") or ""
    status = str(exc).split("Status Message:", 1)[-1] if "Status Message:" in str(exc) else text
    status = " ".join(status.split())[:600]
    return (f"the graph fails in ONNX Runtime at node '{node}' ({op}): {status}; the converter wrote a graph "
            "this runtime cannot run")


def _dtype_or_run_error(exc: Exception, directory: Path, what: str) -> RunError:
    text = f"{type(exc).__name__}: {first_lines(exc)}"
    if any(s in text for s in _DTYPE_FAILURE):
        return RunError(f"Artifact '{directory}' | ONNX Runtime's Python binding cannot carry {what}: {text}",
                        backend="onnx", category="unsupported-dtype")
    return RunError(f"Artifact '{directory}' | ONNX Runtime failed on {what}: {text}", backend="onnx")


def session_error(exc: Exception, manifest, directory: Path) -> Exception:
    """ONNX Runtime's refusal to build a session, typed: a broken file, or a kernel it lacks."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    reason = f"{type(exc).__name__}: {first_lines(exc)}"
    if isinstance(exc, (state.InvalidProtobuf, state.NoSuchFile, state.InvalidGraph)):
        return ArtifactError(f"Artifact '{directory}' | ONNX Runtime cannot load {manifest.files.get('model')}: {reason}")
    if isinstance(exc, state.NotImplemented):
        special = sorted({leaf.dtype for leaf in (*manifest.inputs, *manifest.outputs)
                          if leaf.dtype in ("bfloat16", "float16", "float64", "complex64", "complex128")
                          or leaf.dtype.startswith(("float8", "int4", "uint4"))})
        typed = " (" + ", ".join(special) + " tensors)" if special else ""
        return RunError(f"Artifact '{directory}' | ONNX Runtime has no kernel for this graph{typed} on this provider: "
                        f"{reason}", backend="onnx", category="unsupported-dtype" if special else "unsupported-op")
    return RunError(f"Artifact '{directory}' | ONNX Runtime cannot create a session: {reason}",
                    backend="onnx", category="session-failed")
