"""OpenVINO's native consumer: `ov_run` (csrc/ov_run.c) on OpenVINO's C API, how it is built, and the section it
reads; also the C++ API's flags a user's own program needs (examples/cpp/batch_openvino.cpp)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from multiexport.sdk import (
    NativeBuildError,
    NativeConsumer,
    Recipe,
    Request,
    UsageError,
    bound_section,
    package_dir,
    ports,
)

from .runner import NUM_STREAMS, PERFORMANCE_HINT

CONSUMER = "openvino_c_api"  # the section's consumer id (manifest.schema.json)
SOURCE = Path(__file__).resolve().parent / "csrc" / "ov_run.c"  # package data: a wheel carries it
# What ov_run compiles with: the Python runner's configuration (runner.py `config`) less the threads, which the
# caller chooses. Fixed, so a manifest cannot ask the consumer for bf16 math.
OPENVINO_PROPERTIES = {"PERFORMANCE_HINT": PERFORMANCE_HINT, "NUM_STREAMS": NUM_STREAMS, "INFERENCE_PRECISION_HINT": "f32"}


def openvino_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                     output_params: Sequence[str | None], *, model: str,
                     properties: Mapping[str, str]) -> dict[str, Any]:
    """The section of an OpenVINO artifact for an OpenVINO C API consumer (csrc/ov_run.c).

    params / output_params: each leaf's port name in the model (None: an input the model does not take).
    properties: the compile_model properties the Python runner uses (threads are the caller's choice).
    """
    return bound_section(CONSUMER, inputs, params, outputs, output_params, "tensor", model=model, device="CPU",
                         properties=dict(properties))


def find_openvino() -> tuple[Path, Path]:
    """(include dir, libopenvino_c) of the openvino wheel's C API."""
    ov = package_dir("openvino")
    if ov is None:
        raise NativeBuildError("no openvino: the OpenVINO C API consumer links the openvino wheel's libopenvino_c; "
                               "pip install 'multiexport[openvino]'")
    header = ov / "include" / "openvino" / "c" / "openvino.h"
    libs = sorted((ov / "libs").glob("libopenvino_c.so*"))
    if not header.is_file() or not libs:
        raise NativeBuildError(f"openvino at {ov} | no include/openvino/c/openvino.h or libs/libopenvino_c.so*: this "
                               "wheel lacks the C API")
    return ov / "include", libs[0]


def find_openvino_cpp() -> tuple[Path, Path]:
    """(include dir, libopenvino) of the openvino wheel's C++ API, for a user's own C++ program
    (examples/cpp/batch_openvino.cpp); the wheel ships libopenvino.so.<version> without the plain name."""
    include, _ = find_openvino()
    libs = sorted((include.parent / "libs").glob("libopenvino.so*"))
    if not (include / "openvino" / "openvino.hpp").is_file() or not libs:
        raise NativeBuildError(f"openvino at {include.parent} | no include/openvino/openvino.hpp or libs/libopenvino.so*: "
                               "this wheel lacks the C++ API")
    return include, libs[0]


@dataclass(frozen=True)
class OpenVINOConsumer(NativeConsumer):
    """ov_run: the section is recomputed from the manifest's model, ports and leaves (the tamper check), and a
    bundle carries the plugins and frontend OpenVINO dlopens."""

    consumer: str = CONSUMER
    program: str = "ov_run"
    mismatch: str = "model, ports and leaves give: refusing to run a configuration the export did not write"
    load_loop: bool = True  # ov_run --load-lanes: the scenarios of `multiexport load` in C (common/mx_load.h)

    def expected(self, manifest: Any, native: Mapping[str, Any]) -> dict[str, Any]:
        return openvino_section(manifest.inputs, ports(manifest.inputs), manifest.outputs, ports(manifest.outputs),
                                model=manifest.files.get("model", ""),
                                properties=OPENVINO_PROPERTIES)

    def recipe(self) -> Recipe:
        """C99 linked with the openvino wheel's `libopenvino_c`, with an rpath to the wheel's `openvino/libs`, and
        -pthread for the load loop's lanes."""
        include, lib = find_openvino()
        return Recipe("c", SOURCE, ("-std=c99", f"-I{include}", f"-l:{lib.name}", f"-L{lib.parent}",
                                    f"-Wl,-rpath,{lib.parent}", "-pthread"), (include / "openvino" / "c" / "openvino.h", lib))

    def user_options(self) -> Mapping[str, str]:
        return {"openvino-cflags": "include flags for a C++ program on OpenVINO's C++ API: the shared C sources, "
                                   "openvino.hpp",
                "openvino-libs": "link flags for it: the openvino wheel's libopenvino, with an rpath to the wheel's libs"}

    def user_answer(self, option: str, common: Path, device: str) -> str:
        if option == "openvino-cflags":
            return f"-I{common} -I{find_openvino_cpp()[0]}"
        if option == "openvino-libs":
            library = find_openvino_cpp()[1]
            return f"{library} -Wl,-rpath,{library.parent}"
        return super().user_answer(option, common, device)

    def bundle_runtime(self, request: Request) -> list[Path]:
        """What OpenVINO loads at run time for ov_run, measured under LD_DEBUG=files (OpenVINO 2026.4): the device
        plugin of native.device, the auto-batching plugin (compile_model consults it), the frontend of the model's
        format and TBB's dlopened allocator and binding (libtbbbind needs libhwloc, which ldd then finds)."""
        libs = (package_dir("openvino") or Path("openvino")) / "libs"
        device = str(request.native.get("device", "CPU"))
        plugins = {"CPU": "libopenvino_intel_cpu_plugin.so"}
        if device not in plugins:
            raise UsageError(f"OpenVINO device '{device}' | cannot be bundled, expected one of {', '.join(plugins)}")
        frontends = {".onnx": "onnx", ".xml": "ir", ".pb": "tensorflow", ".tflite": "tensorflow_lite",
                     ".pdmodel": "paddle"}
        suffix = Path(str(request.native.get("model", ""))).suffix
        if suffix not in frontends:
            raise UsageError(f"OpenVINO model '{request.native.get('model')}' | no frontend known for {suffix!r}, "
                             f"expected one of {', '.join(frontends)}")
        wanted = [plugins[device], "libopenvino_auto_batch_plugin.so", f"libopenvino_{frontends[suffix]}_frontend.so.*",
                  "libtbbmalloc.so.*", "libtbbbind_2_5.so.*"]
        found = []
        for pattern in wanted:
            matches = sorted(libs.glob(pattern))
            if not matches:
                raise NativeBuildError(f"OpenVINO runtime file '{pattern}' | not found in {libs}, expected the "
                                       "openvino wheel's")
            found.append(matches[0])
        return found
