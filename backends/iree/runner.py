"""The Python runner for IREE artifacts: the .vmfb in iree.runtime, lifted weights as IREE parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence, cast

import numpy as np

from multiexport.sdk import ArtifactError, Manifest, RunError, Runner, leaf_message, observed_threads, usable_cpus

from .driver import ONE_THREAD_RULE, THREADS_SET, set_threads
from .facts import IreeFacts
from .fixups import FUNCTION
from .parameters import parameters_module


class IreeRunner(Runner):
    """The .vmfb in iree.runtime: inputs uploaded once as HAL buffer views, the module's sync `main` invoked."""

    # The threads that run the module: local-task's iree-worker pool (counted by thread name), or on
    # local-sync the calling thread alone (1). One key for both drivers so that threads_reported is true.
    threads_key = "num_threads"

    # Under load (run.load_serve) each lane loads its own runner: an IREE VM context is not for concurrent invocations.
    shared_across_threads = False

    calling_path = ("iree.runtime VmContext.invoke of the module's synchronous main on an argument list packed "
                    "once in prepare (HAL buffer views uploaded there); results stay in device buffers")

    def __init__(self, manifest: Manifest, directory: Path, options, driver: str, facts: IreeFacts):
        import iree.runtime as rt

        super().__init__(manifest, directory, options)
        self._facts = facts
        self._driver_note = None
        if driver == "local-task" and options.thread_count == 1:
            # The export's own rule, and more: sizing the pool is process-wide and first-come, so export's
            # one-thread load check pinned every later local-task runner and driver measurement of the
            # process at one worker (BERT-base: 2x slower).
            driver = "local-sync"
            self._driver_note = f"one thread requested, so local-sync instead of the artifact's local-task ({ONE_THREAD_RULE})"
        self._rt, self._driver = rt, driver
        if driver == "local-task":
            set_threads(rt, options.thread_count)
        try:
            self._config = rt.Config(driver)
        except Exception as exc:  # no such driver or device here: IREE's reason is the message
            raise RunError(f"Device '{options.device}' | IREE driver '{driver}' unavailable: {exc}",
                           category="no-gpu" if driver == "cuda" else "load-failed") from exc
        path = manifest.path(directory, "module")
        modules = [self._parameters_module(rt, directory, manifest)] if manifest.external_weights() else []
        try:
            module = rt.VmModule.mmap(self._config.vm_instance, str(path))
            self._context = rt.SystemContext(vm_modules=[*modules, module], config=self._config)
        except Exception as exc:
            raise ArtifactError(f"Artifact '{directory}' | IREE cannot load {path.name}: {exc}") from exc
        self._function = module.lookup_function(FUNCTION)
        if self._function is None:
            raise ArtifactError(f"Artifact '{directory}' | {path.name} has no function '{FUNCTION}'")
        self.declaration = self._function.reflection.get("iree.abi.declaration", "")
        # Positions (in manifest input order) of the module's arguments, in argument order.
        kept = [i for i, leaf in enumerate(manifest.inputs) if leaf.param is not None]
        self._arg_positions = sorted(kept, key=lambda i: cast(int, manifest.inputs[i].param))  # IREE: an index
        declared = self.declaration.count("%input")
        if declared != len(self._arg_positions):
            raise ArtifactError(
                f"Artifact '{directory}' | {path.name} takes {declared} arguments, manifest binds {len(self._arg_positions)}")
        self._invoke = self._context.vm_context.invoke  # bound once: the timed call pays no lookups

    def _parameters_module(self, rt, directory: Path, manifest: Manifest):
        """The io_parameters module serving the artifact's weights file (read into the device's buffers, not
        mapped: parameters.py) under scope "model"."""
        path = manifest.path(directory, "weights")
        try:
            module, index = parameters_module(rt, self._config.vm_instance, path)
        except Exception as exc:
            raise ArtifactError(f"Artifact '{directory}' | IREE cannot read the weights file {path.name}: {exc}") from exc
        have = {key for key, _ in index.items()}
        missing = [name for name in manifest.external_weights() if name not in have]
        if missing:
            raise ArtifactError(f"Weight '{missing[0]}' | missing from {path}, expected it (the manifest lists "
                                f"{len(manifest.external_weights())} weights)")
        self._parameter_index = index  # the provider reads through it for the context's lifetime
        return module

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Any:
        rt = self._rt
        from iree.runtime.array_interop import map_dtype_to_element_type

        device = self._config.device
        args = rt.VmVariantList(len(self._arg_positions))
        views = []
        for i in self._arg_positions:
            array = np.asarray(arrays[i], order="C")  # ascontiguousarray would make 0-d arrays 1-d
            element_type = map_dtype_to_element_type(array.dtype)
            if element_type is None:
                raise RunError(leaf_message("Input", self.manifest.inputs[i].name, array.dtype.name,
                                            "a dtype iree.runtime maps to a HAL element type"))
            view = device.allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=device,
                buffer=array, element_type=element_type)
            views.append(view)  # keep the buffers alive as long as the argument list
            args.push_ref(view.ref)
        return args, views

    def _call(self, prepared: Any):
        results = self._rt.VmVariantList(len(self.manifest.outputs))
        try:
            self._invoke(self._function, prepared[0], results)
        except Exception as exc:
            raise RunError(f"Artifact '{self.directory}' | IREE failed to run {FUNCTION}: {exc}") from exc
        return results

    def _run_impl(self, prepared: Any) -> None:
        # A `sync func` returns once its results are computed: the call is synchronous as it stands.
        self._call(prepared)

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        rt = self._rt
        results = self._call(prepared)
        out = []
        for i in range(len(results)):
            view = results.get_as_object(i, rt.HalBufferView)
            out.append(np.array(rt.DeviceArray(self._config.device, view, implicit_host_transfer=True).to_host()))
        return out

    def compile_count(self) -> int | None:
        return 0  # compiled ahead of time at export; nothing compiles at run time, whatever the shapes

    def _describe_impl(self) -> dict[str, Any]:
        facts = self._facts
        return {"driver": self._driver, "driver_note": self._driver_note,
                "driver_choice": facts.driver_choice,
                "compile_flags": facts.compile_flags, "module_signature": self.declaration,
                "target_backends": facts.target_backends,
                "task_topology_max_group_count": THREADS_SET[0] if THREADS_SET and self._driver == "local-task" else None,
                **self._threads()}

    def _threads(self) -> dict[str, int]:
        """The threads running the module, under `threads_key`: local-task's iree-worker pool as counted,
        local-sync's calling thread alone (it has no iree-worker pool to count); other drivers report none."""
        if self._driver == "local-task":
            # The pool's size was asked (capped by the CPUs here): wait for its threads to be seen
            asked = min(THREADS_SET[0], usable_cpus()) if THREADS_SET else None
            workers = observed_threads("iree-worker", expect=asked)
            return {"iree_worker_threads": workers, "num_threads": workers}
        return {"num_threads": 1} if self._driver == "local-sync" else {}


