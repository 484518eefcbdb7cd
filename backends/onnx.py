"""ONNX through jax2onnx, run by ONNX Runtime.

The function converted is the signature's flat function of named leaves, so graph inputs are the
canonical leaf names (`foo.bar`) and graph outputs the output leaf names (`out.logits`); symbolic
dimensions stay named ONNX dims (`b`). jax2onnx keeps every positional input, read or not: the graph
itself says which inputs feed a node, and without `keep_unused` the others are removed, so `param`
is None exactly for the leaves the artifact does not take (as XLA prunes them).

The model is validated (onnx.checker full check, strict shape inference) in the staging directory
before the artifact is published; one whose protobuf would pass the 2 GiB limit keeps its tensors in
`model.onnx.data` beside it.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from multiexport.backend import (
    Availability,
    Backend,
    ExportOptions,
    Runner,
    base_versions,
    bindings,
    dist_version,
    utc_now,
)
from multiexport.errors import ArtifactError, ExportError, RunError
from multiexport.manifest import Manifest, current_umask
from multiexport.signature import Signature
from multiexport.weights import embedded, externalizes

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
# Opset 21 (ONNX 1.16, March 2024) is the newest opset ONNX released with IR version 10, the IR
# version jax2onnx writes whatever the opset (its "ORT-safe" choice): the pair stays consistent and
# older deployed runtimes accept it, and it still has Gelu (20) and LayerNormalization (17).
# jax2onnx's default, 23, belongs with IR 11 and only adds native Attention/RMSNormalization/
# RotaryEmbedding for flax.nnx and equinox layers: the example zoo converts to the same ops at both.
OPSET = 21
# Protobuf cannot serialize a message of 2 GiB or more: past this many bytes of tensors they go to
# model.onnx.data (64 MiB of headroom for the graph itself).
EXTERNAL_DATA_THRESHOLD_BYTES = 2**31 - 2**26

# Seconds jax2onnx's one-time plugin import took in this process (None until paid). It imports
# ~1,500 plugin modules whose examples compile ~74 XLA programs (DESIGN.md): ~10 s, paid once.
_FIRST_USE_SECONDS: float | None = None


def jax2onnx_first_use() -> tuple[float, float]:
    """(seconds this call spent importing jax2onnx and its plugins, seconds that cost in this process)."""
    global _FIRST_USE_SECONDS
    if _FIRST_USE_SECONDS is not None:
        return 0.0, _FIRST_USE_SECONDS
    t0 = time.perf_counter()
    import jax2onnx  # noqa: F401
    from jax2onnx.plugins.plugin_system import import_all_plugins

    import_all_plugins()  # what to_onnx does first; idempotent, so the conversion later skips it
    _FIRST_USE_SECONDS = time.perf_counter() - t0
    return _FIRST_USE_SECONDS, _FIRST_USE_SECONDS


class OnnxBackend(Backend):
    name = "onnx"
    requires = ("onnx", "onnx_ir", "onnxruntime", "jax2onnx")
    extra = "onnx"
    opset: int = OPSET
    # Above this many bytes of tensors they go to model.onnx.data; a test lowers it to force that path.
    external_data_threshold: int = EXTERNAL_DATA_THRESHOLD_BYTES
    # ONNX Runtime threads; None: intra = CPUs this process may use, inter = 1 (sequential execution).
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    def _export_impl(self, fn, signature: Signature, out_dir: Path, options: ExportOptions) -> Manifest:
        t0 = time.perf_counter()
        first_use, first_use_in_process = jax2onnx_first_use()
        model = self._convert(fn, signature)
        unread = _drop_unread_inputs(model, signature, options.keep_unused)
        model_bytes, external = self._save(model, out_dir, options.external_weights)
        _validate(out_dir / MODEL_FILE, self.name)
        export_seconds = time.perf_counter() - t0

        kept = {v.name for v in model.graph.inputs}
        used = [options.keep_unused or leaf.name not in unread for leaf in signature.inputs]
        params = [leaf.name if leaf.name in kept else None for leaf in signature.inputs]
        warnings = list(signature.warnings)
        if unread and options.keep_unused:
            warnings.append(f"keep_unused: the graph takes but never reads {', '.join(unread)}")
        if any(leaf.dtype == "bfloat16" for leaf in (*signature.inputs, *signature.outputs)):
            warnings.append("bfloat16 leaves: ONNX Runtime's CPU provider has no bfloat16 kernel for most ops "
                            "(Gemm, Einsum, ...), so this artifact may load only on a provider that has them")
        files = {"model": MODEL_FILE, **({"external_data": DATA_FILE} if external else {})}
        weights = ({"storage": "external", "file": DATA_FILE, "file_format": "ONNX external data",
                    "external_bytes": (out_dir / DATA_FILE).stat().st_size, "embedded_bytes": 0}
                   if external else embedded(signature))
        return Manifest(
            backend=self.name,
            target=signature.name,
            inputs=bindings(signature.inputs, used, params),
            outputs=bindings(signature.outputs, [True] * len(signature.outputs), [o.name for o in signature.outputs]),
            keep_unused=options.keep_unused,
            symbolic_dims=list(signature.symbolic_dims),
            files=files,
            versions={
                **base_versions(),
                **{d: dist_version(d) for d in ("jax", "jaxlib", "jax2onnx", "onnx", "onnx-ir", "onnxruntime")},
                "onnx_opset": str(model.opset_imports[""]),
                "onnx_ir_version": str(model.ir_version),
            },
            created=utc_now(),
            weights=weights,
            format={
                "weights": ("initializers of 1 KiB or more in model.onnx.data (ONNX external data, read by path "
                            "relative to model.onnx)" if external else "initializers inside model.onnx"),
                "opset": model.opset_imports[""],
                "ir_version": model.ir_version,
                "producer": f"{model.producer_name} {model.producer_version}".strip(),
                "graph_inputs": [v.name for v in model.graph.inputs],
                "graph_outputs": [v.name for v in model.graph.outputs],
                # Leaves the graph never reads: dropped from it, or kept as inputs under keep_unused.
                "unread_inputs": unread,
                "model_bytes": model_bytes,
                "external_data": external,
                "external_data_threshold_bytes": self.external_data_threshold,
                "validation": "onnx.checker.check_model(full_check=True) + strict shape inference with data propagation",
                "export_seconds": round(export_seconds, 3),
                # The one-time jax2onnx plugin import this export paid (0 when an earlier export in the
                # same process already had), and what it cost the process when it was paid.
                "jax2onnx_first_use_seconds": round(first_use, 3),
                "jax2onnx_first_use_seconds_in_process": round(first_use_in_process, 3),
                # The generic names the report reads for every backend.
                "one_time_setup_seconds": round(first_use, 3),
                "one_time_setup": "jax2onnx plugin import (once per process)",
            },
            warnings=warnings,
        )

    def _convert(self, fn, signature: Signature):
        """jax2onnx's IR model of the flat function, inputs named by leaf and outputs by output leaf."""
        import jax2onnx
        import onnx_ir.passes.common as passes

        try:
            # No input_names/output_names: jax2onnx cannot name one value twice (an input returned as
            # an output, an output returned twice), so _name_values renames after fixing those up.
            model = jax2onnx.to_onnx(signature.flat_function(fn), list(signature.specs),
                                     model_name=signature.name or "model", opset=self.opset, return_mode="ir")
        except Exception as exc:
            raise _conversion_error(exc, self.name) from exc
        # A clone: jax2onnx's IR still counts uses by nodes it discarded, and "which inputs feed a
        # node" must count only nodes in the graph (the clone shares the tensors, copies no data).
        model = model.clone()
        positional = _positional_inputs(model, signature)  # before OutputFixPass renames any of them
        passes.OutputFixPass()(model)  # Identity between an input returned as is, or a repeated output
        passes.RemoveUnusedNodesPass()(model)  # dead nodes and initializers, so "unread" means unread
        _name_values(model, positional, signature)
        return model

    def _save(self, model, out_dir: Path, policy: str = "auto") -> tuple[int, bool]:
        """Write model.onnx, with its tensors in model.onnx.data when they pass the threshold.

        policy (ExportOptions.external_weights): "auto" moves them once they reach AUTO_MIN_BYTES (16 MiB),
        as every format does, and always past the threshold (protobuf's 2 GiB limit): measured on the
        1.34 GB LM, one protobuf made the export peak at 4.7x the weights and take 65 s, external data
        1.4x and 21 s; "always" moves every tensor of 1 KiB or more whatever the total; "never" keeps
        them in model.onnx and fails with a size-limit error when they cannot fit.

        onnx_ir writes the data file itself: a model past 2 GiB is never built as one protobuf
        message, which Python's protobuf cannot hold or serialize.
        """
        import onnx_ir as ir
        import onnx_ir.passes.common as passes

        tensor_bytes = _tensor_bytes(model)
        external = externalizes(policy, tensor_bytes) or tensor_bytes > self.external_data_threshold
        if external and policy == "never":
            raise ExportError(
                f"Backend '{self.name}' | '{model.graph.name or 'model'}' | got {tensor_bytes / 2**30:.2f} GiB of tensors "
                f"with external weights 'never', expected at most {self.external_data_threshold / 2**30:.2f} GiB in one "
                "protobuf (ONNX's 2 GB limit): use external weights 'auto' or 'always'",
                backend=self.name, category="size-limit")
        if external:  # tensors inside Constant nodes become initializers, so they move to the data file too
            passes.LiftConstantsToInitializersPass()(model)
        ir.save(model, out_dir / MODEL_FILE, external_data=DATA_FILE if external else None, size_threshold_bytes=1024)
        written = [out_dir / MODEL_FILE] + ([out_dir / DATA_FILE] if external else [])
        for path in written:  # the data file comes from a 0600 temporary file; an artifact is meant to be shipped
            os.chmod(path, 0o666 & ~current_umask())
        return sum(p.stat().st_size for p in written), external

    def _gpu_status_impl(self) -> Availability:
        import onnxruntime as ort

        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            return Availability(False, f"ONNX Runtime {ort.__version__} has no CUDAExecutionProvider "
                                       f"({', '.join(providers)}): install onnxruntime-gpu ('multiexport[gpu]')")
        return Availability(True, f"ONNX Runtime {ort.__version__} with CUDAExecutionProvider")

    def _load_impl(self, manifest: Manifest, directory: Path, device: str) -> Runner:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self.intra_op_threads or _usable_cpus()
        options.inter_op_num_threads = self.inter_op_threads or 1
        providers = ["CPUExecutionProvider"]
        if device == "gpu":
            available = ort.get_available_providers()
            if "CUDAExecutionProvider" not in available:
                raise RunError(f"Device 'gpu' | ONNX Runtime {ort.__version__} has providers {', '.join(available)}, "
                               "expected CUDAExecutionProvider (install onnxruntime-gpu)")
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        try:
            session = ort.InferenceSession(str(directory / manifest.files["model"]), options, providers=providers)
        except Exception as exc:
            raise _session_error(exc, manifest, directory) from exc
        if device == "gpu" and session.get_providers()[0] != "CUDAExecutionProvider":
            # ORT falls back to CPU when the CUDA libraries fail to load; never time that as "gpu".
            raise RunError(f"Device 'gpu' | session runs on {', '.join(session.get_providers())}, "
                           "expected CUDAExecutionProvider (see ONNX Runtime's log for the CUDA load failure)")
        want_in = [leaf.param for leaf in manifest.inputs if leaf.param is not None]
        want_out = [leaf.param for leaf in manifest.outputs]
        got_in = [i.name for i in session.get_inputs()]
        got_out = [o.name for o in session.get_outputs()]
        if got_in != want_in or got_out != want_out:
            raise ArtifactError(f"Artifact '{directory}' | {MODEL_FILE} has inputs {got_in} and outputs {got_out}, "
                                f"manifest expects {want_in} and {want_out}")
        return OnnxRunner(manifest, directory, device, session)


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
    cost is in ORT 1.32's Python wrapper around it, not in the C call). It is also what a C++ caller with a long-lived Ort::IoBinding does.
    """

    calling_path = ("onnxruntime InferenceSession.run_with_iobinding: inputs bound once as OrtValues on the "
                    "device, outputs left in ORT-allocated device memory (copied to numpy only on fetch)")

    def __init__(self, manifest, directory, device, session):
        super().__init__(manifest, directory, device)
        self.session = session
        options = session.get_session_options()
        self.intra_op_threads = options.intra_op_num_threads
        self.inter_op_threads = options.inter_op_num_threads
        self.graph_optimization_level = str(options.graph_optimization_level)
        self.providers = session.get_providers()
        self._ort_device = "cuda" if device == "gpu" else "cpu"

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Prepared:
        import onnxruntime as ort

        values = {
            leaf.param: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), self._ort_device, 0)
            for leaf, a in zip(self.manifest.inputs, arrays) if leaf.param is not None
        }
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
            raise RunError(f"Artifact '{self.directory}' | ONNX Runtime failed: {type(exc).__name__}: {exc}") from exc
        if self._ort_device != "cpu":
            prepared.binding.synchronize_outputs()

    def _fetch_impl(self, prepared: Prepared) -> Sequence[Any]:
        self._run_impl(prepared)
        return prepared.binding.copy_outputs_to_cpu()


def _drop_unread_inputs(model, signature: Signature, keep_unused: bool) -> list[str]:
    """Input leaves no node reads, in leaf order; removed from the graph unless keep_unused.

    A value's uses include nodes of subgraphs (If/Loop/Scan bodies) that read it from outer scope.
    """
    unread = [v.name for v in model.graph.inputs if not v.uses() and not v.is_graph_output()]
    if not keep_unused:
        for value in [v for v in model.graph.inputs if v.name in unread]:
            model.graph.inputs.remove(value)
    order = {leaf.name: i for i, leaf in enumerate(signature.inputs)}
    return sorted(unread, key=order.__getitem__)


def _tensor_bytes(model) -> int:
    """Bytes of every tensor the model file would hold: initializers and tensor attributes, subgraphs included."""
    import onnx_ir as ir

    graphs = {id(model.graph): model.graph}  # the iterator enters the main graph too: count each graph once
    total = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph, enter_graph=lambda g: graphs.setdefault(id(g), g)):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.TENSOR:
                total += attr.value.nbytes
            elif attr.type == ir.AttributeType.TENSORS:
                total += sum(t.nbytes for t in attr.value)
    for graph in graphs.values():
        total += sum(v.const_value.nbytes for v in graph.initializers.values() if v.const_value is not None)
    return total


def _positional_inputs(model, signature: Signature) -> list:
    """jax2onnx's graph inputs in_0..in_N, one per input leaf, in leaf order."""
    inputs = list(model.graph.inputs)
    by_index = {int(m.group(1)): v for v in inputs if (m := re.fullmatch(r"in_(\d+)", v.name or ""))}
    if len(inputs) != len(signature.inputs) or sorted(by_index) != list(range(len(inputs))):
        raise ExportError(f"Backend 'onnx' | jax2onnx produced graph inputs {[v.name for v in inputs]}, "
                          f"expected in_0..in_{len(signature.inputs) - 1} for {len(signature.inputs)} leaves",
                          backend="onnx", category="converter-error")
    return [by_index[i] for i in range(len(inputs))]


