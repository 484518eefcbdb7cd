"""ONNX's native consumer: `ort_run` (csrc/ort_run.c) on ONNX Runtime's C API, and the section it reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from multiexport.exporting.native_consumer import NativeConsumer, Request
from multiexport.exporting.native_section import bound_section, ports

CONSUMER = "onnxruntime_c_api"  # the section's consumer id (manifest.schema.json)
# The SessionOptions of every ONNX Runtime session here (runner.py `session_options` reads them from this table,
# and ort_run sets the same), less the intra-op threads, which the caller chooses.
# Names, not numbers: the program maps each to ONNX Runtime's documented enum value and refuses others.
ONNX_SESSION_OPTIONS: dict[str, Any] = {
    "graph_optimization_level": "ORT_ENABLE_ALL",
    "execution_mode": "ORT_SEQUENTIAL",
    "inter_op_threads": 1,
    # the thread pools spin after their work (ONNX Runtime's default, stated so it is read back)
    "config_entries": {"session.intra_op.allow_spinning": "1", "session.inter_op.allow_spinning": "1"},
}


def onnx_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                 output_params: Sequence[str | None], *, model: str,
                 session_options: Mapping[str, Any]) -> dict[str, Any]:
    """The section of an ONNX artifact for an ONNX Runtime C API consumer (csrc/ort_run.c).

    params / output_params: each leaf's value name in the ONNX graph (None: an input the graph does not
    take). session_options: what the Python runner sets (ONNX_SESSION_OPTIONS; threads are the caller's).
    """
    return bound_section(CONSUMER, inputs, params, outputs, output_params, "tensor", model=model,
                         provider="CPUExecutionProvider",
                         session_options={**session_options, "config_entries": dict(session_options["config_entries"])})


@dataclass(frozen=True)
class OrtConsumer(NativeConsumer):
    """ort_run: the section is recomputed from the manifest (the tamper check); a bundle carries the
    libonnxruntime ort_run dlopens."""

    consumer: str = CONSUMER
    program: str = "ort_run"
    mismatch: str = "model, input and output names and leaves give: refusing to run a session the export did not write"

    def expected(self, manifest: Any, native: Mapping[str, Any]) -> dict[str, Any]:
        return onnx_section(manifest.inputs, ports(manifest.inputs), manifest.outputs, ports(manifest.outputs),
                            model=manifest.files.get("model", ""),
                            session_options=ONNX_SESSION_OPTIONS)

    def bundle_runtime(self, request: Request) -> list[Path]:
        """The libonnxruntime ort_run dlopens (the bundled build names it by file name: found through
        $ORIGIN/../lib)."""
        from multiexport.native.build import find_onnxruntime

        return [find_onnxruntime()[1]]
