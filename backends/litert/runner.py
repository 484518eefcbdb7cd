"""The LiteRT runner: ai_edge_litert's Interpreter, inputs set once at the signature's tensor indices."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import RunError, Runner, report_child_peak

from .convert import SCATTER_REGION_OPS, SIGNATURE_KEY, scatter_regions

# The interpreter's words for a model it converted but cannot run (ai_edge_litert 2.3.0).
FLEX = "Select TensorFlow op"
_PREPARE = re.compile(r"Node number \d+ \((\w+)\) failed to prepare")


@dataclass
class Prepared:
    """One feed as the interpreter takes it: per signature input, its tensor index and C-contiguous array."""

    arrays: list[tuple[int, np.ndarray]]
    shapes: dict[int, list[int]]


class LiteRTRunner(Runner):
    """ai_edge_litert `Interpreter.invoke()` with the inputs set once, in `prepare`.

    Measured by the prototype (interleaved rounds in one process, num_threads=1, p50 per call; raw
    invoke vs the public signature runner `r(**kwargs)`): seed 0.9 vs 6.2 us, mlp_dynamic b=1 5.6 vs
    20.4 us, b=8 11.8 vs 26.8 us, transformer 67-74 vs 112 us. The signature runner resizes, allocates,
    sets every input and copies every output on each call; `CompiledModel.run_by_name` (the LiteRT 2.x
    API) was in between (81 us on the transformer) and aborts the process after a resize. So `prepare`
    resizes symbolic inputs (`resize_tensor_input(strict=True)` + `allocate_tensors()` when a shape
    changes) and `set_tensor`s each input at the index the serving_default signature maps its alias to
    (never by position: the raw input order is neither leaf order nor sorted); the timed call is
    `invoke()`; outputs are copied out with `get_tensor` only on fetch.
    """

    threads_key = "num_threads"

    # Under load (run.load_serve) each lane loads its own runner: an Interpreter holds its inputs and runs one invoke at a time.
    shared_across_threads = False

    calling_path = ("ai_edge_litert Interpreter.invoke(), inputs set once with set_tensor at the serving_default "
                    "signature's tensor indices (resize_tensor_input + allocate_tensors when a shape changes); "
                    "outputs copied with get_tensor on fetch")

    def __init__(self, manifest, directory, options, interpreter, signature: dict[str, dict[str, int]]):
        super().__init__(manifest, directory, options)
        self.interpreter = interpreter
        self.signature = signature
        self._inputs = [(leaf, signature["inputs"][leaf.param]) for leaf in manifest.inputs if leaf.param is not None]
        self._outputs = [signature["outputs"][leaf.param] for leaf in manifest.outputs]
        self._current: Prepared | None = None
        self._allocated = False

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Prepared:
        by_name = {leaf.name: a for leaf, a in zip(self.manifest.inputs, arrays)}
        prepared = Prepared([], {})
        for leaf, index in self._inputs:
            array = np.require(by_name[leaf.name], requirements="C")  # keeps 0-d arrays 0-d
            prepared.arrays.append((index, array))
            prepared.shapes[index] = list(array.shape)
        self._apply(prepared)
        return prepared

    def _apply(self, prepared: Prepared) -> None:
        """Make the interpreter's input tensors hold this feed: resize if a shape differs, then set each."""
        it = self.interpreter
        try:
            resized = False
            for index, shape in prepared.shapes.items():
                if list(it._get_tensor_details(index, 0)["shape"]) != shape:
                    it.resize_tensor_input(index, shape, strict=True)
                    resized = True
            if resized or not self._allocated:
                it.allocate_tensors()
                self._allocated = True
            for index, array in prepared.arrays:
                it.set_tensor(index, array)
        except (RuntimeError, ValueError) as exc:
            raise self._error(exc) from exc
        self._current = prepared

    def _run_impl(self, prepared: Prepared) -> None:
        if self._current is not prepared:  # another feed was prepared since: its tensors are in place
            self._apply(prepared)
        try:
            self.interpreter.invoke()
        except (RuntimeError, ValueError) as exc:
            raise self._error(exc) from exc

    def _fetch_impl(self, prepared: Prepared) -> Sequence[Any]:
        self._run_impl(prepared)
        return [self.interpreter.get_tensor(index) for index in self._outputs]

    def _error(self, exc: Exception) -> RunError:
        text = " ".join(str(exc).split())[:800]
        if FLEX in text:
            return RunError(f"Artifact '{self.directory}' | the model needs TensorFlow (flex) ops, which the "
                            f"ai_edge_litert interpreter cannot run: {text}", backend="litert", category="unsupported-op")
        failed = _PREPARE.search(text)
        if failed:
            why = _scatter_region_mismatch(self.manifest, self.directory) if failed.group(1) == "STABLEHLO_SCATTER" else ""
            return RunError(f"Artifact '{self.directory}' | LiteRT's {failed.group(1)} kernel cannot run this model: "
                            f"{why}{text}", backend="litert", category="unsupported-op")
        return RunError(f"Artifact '{self.directory}' | LiteRT failed: {type(exc).__name__}: {text}", backend="litert")

    def partitions(self) -> int:
        """XNNPACK partitions: the DELEGATE nodes in the execution plan once tensors are allocated."""
        if not self._allocated:
            return 0
        return sum(op["op_name"] == "DELEGATE" for op in self.interpreter._get_ops_details())

    def _describe_impl(self) -> dict[str, Any]:
        import ai_edge_litert

        partitions = self.partitions()
        dynamic = bool(self.manifest.symbolic_dims)
        xnnpack = (f"default delegate (OpResolverType.AUTO), {partitions} partition(s)" if self._allocated
                   else "default delegate (OpResolverType.AUTO), applied at the first allocate_tensors()")
        facts = {"ai_edge_litert": ai_edge_litert.__version__, "num_threads": self.options.thread_count,
                 "num_threads_source": "the value passed to Interpreter(num_threads=...): LiteRT has no getter, "
                                       "and its Python default is 1 thread",
                 "xnnpack": xnnpack, "xnnpack_partitions": partitions, "signature": SIGNATURE_KEY}
        if dynamic:
            facts["dynamic_shapes"] = (
                "symbolic dimensions convert to shape arithmetic (SHAPE, BROADCAST_TO, GATHER, ...) that XNNPACK "
                "does not take, so the graph splits into several XNNPACK partitions with TFLite kernels between "
                "them; measured on the transformer block: 19 partitions and 12-14x slower than the static model")
        return facts