def _name_values(model, positional: list, signature: Signature) -> None:
    """Rename the positional inputs to leaf names and the graph outputs to output leaf names.

    Renaming a value renames every reference to it (nodes, subgraphs); an internal value that
    already holds a target name is renamed out of the way first.
    """
    import onnx_ir as ir

    graph = model.graph
    if len(graph.outputs) != len(signature.outputs):
        raise ExportError(f"Backend 'onnx' | jax2onnx produced {len(graph.outputs)} graph outputs, expected "
                          f"{len(signature.outputs)} ({', '.join(o.name for o in signature.outputs)})",
                          backend="onnx", category="converter-error")
    values = list(positional) + list(graph.outputs)
    targets = [leaf.name for leaf in signature.inputs] + [leaf.name for leaf in signature.outputs]
    if len(set(targets)) != len(targets):
        clash = sorted({t for t in targets if targets.count(t) > 1})
        raise ExportError(f"Backend 'onnx' | leaf names {clash} name both an input and an output, expected "
                          "distinct ONNX value names", backend="onnx", category="unsupported-signature")
    existing = ir.convenience.create_value_mapping(graph)  # subgraphs included
    renamed, wanted = {id(v) for v in values}, set(targets)
    blockers = [v for name, v in existing.items() if name in wanted and id(v) not in renamed]
    taken = set(existing) | wanted
    if blockers:
        ir.convenience.rename_values(blockers, [_fresh_name(v.name, taken) for v in blockers])
    ir.convenience.rename_values(values, targets)


