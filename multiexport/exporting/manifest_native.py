"""The records of manifest.json's `native` section, as multiexport/native/csrc/README.md specifies it: one per
native consumer, its leaf, weight, platform-index and token entries, its static and per-platform modules.

The manifest holds the section as JSON (`Manifest.native`), checked as user input by
native_section.check_section and the consumer's own `check_fields`; these records declare its shape once, for the
generated JSON Schema (exporting.manifest_schema) that consumers in other languages validate with. A field a
consumer must have is listed in its record's `_REQUIRED` (the records share the base's defaults), `_CLOSED` names
nested objects that take no other key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Literal

from .manifest_records import Count, Dim, Dtype, JsonObject, JsonRule, Name, Positive, RelPath


@dataclass(frozen=True)
class NativeLeafEntry:
    """A leaf argument or result of the native program.

    kind: "leaf". leaf: the leaf's name. index: its position in the manifest's inputs (args) or outputs (results).
    file: file name in inputs/ or outputs/: never derived from the leaf's name. shape: its shape. dtype: its dtype.
    encoding: iree: passed as raw bytes (.bin), the shape and element type in the flag: a 0-d input, and bfloat16
        of a static shape.
    key: savedmodel: the signature key. tensor: the model's tensor name (onnx, openvino, litert) or position.
    """

    kind: Literal["leaf"]
    leaf: Name
    index: Count
    file: Annotated[str, JsonRule(pattern="^(input|output)[0-9]+\\.(npy|bin)$")]
    shape: list[Dim]
    dtype: Dtype
    encoding: Literal["raw"] | None = None
    key: str | None = None
    tensor: str | int | None = None


@dataclass(frozen=True)
class NativeWeightEntry:
    """A lifted weight the program passes after the leaves.

    kind: "weight". tensor: its name in the weights file. file: the weights file, relative to the artifact.
    shape: its shape. dtype: its dtype.
    """

    kind: Literal["weight"]
    tensor: str
    file: RelPath
    shape: list[Dim]
    dtype: Dtype


@dataclass(frozen=True)
class NativePlatformIndex:
    """The platform index a module lowered for several platforms takes first.

    kind: "platform_index". dtype: "int32". shape: [] (a scalar).
    """

    kind: Literal["platform_index"]
    dtype: Literal["int32"]
    shape: Annotated[list[int], JsonRule(maxItems=0)]


@dataclass(frozen=True)
class NativeToken:
    """An effect token the module threads through.

    kind: "token". effect: the effect it orders.
    """

    kind: Literal["token"]
    effect: str | None = None


NativeEntry = NativeLeafEntry | NativeWeightEntry | NativePlatformIndex | NativeToken


@dataclass(frozen=True)
class NativeSection:
    """What the format's native, Python-free consumer needs: multiexport/native/csrc/README.md.

    schema: "multiexport.native/1". consumer: which program reads it (one record per consumer below).
    args: the consumer's inputs in order. results: the consumer's outputs in order.
    symbolic_dims: the symbolic dimension names its shapes use.
    inputs_written: whether the export wrote the example value of every leaf argument to inputs/ under the
        names args[].file (false: no example values, or over 64 MiB); the native command reads them from there.
    """

    schema: Literal["multiexport.native/1"]
    consumer: str
    args: list[NativeEntry]
    results: list[NativeEntry]
    symbolic_dims: list[str]
    inputs_written: bool | None = None


@dataclass(frozen=True)
class StaticModule:
    """A module refined to static sizes (`native.static_modules[key]`, key "b=8").

    program: its file. sizes: symbol -> size. args, results: its own bindings (no platform index).
    """

    program: RelPath
    sizes: dict[str, Positive]
    args: list[NativeEntry]
    results: list[NativeEntry]


@dataclass(frozen=True)
class PlatformModule:
    """For a module lowered for several platforms: the program lowered for one platform alone (no platform-index
    argument, no case over platforms), which a native consumer of that platform runs instead of `program`.

    program: its file. platforms: the one platform. args, results: its bindings.
    """

    program: RelPath
    platforms: Annotated[list[str], JsonRule(minItems=1, maxItems=1)]
    args: list[NativeEntry]
    results: list[NativeEntry]


@dataclass(frozen=True)
class PjrtSection(NativeSection):
    """pjrt_c_api (xla): the StableHLO program compiled by a PJRT plugin.

    program: the StableHLO bytecode. format: "mlir". compile_options: the serialized CompileOptionsProto.
    platforms: the platforms the program was lowered for. compilable: whether a PJRT plugin compiles it as is.
    nr_devices: devices it runs on. static_modules: per-size refined modules. platform_modules: platform -> its
        single-platform program.
    """

    consumer: Literal["pjrt_c_api"]
    program: RelPath = ""
    format: Literal["mlir"] = "mlir"
    compile_options: RelPath = ""
    platforms: Annotated[list[str], JsonRule(minItems=1)] = dataclasses.field(default_factory=list)
    compilable: bool = True
    nr_devices: Positive | None = None
    static_modules: dict[str, StaticModule] | None = None
    platform_modules: dict[str, PlatformModule] | None = None
    _REQUIRED = ("program", "format", "compile_options", "platforms", "compilable")


@dataclass(frozen=True)
class TfSection(NativeSection):
    """tf_c_api (savedmodel): the SavedModel loaded by the TF C API.

    export_dir: ".", the artifact itself. tags: the MetaGraph's tags. signature: the signature it calls.
    """

    consumer: Literal["tf_c_api"]
    export_dir: Literal["."] = "."
    tags: list[str] = dataclasses.field(default_factory=list)
    signature: str = ""
    _REQUIRED = ("export_dir", "tags", "signature")


@dataclass(frozen=True)
class IreeTools:
    """The IREE tools the program's commands run (never a path: the tool of that name on the machine).

    run: "iree-run-module". benchmark: "iree-benchmark-module".
    """

    run: Literal["iree-run-module"] | None = None
    benchmark: Literal["iree-benchmark-module"] | None = None


@dataclass(frozen=True)
class IreeSection(NativeSection):
    """iree_tools (iree): the .vmfb run by IREE's own tools.

    tools: the tools. run_args: iree-run-module's arguments (its --device chosen by timing at export, so it
        varies per artifact). benchmark_args: iree-benchmark-module's.
    """

    consumer: Literal["iree_tools"]
    tools: IreeTools = IreeTools()
    run_args: list[str] = dataclasses.field(default_factory=list)
    benchmark_args: list[str] = dataclasses.field(default_factory=list)
    _REQUIRED = ("tools", "run_args", "benchmark_args")
    _CLOSED = ("tools",)


@dataclass(frozen=True)
class OpenVinoSection(NativeSection):
    """openvino_c_api (openvino): the IR compiled by OpenVINO's C API.

    model: the IR's .xml. device: the OpenVINO device. properties: compile properties, name -> value as a string.
    """

    consumer: Literal["openvino_c_api"]
    model: RelPath = ""
    device: str = ""
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    _REQUIRED = ("model", "device", "properties")


@dataclass(frozen=True)
class OrtSection(NativeSection):
    """onnxruntime_c_api (onnx): the model run by ONNX Runtime's C API.

    model: the .onnx file. provider: the execution provider. session_options: the session's options.
    """

    consumer: Literal["onnxruntime_c_api"]
    model: RelPath = ""
    provider: str = ""
    session_options: JsonObject = dataclasses.field(default_factory=dict)
    _REQUIRED = ("model", "provider", "session_options")


@dataclass(frozen=True)
class LiteRtSection(NativeSection):
    """litert_c_api (litert): the .tflite model run by the LiteRT C API.

    model: the .tflite file. signature: the signature it calls. accelerator: "cpu".
    """

    consumer: Literal["litert_c_api"]
    model: RelPath = ""
    signature: str = ""
    accelerator: Literal["cpu"] = "cpu"
    _REQUIRED = ("model", "signature", "accelerator")


NATIVE_SECTIONS: tuple[type[NativeSection], ...] = (PjrtSection, TfSection, IreeSection, OpenVinoSection,
                                                     OrtSection, LiteRtSection)