def open_interpreter(path: str, threads: int):
    """An ai_edge_litert Interpreter over `path` with `threads` (always passed: the Python default is 1)."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path, num_threads=threads)


# Prepares a model in a child process (`-I`: nothing beside the artifact or in PYTHON* variables is imported) and
# prints its XNNPACK partitions (DELEGATE nodes) and its own peak resident size (VmHWM, bytes; 0 where /proc has
# none); exit 3 when the tensors cannot be allocated (a Python error).
_ALLOCATE_IN_CHILD = ("import sys\nfrom ai_edge_litert.interpreter import Interpreter\n"
                      "i = Interpreter(model_path=sys.argv[1], num_threads=1)\n"
                      "try:\n    i.allocate_tensors()\nexcept (RuntimeError, ValueError):\n    sys.exit(3)\n"
                      "n = sum(op['op_name'] == 'DELEGATE' for op in i._get_ops_details())\n"
                      "try:\n    hwm = [int(l.split()[1]) * 1024 for l in open('/proc/self/status') "
                      "if l.startswith('VmHWM:')][0]\nexcept (OSError, IndexError):\n    hwm = 0\n"
                      "print(n, hwm)\n")


def allocate_in_child(path: str, timeout: float = 600.0) -> tuple[int | None, str | None]:
    """Prepare the model at `path` (allocate_tensors: every kernel's Prepare, XNNPACK applied) in a child process:
    (its XNNPACK partitions at the model's own shapes, None when the tensors cannot be allocated, the child died or
    timed out; the name of the signal that killed the child, or None). In a child because a kernel that aborts in
    native code would otherwise take the exporting process with it, and because XNNPACK packs the weights when it
    is applied (+1.4x the weights) while the exporting process still holds the target's."""
    import signal
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-I", "-c", _ALLOCATE_IN_CHILD, path], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None
    if proc.returncode < 0:
        try:
            return None, signal.Signals(-proc.returncode).name
        except ValueError:
            return None, f"signal {-proc.returncode}"
    said = proc.stdout.split()[-2:] if proc.returncode == 0 else []
    if len(said) != 2 or not all(word.isdigit() for word in said):
        return None, None
    report_child_peak(int(said[1]))  # the export's memory includes this child's (the row's export child peak)
    return int(said[0]), None


def prepare_in_child(path: str, timeout: float = 600.0) -> str | None:
    """The name of the signal that killed a child process preparing the model at `path`, or None when it prepared,
    failed with a Python error or timed out (the in-process load then says which): `allocate_in_child`'s second
    answer."""
    return allocate_in_child(path, timeout)[1]


def signature_of(interpreter) -> dict[str, dict[str, int]] | None:
    """serving_default's {"inputs": {alias: tensor index}, "outputs": {...}}, or None when the model has none."""
    full = getattr(interpreter, "_get_full_signature_list", None)
    if full is not None:
        found = full().get(SIGNATURE_KEY)
        return None if found is None else {"inputs": dict(found["inputs"]), "outputs": dict(found["outputs"])}
    if SIGNATURE_KEY not in interpreter.get_signature_list():
        return None
    runner = interpreter.get_signature_runner(SIGNATURE_KEY)  # public path: read the indices, then let it go
    found = {"inputs": {k: d["index"] for k, d in runner.get_input_details().items()},
             "outputs": {k: d["index"] for k, d in runner.get_output_details().items()}}
    del runner  # a live SignatureRunner makes allocate_tensors()/invoke() refuse to run
    return found


def _scatter_region_mismatch(manifest, directory) -> str:
    """Why a scatter the kernel says it supports still fails: the region's op as the converter wrote it."""
    try:
        regions = scatter_regions(manifest.path(directory, "model").read_bytes())
    except Exception:  # noqa: BLE001 - an explanation only; the runtime's own words follow it anyway
        return ""
    refused = sorted({op for ops in regions if len(ops) == 1 for op in ops if op not in SCATTER_REGION_OPS})
    if not refused:
        return ""
    return (f"the TFLite converter wrote the scatter's combining region as {', '.join(refused)}, and the kernel takes "
            f"only {', '.join(SCATTER_REGION_OPS)} or a plain update (a mismatch between LiteRT's converter and its "
            f"runtime, not the model's math: a scatter combining with {', '.join(refused)} cannot run in this LiteRT, "
            f"e.g. x.at[i].add; x.at[i].set can); LiteRT said: ")