def _fresh_name(name: str, taken: set[str]) -> str:
    n = 0
    while f"{name}__{n}" in taken:
        n += 1
    taken.add(f"{name}__{n}")
    return f"{name}__{n}"


def _validate(path: Path, backend: str) -> None:
    """onnx.checker full check and strict shape inference on the written files (external data included)."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
        with tempfile.TemporaryDirectory() as tmp:  # infer_shapes_path writes its result; we keep only the verdict
            onnx.shape_inference.infer_shapes_path(str(path), os.path.join(tmp, "inferred.onnx"),
                                                   check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        raise ExportError(f"Backend '{backend}' | {path.name} fails ONNX validation: {type(exc).__name__}: "
                          f"{_first_lines(exc)}", backend=backend, category="invalid-model") from exc


def _conversion_error(exc: Exception, backend: str) -> ExportError:
    """jax2onnx's failure as an ExportError: "unsupported-op" when an op has no (working) plugin."""
    plugin = re.search(r"\b(\w+Plugin)\b", str(exc))
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    plugin_file = next((f for f in reversed(frames) if f"jax2onnx{os.sep}plugins{os.sep}" in f), None)
    if isinstance(exc, NotImplementedError) or plugin or plugin_file:
        where = plugin.group(1) if plugin else (Path(plugin_file).stem if plugin_file else "")
        what = f"jax2onnx's {where} plugin" if where else "jax2onnx"
        hint = ""
        if isinstance(exc, TypeError) and "get_monkey_patch.<locals>.patched()" in str(exc):
            # e.g. flax.linen.avg_pool(x, (2, 2)): the plugin's stand-in takes window_shape by keyword only
            hint = ("; jax2onnx swaps the library function for a stand-in with a narrower signature, "
                    "so passing its arguments by keyword may avoid this")
        return ExportError(f"Backend '{backend}' | {what} cannot convert the function: {type(exc).__name__}: "
                           f"{_first_lines(exc)}{hint}", backend=backend, category="unsupported-op")
    return ExportError(f"Backend '{backend}' | jax2onnx failed: {type(exc).__name__}: {_first_lines(exc)}",
                       backend=backend, category="converter-error")


def _session_error(exc: Exception, manifest: Manifest, directory: Path) -> Exception:
    """ONNX Runtime's refusal to build a session, typed: a broken file, or a kernel it lacks."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    reason = f"{type(exc).__name__}: {_first_lines(exc)}"
    if isinstance(exc, (state.InvalidProtobuf, state.NoSuchFile, state.InvalidGraph)):
        return ArtifactError(f"Artifact '{directory}' | ONNX Runtime cannot load {manifest.files['model']}: {reason}")
    if isinstance(exc, state.NotImplemented):
        bf16 = any(leaf.dtype == "bfloat16" for leaf in (*manifest.inputs, *manifest.outputs))
        return RunError(f"Artifact '{directory}' | ONNX Runtime has no kernel for this graph"
                        f"{' (bfloat16 tensors)' if bf16 else ''} on this provider: {reason}",
                        backend="onnx", category="unsupported-dtype" if bf16 else "unsupported-op")
    return RunError(f"Artifact '{directory}' | ONNX Runtime cannot create a session: {reason}",
                    backend="onnx", category="session-failed")


def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), not all the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _first_lines(exc: Exception, n: int = 3) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:n])


