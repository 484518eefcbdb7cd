"""ONNX's native consumer: `ort_run` (csrc/ort_run.c) on ONNX Runtime's C API, how it is built, and the section it
reads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from multiexport.sdk import NativeBuildError, NativeConsumer, Recipe, Request, bound_section, package_dir, ports

CONSUMER = "onnxruntime_c_api"  # the section's consumer id (manifest.schema.json)
SOURCES = Path(__file__).resolve().parent / "csrc"  # package data: a wheel carries them
ORT_DECLARATION = "ort_api.h"  # multiexport's declaration of the ORT C API that ort_run calls
ORT_HEADER_ENV, ORT_LIBRARY_ENV = "MULTIEXPORT_ORT_INCLUDE", "MULTIEXPORT_ORT_LIBRARY"
LIBRARY_DEFINE = "MX_ORT_LIBRARY"  # the libonnxruntime ort_run dlopens, compiled in as a string
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


def find_onnxruntime() -> tuple[Path | None, Path]:
    """(directory of ORT's own onnxruntime_c_api.h or None: ort_api.h then declares the API, libonnxruntime
    to dlopen). $MULTIEXPORT_ORT_INCLUDE / $MULTIEXPORT_ORT_LIBRARY, when set, must name what they say: no
    silent fallback."""
    include = None
    if os.environ.get(ORT_HEADER_ENV):
        include = Path(os.environ[ORT_HEADER_ENV]).expanduser().resolve()
        if not (include / "onnxruntime_c_api.h").is_file():
            raise NativeBuildError(f"${ORT_HEADER_ENV} '{include}' | holds no onnxruntime_c_api.h, expected the "
                                   "directory that does (the include/ of ONNX Runtime's release package)")
    if os.environ.get(ORT_LIBRARY_ENV):
        library = Path(os.environ[ORT_LIBRARY_ENV]).expanduser().resolve()
        if not library.is_file():
            raise NativeBuildError(f"${ORT_LIBRARY_ENV} '{library}' | no such file, expected libonnxruntime.so")
    else:
        capi = package_dir("onnxruntime")
        found = sorted((capi / "capi").glob("libonnxruntime.so.1*")) if capi else []
        if not found:
            raise NativeBuildError("no libonnxruntime: the ONNX Runtime C API consumer dlopens the onnxruntime wheel's "
                                   "capi/libonnxruntime.so.1.*; pip install 'multiexport[onnx]', or name one with "
                                   f"${ORT_LIBRARY_ENV}")
        library = found[-1]
    if any(c in str(library) for c in '"\\\n'):
        raise NativeBuildError(f"libonnxruntime '{library}' | a path with a quote, backslash or newline, expected a "
                               "plain path (it is compiled into the program as a string)")
    return include, library


@dataclass(frozen=True)
class OrtConsumer(NativeConsumer):
    """ort_run: the section is recomputed from the manifest (the tamper check); a bundle carries the
    libonnxruntime ort_run dlopens."""

    consumer: str = CONSUMER
    program: str = "ort_run"
    mismatch: str = "model, input and output names and leaves give: refusing to run a session the export did not write"
    load_loop: bool = True  # ort_run --load-lanes: the scenarios of `multiexport load` in C (common/mx_load.h)

    def expected(self, manifest: Any, native: Mapping[str, Any]) -> dict[str, Any]:
        return onnx_section(manifest.inputs, ports(manifest.inputs), manifest.outputs, ports(manifest.outputs),
                            model=manifest.files.get("model", ""),
                            session_options=ONNX_SESSION_OPTIONS)

    def recipe(self) -> Recipe:
        """C11 on our declaration `ort_api.h` (no package here ships ORT's headers), or on ORT's own
        `onnxruntime_c_api.h` from $MULTIEXPORT_ORT_INCLUDE. The library is dlopened by absolute path, compiled in:
        $MULTIEXPORT_ORT_LIBRARY, else the onnxruntime wheel's `capi/libonnxruntime.so.1.*` (which the wheel ships
        without the `libonnxruntime.so.1` name its soname asks for, so it cannot be linked and found by soname)."""
        include, library = find_onnxruntime()
        real = (f"-I{include}", "-DMX_ORT_REAL_HEADER") if include else ()
        headers = (SOURCES / ORT_DECLARATION, *([include / "onnxruntime_c_api.h"] if include else []))
        flags = ("-std=c11", *real, f'-D{LIBRARY_DEFINE}="{library}"', "-ldl", "-pthread")  # pthread: the load loop
        return Recipe("c", SOURCES / "ort_run.c", flags,
                      (*headers, library), dlopened=(LIBRARY_DEFINE,))

    def bundle_runtime(self, request: Request) -> list[Path]:
        """The libonnxruntime ort_run dlopens (the bundled build names it by file name: found through
        $ORIGIN/../lib)."""
        return [find_onnxruntime()[1]]
