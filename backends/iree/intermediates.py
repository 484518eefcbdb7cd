"""IREE's intermediates for `multiexport locate`: the artifact's own StableHLO (the model.mlirbc shipped beside the
.vmfb, exactly what iree-compile compiled) instrumented to return every op's result, compiled again with the
artifact's recorded target backends and flags, and run by iree.runtime.

This is a re-compile of the shipped module with outputs added, not the shipped .vmfb itself (a .vmfb keeps no
intermediate values); the report says so. A fault planted in the shipped StableHLO (an op changed, a rounding
inserted) is in what is instrumented, and the core aligns this module's ops with the reference's by op
sequence. An artifact with lifted weights (model.mlir: the StableHLO `main` renamed `main_lifted`, called from a
`main` that loads each weight from an IREE parameter) is instrumented from its StableHLO part, which is exactly
the module it was made from; the weights are passed as arguments, read from the shipped parameter file
(weights.safetensors), instead of as parameters: the same values, so a changed op or weight is still seen.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import numpy as np

from multiexport.sdk import Intermediates, IntermediatesRequest, RunError, instrument_module, iter_safetensors

from .compile import compile_vmfb
from .fixups import FUNCTION


def iree_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Instrument, re-compile and run the shipped StableHLO; values keyed by its own sites (`own_sites`)."""
    import iree.runtime as rt

    manifest, directory = request.manifest, Path(request.artifact_dir)
    lifted: list[str] = []
    if "stablehlo_bytecode" in manifest.files:
        source: bytes | str = manifest.path(directory, "stablehlo_bytecode").read_bytes()
    elif "stablehlo_text" in manifest.files and "weights" in manifest.files:
        try:
            source, lifted = lifted_stablehlo(manifest.path(directory, "stablehlo_text").read_text())
        except ValueError as exc:
            why = f"cannot map: {exc}"
            return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
    else:
        why = f"cannot map: this IREE artifact ships no StableHLO module locate can read (files: {sorted(manifest.files)})"
        return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
    facts = manifest.format
    targets = [str(t) for t in cast(list, facts.get("target_backends") or ["llvm-cpu"])]
    if targets != ["llvm-cpu"]:
        targets = ["llvm-cpu"]  # locate runs on the CPU; the flags of other targets do not apply
    flags = _flags(facts)
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
    if lifted:
        weights = dict(iter_safetensors(manifest.path(directory, "weights"), lifted))
        args += [np.ascontiguousarray(weights[name]) for name in lifted]
    try:
        results = function(*args)
    except Exception as exc:
        raise RunError(f"Backend 'iree' | the instrumented module failed to run: {' '.join(str(exc).split())[:300]}",
                       backend="iree", category="load-failed") from exc
    results = results if isinstance(results, (tuple, list)) else [results]
    arrays = [np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in results]
    outputs = {leaf.name: a for leaf, a in zip(manifest.outputs, arrays[:instrumented.n_results])}
    values: dict[str, Any] = {s.key: a for s, a in zip(instrumented.sites, arrays[instrumented.n_results:])}
    shipped = manifest.files.get("stablehlo_bytecode") or manifest.files.get("stablehlo_text")
    how = (f"re-compile of the shipped {shipped} with every op result returned "
           f"(iree-compile {' '.join(targets)} {' '.join(flags)}), run by iree.runtime local-sync"
           + (f"; its {len(lifted)} lifted weights passed as arguments, read from the shipped "
              f"{manifest.files['weights']}" if lifted else ""))
    return Intermediates(values=values, how=how, outputs=outputs, own_sites=instrumented.sites, recompiled=True)


_PARAMETER = re.compile(r'^\s*util\.global private @(\S+) = #stream\.parameter\.named<"[^"]*"::"((?:[^"\\]|\\.)*)">')


def lifted_stablehlo(text: str) -> tuple[str, list[str]]:
    """(the StableHLO module a lifted model.mlir was made from, as text with `main` restored, the weights'
    parameter names in the order `main` takes them after the leaves). model.mlir is that module's text with
    `main` renamed `main_lifted` and the parameter globals and the new `main` appended (fixups._bind_parameters)."""
    lines = text.rstrip().splitlines()
    start = next((i for i, line in enumerate(lines) if _PARAMETER.match(line)), None)
    if start is None:
        raise ValueError("model.mlir has no IREE parameter globals after its StableHLO module")
    names = [_PARAMETER.match(line).group(2) for line in lines[start:] if _PARAMETER.match(line)]  # type: ignore[union-attr]
    module = "\n".join(lines[:start]) + "\n}\n"
    renamed = module.replace(f"func.func private @{FUNCTION}_lifted(", f"func.func public @{FUNCTION}(", 1)
    if renamed == module:
        raise ValueError(f"model.mlir has no private @{FUNCTION}_lifted function to instrument")
    return renamed, [n.replace('\\"', '"').replace("\\\\", "\\") for n in names]


def reduced_iree(request: IntermediatesRequest, op_module: bytes, out_dir: Path) -> str:
    """`op.vmfb`: the op alone compiled with the artifact's recorded llvm-cpu flags."""
    flags = _flags(request.manifest.format)
    (out_dir / "op.vmfb").write_bytes(compile_vmfb(op_module, ["llvm-cpu"], flags, " (the located op alone)"))
    return f"op.vmfb: the op alone compiled by iree-compile llvm-cpu {' '.join(flags)} (run: iree-run-module)"


def _flags(facts: Any) -> list[str]:
    """The artifact's recorded iree-compile flags for the CPU (CUDA's do not apply: locate runs on the CPU)."""
    return [str(f) for f in cast(list, facts.get("compile_flags") or []) if not str(f).startswith("--iree-cuda")]
