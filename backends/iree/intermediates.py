"""IREE's intermediates for `multiexport locate`: the artifact's own StableHLO (the model.mlirbc shipped beside the
.vmfb, exactly what iree-compile compiled) instrumented to return every op's result, compiled again with the
artifact's recorded target backends and flags, and run by iree.runtime.

This is a re-compile of the shipped module with outputs added, not the shipped .vmfb itself (a .vmfb keeps no
intermediate values); the report says so. A fault planted in the shipped StableHLO (an op changed, a rounding
inserted) is in what is instrumented, and the core aligns this module's ops with the reference's by op
sequence. An artifact with lifted weights (IREE parameters, model.mlir) is not mapped here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np

from multiexport.sdk import Intermediates, IntermediatesRequest, RunError, instrument_module

from .compile import compile_vmfb
from .fixups import FUNCTION


def iree_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Instrument, re-compile and run the shipped StableHLO; values keyed by its own sites (`own_sites`)."""
    import iree.runtime as rt

    manifest, directory = request.manifest, Path(request.artifact_dir)
    if "stablehlo_bytecode" not in manifest.files:
        why = ("cannot map: this IREE artifact binds lifted weights as IREE parameters (model.mlir): its module is "
               "not instrumented here")
        return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
    facts = manifest.format
    targets = [str(t) for t in cast(list, facts.get("target_backends") or ["llvm-cpu"])]
    if targets != ["llvm-cpu"]:
        targets = ["llvm-cpu"]  # locate runs on the CPU; the flags of other targets do not apply
    flags = _flags(facts)
    source = manifest.path(directory, "stablehlo_bytecode").read_bytes()
    instrumented = instrument_module(source)
    (request.work_dir / "instrumented.mlirbc").write_bytes(instrumented.portable)
    vmfb = compile_vmfb(instrumented.portable, targets, flags, " (locate's instrumented module)")
    config = rt.Config("local-sync")
    context = rt.SystemContext(config=config)
    module = rt.VmModule.copy_buffer(context.instance, vmfb)
    context.add_vm_module(module)
    function = getattr(context.modules, module.name)[FUNCTION]
    kept = sorted((leaf for leaf in manifest.inputs if leaf.param is not None), key=lambda leaf: cast(int, leaf.param))
    args = [np.asarray(request.feed[leaf.name], order="C") for leaf in kept]
    try:
        results = function(*args)
    except Exception as exc:
        raise RunError(f"Backend 'iree' | the instrumented module failed to run: {' '.join(str(exc).split())[:300]}",
                       backend="iree", category="load-failed") from exc
    results = results if isinstance(results, (tuple, list)) else [results]
    arrays = [np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in results]
    outputs = {leaf.name: a for leaf, a in zip(manifest.outputs, arrays[:instrumented.n_results])}
    values: dict[str, Any] = {s.key: a for s, a in zip(instrumented.sites, arrays[instrumented.n_results:])}
    how = (f"re-compile of the shipped {manifest.files['stablehlo_bytecode']} with every op result returned "
           f"(iree-compile {' '.join(targets)} {' '.join(flags)}), run by iree.runtime local-sync")
    return Intermediates(values=values, how=how, outputs=outputs, own_sites=instrumented.sites, recompiled=True)


def reduced_iree(request: IntermediatesRequest, op_module: bytes, out_dir: Path) -> str:
    """`op.vmfb`: the op alone compiled with the artifact's recorded llvm-cpu flags."""
    flags = _flags(request.manifest.format)
    (out_dir / "op.vmfb").write_bytes(compile_vmfb(op_module, ["llvm-cpu"], flags, " (the located op alone)"))
    return f"op.vmfb: the op alone compiled by iree-compile llvm-cpu {' '.join(flags)} (run: iree-run-module)"


def _flags(facts: Any) -> list[str]:
    """The artifact's recorded iree-compile flags for the CPU (CUDA's do not apply: locate runs on the CPU)."""
    return [str(f) for f in cast(list, facts.get("compile_flags") or []) if not str(f).startswith("--iree-cuda")]
