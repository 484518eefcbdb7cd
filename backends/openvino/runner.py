"""The OpenVINO runner: one InferRequest of a CPU compiled model, inputs set once as shared-memory tensors."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import ArtifactError, RunError, Runner

PERFORMANCE_HINT = "LATENCY"
# One synchronous request, one stream: a string, as OpenVINO's properties are (the C API takes strings only), so
# format.compile_config and native.properties state it alike. Manifests written before said 1 (an int) in
# compile_config, which OpenVINOFacts still reads (its values are the properties as given).
NUM_STREAMS = "1"
# OpenVINO element types numpy cannot hold: passed as their bits (ov.Tensor(ndarray) refuses the ml_dtypes
# array, and `.data` of such a tensor is a numpy array of the same width holding the raw bits).
BITS = {"bf16": ("bfloat16", np.uint16), "f8e4m3": ("float8_e4m3fn", np.uint8), "f8e5m2": ("float8_e5m2", np.uint8)}
# OpenVINO element type name -> numpy / ml_dtypes dtype name.
DTYPES = {"f32": "float32", "f16": "float16", "f64": "float64", "i8": "int8", "i16": "int16", "i32": "int32",
          "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "boolean": "bool",
          **{k: v[0] for k, v in BITS.items()}}
_CONVERSION = re.compile(r"Conversion is failed for:\s*([^\n]+)")
_DTYPE = ("unsupported src_prc", "Unsupported data type", "ParameterMismatch", "since the model input tensor precision",
          "doesn't support precision", "Unsupported precision")


def import_openvino():
    """`openvino`, imported without its usage telemetry.

    `import openvino` (2026.4) sends a usage event unless the user opted out: openvino.tools.ovc's import
    builds openvino_telemetry's singleton with consent assumed when no consent file exists, and the event
    is sent from a thread that forks a multiprocessing child to post it. In a JAX process that fork trips
    JAX's "os.fork() was called ... will likely lead to a deadlock" RuntimeWarning, and a multiexport
    worker has no business posting anything. The singleton honours its own CI switch (`disable_in_ci`, on
    for this event), so CI=true is held only for the first import, in this process; the singleton then
    keeps consent off for the process.
    """
    import os
    import sys

    if "openvino" in sys.modules:
        import openvino

        return openvino
    saved = os.environ.get("CI")
    os.environ["CI"] = "true"
    try:
        import openvino
    finally:
        if saved is None:
            os.environ.pop("CI", None)
        else:
            os.environ["CI"] = saved
    return openvino


def telemetry_state() -> str:
    """Whether openvino_telemetry would send from this process ("off" when multiexport imported openvino)."""
    import sys

    module = sys.modules.get("openvino_telemetry.main")
    single = getattr(getattr(module, "Telemetry", None), "_SingletonMetaClass__single_instance", None) if module else None
    if single is None:
        return "not initialised"
    return "on" if getattr(single, "consent", False) else "off"


def dtype_name(element_type) -> str:
    """The numpy / ml_dtypes name of an OpenVINO element type (`<Type: 'float32'>` -> float32)."""
    name = element_type.get_type_name()
    return DTYPES.get(name, name)


def config(threads: int) -> dict[str, Any]:
    """The compile_model config every OpenVINO artifact is compiled with (one synchronous request)."""
    return {"PERFORMANCE_HINT": PERFORMANCE_HINT, "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": NUM_STREAMS,
            "INFERENCE_PRECISION_HINT": "f32"}


def write_ir(ov, model, out_dir: Path, replaced: Sequence[str], compress_to_fp16: bool):
    """Write `model` as OpenVINO's IR (model.xml/.bin) in place of the files `replaced` (the ONNX stage's), then
    read it back and compile it as the runner will, so an IR the CPU plugin cannot compile fails at export.
    Returns the IR as read back."""
    ov.save_model(model, str(out_dir / "model.xml"), compress_to_fp16=compress_to_fp16)
    for name in replaced:
        (out_dir / name).unlink()
    core = ov.Core()
    written = core.read_model(str(out_dir / "model.xml"))
    core.compile_model(written, "CPU", config(1))
    return written


def compiled(model_path: Path, threads: int, cache_dir: str = ""):
    """(core, compiled model, seconds read_model + compile_model took) for `model_path` on the CPU."""
    ov = import_openvino()
    core = ov.Core()
    if cache_dir:
        core.set_property({"CACHE_DIR": cache_dir})
    t0 = time.perf_counter()
    model = core.read_model(str(model_path))
    cm = core.compile_model(model, "CPU", config(threads))
    return core, model, cm, time.perf_counter() - t0


def properties(cm) -> dict[str, Any]:
    """What the compiled model reports it uses, read back after compiling."""
    def get(key):
        try:
            return cm.get_property(key)
        except RuntimeError:
            return None

    precision = get("INFERENCE_PRECISION_HINT")
    return {"inference_precision": precision.get_type_name() if hasattr(precision, "get_type_name") else str(precision),
            "inference_num_threads": get("INFERENCE_NUM_THREADS"), "num_streams": int(get("NUM_STREAMS") or 0),
            "performance_hint": str(get("PERFORMANCE_HINT")), "execution_mode": str(get("EXECUTION_MODE_HINT")),
            "enable_cpu_pinning": get("ENABLE_CPU_PINNING"), "loaded_from_cache": bool(get("LOADED_FROM_CACHE")),
            "optimal_number_of_infer_requests": get("OPTIMAL_NUMBER_OF_INFER_REQUESTS")}


def classify_text(text: str, model_path: Path | None = None) -> tuple[str, str] | None:
    """(category, reason) for OpenVINO's words about a model it cannot convert, compile or take; with the
    ONNX file at hand, an op it cannot convert is named with its ONNX node (OpenVINO names only the op type
    and the node's first output)."""
    failed = _CONVERSION.search(text)
    no_rule = _NO_RULE.search(text)
    if failed or no_rule or "OpConversionFailure" in text:
        op = failed.group(1).strip() if failed else no_rule.group(1).strip() if no_rule else "an op"
        why = next((m.group(1).strip() for pattern in (r"(Expected [^\n]+)", r"with a message: ([^\n]+)")
                    if (m := re.search(pattern, text))), "")
        where = _node_names(text, op, model_path)
        reason = f"OpenVINO's ONNX frontend cannot convert {op}{where}" + (f": {why[:300]}" if why else "")
        return ("unsupported-op", reason)
    if any(s in text for s in _DTYPE):
        return ("unsupported-dtype", f"OpenVINO's CPU plugin cannot take these element types: {' '.join(text.split())[:500]}")
    if "Unsupported operation" in text or "Not Implemented" in text or "is not supported" in text:
        return ("unsupported-op", f"OpenVINO's CPU plugin has no implementation: {' '.join(text.split())[:500]}")
    return None


# "While validating ONNX node '<Node(MaxPool): y>'": the op type and the node's first output.
_ONNX_NODE = re.compile(r"ONNX node '<Node\((?P<op>[\w.]+)\): (?P<output>[^>]*)>'")
_NO_RULE = re.compile(r"No conversion rule found for operations: ([^\n]+)")


def _node_names(text: str, op: str, model_path: Path | None) -> str:
    """` at node 'n' (output 'y')` for the node OpenVINO's message points at, read from the ONNX file."""
    found = _ONNX_NODE.search(text)
    output = found.group("output") if found else None
    op_type = found.group("op") if found else op.split("-")[0].split(",")[0].strip()
    names: list[str] = []
    if model_path is not None:
        try:
            import onnx

            graph = onnx.load(str(model_path), load_external_data=False).graph
            names = [n.name or f"#{i}" for i, n in enumerate(graph.node)
                     if (output in n.output if output else n.op_type == op_type)]
        except Exception:  # an unreadable file: the message keeps what OpenVINO said
            names = []
    if names:
        shown = ", ".join(f"'{n}'" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return f" at node{'s' if len(names) > 1 else ''} {shown}" + (f" (output '{output}')" if output else "")
    return f" at the node writing '{output}'" if output else ""


@dataclass
class Prepared:
    """One feed as OpenVINO tensors (CPU tensors share the numpy buffers), by input port."""

    tensors: list[tuple[Any, Any]]
    arrays: list[np.ndarray]  # keeps the shared buffers alive


class OpenVINORunner(Runner):
    """`InferRequest.infer()` on inputs set once with `set_tensor` (ov.Tensor over the numpy buffer).

    Measured by the prototype (interleaved, threads=1, p50 per call): transformer (17 inputs) 147 us
    against 353-587 us for the dict paths (`cm(dict)`, `req.infer(dict)`, with shared inputs/outputs),
    160 us for `start_async()+wait()`; mlp_dynamic b=8 27.6 us against 120-212 us. The dict paths also
    convert dtypes silently (int64 numpy into an i32 input wraps; float64 into f32 is accepted), where
    `set_tensor` refuses a tensor of another element type. Ports are looked up by leaf name
    (`cm.input(name)` / `cm.output(name)`), never `get_any_name()`, which after compiling can return an
    internal name. 0-d inputs stay 0-d (np.require, not np.ascontiguousarray). bfloat16 and float8 go
    through their bits both ways; outputs are copied out on fetch.
    """

    threads_key = "inference_num_threads"

    calling_path = ("openvino InferRequest.infer() on a CPU compiled model (PERFORMANCE_HINT=LATENCY, NUM_STREAMS=1); "
                    "inputs set once with set_tensor(cm.input(leaf), ov.Tensor(array, shared_memory=True)); outputs "
                    "read with get_tensor(cm.output(leaf)) on fetch")

    def __init__(self, manifest, directory, options, core, cm, facts: dict[str, Any]):
        super().__init__(manifest, directory, options)
        self.core, self.compiled_model = core, cm
        self.request = cm.create_infer_request()
        self.facts = facts
        self._inputs = [(leaf, cm.input(leaf.param)) for leaf in manifest.inputs if leaf.param is not None]
        self._outputs = [cm.output(leaf.param) for leaf in manifest.outputs]
        self._current: Prepared | None = None

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Prepared:
        ov = import_openvino()

        by_name = {leaf.name: a for leaf, a in zip(self.manifest.inputs, arrays)}
        prepared = Prepared([], [])
        for leaf, port in self._inputs:
            array = np.require(by_name[leaf.name], requirements=["C", "W"])  # 0-d stays 0-d; shared needs writable
            bits = BITS.get(port.get_element_type().get_type_name())
            try:
                if bits is not None:  # ov.Tensor(ml_dtypes array) raises "Unsupported data type"
                    tensor = ov.Tensor(port.get_element_type(), ov.Shape(list(array.shape)))
                    tensor.data.view(bits[1])[...] = array.view(bits[1])
                else:
                    tensor = ov.Tensor(array, shared_memory=True)
            except RuntimeError as exc:
                raise self._error(exc, f"input '{leaf.name}' ({leaf.dtype})") from exc
            prepared.tensors.append((port, tensor))
            prepared.arrays.append(array)
        self._apply(prepared)
        return prepared

    def _apply(self, prepared: Prepared) -> None:
        try:
            for port, tensor in prepared.tensors:
                self.request.set_tensor(port, tensor)  # strict: another element type is refused, never cast
        except RuntimeError as exc:
            raise self._error(exc, "the inputs") from exc
        self._current = prepared

    def _run_impl(self, prepared: Prepared) -> None:
        if self._current is not prepared:  # another feed was prepared since: put this one's tensors back
            self._apply(prepared)
        try:
            self.request.infer()
        except RuntimeError as exc:
            raise self._error(exc, "the call") from exc

    def _fetch_impl(self, prepared: Prepared) -> Sequence[Any]:
        self._run_impl(prepared)
        outputs = []
        for port in self._outputs:
            data = self.request.get_tensor(port).data
            bits = BITS.get(port.get_element_type().get_type_name())
            if bits is not None:  # .data is a uint/float16 array holding the bits: reinterpret, never convert
                import ml_dtypes

                data = data.view(bits[1]).view(getattr(ml_dtypes, bits[0]))
            outputs.append(np.array(data, copy=True))
        return outputs

    def _error(self, exc: Exception, what: str) -> RunError:
        text = " ".join(str(exc).split())
        known = classify_text(text)
        if known:
            return RunError(f"Artifact '{self.directory}' | OpenVINO failed on {what}: {known[1]}", backend="openvino",
                            category=known[0])
        return RunError(f"Artifact '{self.directory}' | OpenVINO failed on {what}: {type(exc).__name__}: {text[:800]}",
                        backend="openvino")

    def _describe_impl(self) -> dict[str, Any]:
        return dict(self.facts)

    def throughput_lanes(self, feed: Any, lanes: int) -> tuple[list[Any], dict[str, Any]]:
        """OpenVINO's throughput configuration (its benchmark_app `-hint throughput`): the model compiled again with
        PERFORMANCE_HINT=THROUGHPUT on the same threads, which chooses its streams, and one infer request per lane
        (lanes 0: the compiled model's OPTIMAL_NUMBER_OF_INFER_REQUESTS), each with the feed's tensors set once.
        Returns (one synchronous call per lane, the configuration as the compiled model reports it)."""
        prepared = self.prepare(feed)
        threads = self.options.thread_count
        throughput = {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": threads,
                      "INFERENCE_PRECISION_HINT": "f32"}
        cm = self.core.compile_model(self.core.read_model(str(self.manifest.path(self.directory, "model"))), "CPU",
                                     throughput)
        count = lanes or max(1, int(cm.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        calls = []
        for _ in range(count):
            request = cm.create_infer_request()
            for (leaf, _), (_, tensor) in zip(self._inputs, prepared.tensors):
                request.set_tensor(cm.input(leaf.param), tensor)
            calls.append(request.infer)
        reported = properties(cm)
        return calls, {"how": f"PERFORMANCE_HINT=THROUGHPUT, {count} infer request(s), one thread each calling "
                              "infer()", "lanes": count, **{k: reported[k] for k in (
                                  "performance_hint", "num_streams", "inference_num_threads",
                                  "optimal_number_of_infer_requests")}}


def check_ports(model, manifest, directory: Path) -> None:
    """Every parameter the manifest names is an input (output) port name of the model, and nothing more."""
    inputs = [set(p.get_names()) for p in model.inputs]
    outputs = [set(p.get_names()) for p in model.outputs]
    want_in = [leaf.param for leaf in manifest.inputs if leaf.param is not None]
    missing = [p for p in want_in if not any(p in names for names in inputs)]
    missing += [leaf.param for leaf in manifest.outputs if not any(leaf.param in names for names in outputs)]
    if missing or len(inputs) != len(want_in):
        raise ArtifactError(f"Artifact '{directory}' | {manifest.files.get('model')} has inputs "
                            f"{[sorted(n) for n in inputs]} and outputs {[sorted(n) for n in outputs]}, manifest expects "
                            f"{want_in} and {[leaf.param for leaf in manifest.outputs]}")
