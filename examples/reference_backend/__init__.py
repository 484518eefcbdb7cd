"""A backend written from scratch against `multiexport.sdk` alone: the executable documentation of what a format
must provide (docs/backend-sdk.md walks through it).

The format, "stablehlo-text": the function's StableHLO module as text (model.mlir), weights baked in as constants,
compiled at load by the CPU PJRT client that jaxlib ships and run there. What it supports, honestly: static shapes
on the CPU (a symbolic signature fails with `converter-error`, and the driver's static-size fallback then exports
one model per size), no ordered effects, every dtype the CPU compiler takes. Register it from outside multiexport:
`multiexport.register_backend("stablehlo-text", "reference_backend:ReferenceBackend")` with examples/ on sys.path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import (
    Backend,
    BackendFacts,
    ExportError,
    ExportJob,
    FormatFacts,
    FormatResult,
    Manifest,
    NoOptions,
    Presentation,
    RunOptions,
    Runner,
    embedded,
    export_module,
    leaf_binding,
    module_interface,
    write_text_atomic,
)

MODEL_FILE = "model.mlir"


@dataclass(frozen=True, kw_only=True)
class ReferenceFacts(FormatFacts):
    """The facts of a stablehlo-text artifact (manifest.json's `format`).

    module_args: the leaves `main` takes, in order (unread leaves are dropped unless keep_unused).
    compiler: what compiles the text at load.
    """

    module_args: list[str]
    compiler: str = "jaxlib's CPU PJRT client, from the StableHLO text at load"


class ReferenceBackend(Backend):
    """StableHLO text compiled at load on the CPU: two hooks and a runner."""

    spec = BackendFacts(name="stablehlo-text", requires=("jax", "jaxlib"), runtime_modules=("jax",),
                        weight_storage=("embedded",), facts_type=ReferenceFacts)
    presentation = Presentation(summary="StableHLO text, compiled at load by jaxlib's CPU client (the SDK's "
                                        "reference backend)", order=900)

    def _export_impl(self, job: ExportJob[NoOptions]) -> FormatResult:
        signature = job.signature
        if signature.symbolic_dims:  # PJRT compiles static shapes only: the driver falls back to one model per size
            raise ExportError(f"Backend '{self.name}' | symbolic dims {', '.join(signature.symbolic_dims)}: the CPU "
                              "client compiles static shapes only", backend=self.name, category="converter-error")
        exported = export_module(job.fn, signature, keep_unused=job.options.keep_unused, platforms=("cpu",))
        if exported.ordered_effects:
            raise ExportError(f"Backend '{self.name}' | ordered effects take token arguments, which this format has "
                              "no way to pass", backend=self.name, category="unsupported-op")
        names = [leaf.name for leaf in signature.inputs]
        args = module_interface(exported, names)
        used, params = leaf_binding(args, names)
        write_text_atomic(job.out_dir / MODEL_FILE, exported.mlir_module())
        declared = {leaf.name: aval.dtype.name for leaf, aval in zip(signature.inputs, exported.in_avals)}
        declared.update({leaf.name: aval.dtype.name for leaf, aval in zip(signature.outputs, exported.out_avals)})
        return FormatResult(files={"model": MODEL_FILE}, used=used, params=params,
                            output_params=list(range(len(signature.outputs))),
                            format=ReferenceFacts(module_args=[str(a.name) for a in args]),
                            weights=embedded(signature), declared=declared, platforms=["cpu"])

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        import jax.extend as jex
        from jaxlib import xla_client

        client = jex.backend.get_backend("cpu")
        text = manifest.path(directory, "model").read_text()
        executable = client.compile_and_load(text, xla_client.DeviceList(tuple(client.devices()[:1])),
                                             xla_client.CompileOptions())
        return ReferenceRunner(manifest, directory, options, executable, client.devices()[0])


class ReferenceRunner(Runner):
    """Puts the leaves `main` takes on the CPU device in its order, runs the executable, reads the outputs back."""

    calling_path = "LoadedExecutable.execute_sharded on jaxlib's CPU client, inputs placed with jax.device_put"

    def __init__(self, manifest: Manifest, directory: Path, options: RunOptions, executable: Any, device: Any):
        super().__init__(manifest, directory, options)
        self.executable, self.cpu = executable, device
        self.order = sorted((leaf.param, i) for i, leaf in enumerate(manifest.inputs) if leaf.param is not None)

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Any:
        import jax

        with jax.enable_x64(bool(self.manifest.supports.get("x64"))):  # an int64 leaf stays int64 on the device
            return [jax.device_put(arrays[i], self.cpu) for _, i in self.order]

    def _run_impl(self, prepared: Any) -> None:
        for out in self._call(prepared):
            out.block_until_ready()

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        return [np.asarray(out) for out in self._call(prepared)]

    def _call(self, prepared: Any) -> list[Any]:
        return [o[0] for o in self.executable.execute_sharded(prepared).disassemble_into_single_device_arrays()]
