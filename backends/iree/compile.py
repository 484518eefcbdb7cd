"""Compiling StableHLO to a .vmfb with iree.compiler, for llvm-cpu (this host's CPU) and cuda."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any, Sequence

from multiexport.sdk import ExportError, LiftedWeights, PrecisionFacts, dist_version

from .fixups import prepare_stablehlo

TARGETS = {"cpu": "llvm-cpu", "cuda": "cuda", "gpu": "cuda"}  # ExportOptions.platforms -> IREE target
_MESSAGE_LIMIT = 3000


# iree-compile's reduced-precision mode (its global-opt pipeline): the inputs of every contraction (matmul,
# convolution) demoted to float16; the function's own inputs and outputs keep their dtypes.
PRECISION_FLAGS = {"fp16": ("--iree-global-opt-demote-contraction-inputs-type=f16",
                            "--iree-global-opt-demote-contraction-inputs-operations=all")}


def precision_facts(precision: str, module_text: str):
    """The PrecisionFacts of an IREE artifact compiled with PRECISION_FLAGS[precision]."""
    from collections import Counter


    ops = Counter(re.findall(r"stablehlo\.(dot_general|convolution|dot)(?![\w])", module_text))
    return PrecisionFacts(
        precision=precision, method=f"iree-compile {' '.join(PRECISION_FLAGS[precision])}",
        toolchain=f"iree-base-compiler {dist_version('iree-base-compiler')}",
        quantized_ops={f"stablehlo.{op}": n for op, n in ops.items() if n},
        io="float32 inputs and outputs, as the leaves declare",
        notes=["the contractions' inputs are demoted to float16 by the compiler; elementwise ops and the "
               "accumulation stay float32, and the weights are stored float32 in the module"])


def compile_flags(targets: Sequence[str], cuda_arch: str | None = None, x64: bool = False) -> list[str]:
    """iree-compile flags besides input type and target backends, per target.

    x64: keep 64-bit types. IREE demotes f64 to f32 by default (and the manifest would then claim a
    dtype the artifact does not take), so a 64-bit target is compiled with demotion off.
    """
    flags = ["--iree-input-demote-f64-to-f32=false", "--iree-input-demote-i64-to-i32=false"] if x64 else []
    if "llvm-cpu" in targets:
        flags.append("--iree-llvmcpu-target-cpu=host")  # this host's CPU features (recorded in the manifest)
    if "cuda" in targets:
        flags.append(f"--iree-cuda-target={cuda_arch}")
    return flags


def compile_vmfb(stablehlo: bytes, targets: Sequence[str], flags: Sequence[str], why: str = "",
                 float64: bool = False) -> bytes:
    """Compile StableHLO (bytecode or text) to a .vmfb; IREE's rejection is ExportError 'compile-failed'.

    why: what we already know about the module that explains a failure, put before IREE's message.
    float64: the function has float64 leaves. A math function IREE's device library lacks (its linker's
    `undefined symbol: tanh`: the float64 variants call libm, which a device executable does not link) is
    then `unsupported-dtype` naming the function, else `unsupported-op`: a fact of IREE, not a broken module.
    """
    from iree.compiler import CompilerToolError, compile_str

    try:
        return compile_str(stablehlo, target_backends=list(targets), input_type="stablehlo", extra_args=list(flags))
    except CompilerToolError as exc:
        said = _diagnostics(str(exc))
        missing = sorted(set(re.findall(r"undefined symbol: ([A-Za-z_][A-Za-z0-9_]*)", said)))
        if missing:
            names = ", ".join(missing)
            if float64:
                message = (f"Backend 'iree' | IREE's {', '.join(targets)} backend cannot compile float64 {names}: its "
                           f"device library has no float64 {names} (iree-lld: undefined symbol: {names}); the "
                           "float32 function compiles")
                category = "unsupported-dtype"
            else:
                message = (f"Backend 'iree' | IREE's {', '.join(targets)} backend has no {names} in its device "
                           f"library (iree-lld: undefined symbol: {names})")
                category = "unsupported-op"
            error = ExportError(message, backend="iree", category=category)
            error.diagnostics = said
            raise error from exc
        error = ExportError(f"Backend 'iree' | iree-compile rejected the module for {', '.join(targets)}{why}: {said}",
                            backend="iree", category="compile-failed")
        error.diagnostics = said  # IREE's words alone, for callers that quote them
        raise error from exc


def without_locations(line: str) -> str:
    """An MLIR diagnostic line with every `loc(...)` (nested parentheses and all) and a leading `<unknown>:0:`
    removed, wherever they are: MLIR may put the location right after `error:`, before the message."""
    out, i = [], 0
    while (j := line.find("loc(", i)) >= 0:
        out.append(line[i:j])
        depth, k = 0, j + 3
        while k < len(line):
            depth += {"(": 1, ")": -1}.get(line[k], 0)
            k += 1
            if depth == 0:
                break
        i = k
    out.append(line[i:])
    text = " ".join("".join(out).split())
    return text.removeprefix("<unknown>:0:").replace("error: :", "error:").strip()


def _diagnostics(text: str) -> str:
    """IREE's own error lines from a CompilerToolError, without MLIR location suffixes, bounded in length."""
    body = text.split("Diagnostics:", 1)[-1].split("\n\nInvoked with:", 1)[0].strip()
    errors = [without_locations(line) for line in body.splitlines() if "error:" in line]
    found = "\n".join(e for e in errors if e.rstrip(":").strip()) or body
    return found if len(found) <= _MESSAGE_LIMIT else found[:_MESSAGE_LIMIT] + " ..."


def compile_exported(exported, targets: Sequence[str], flags: Sequence[str],
             lifted: LiftedWeights | None = None, n_leaves: int = 0) -> tuple[bytes, dict[str, Any], bytes]:
    """(StableHLO given to IREE, what prepare_stablehlo changed, .vmfb) for one Exported."""
    names = list(lifted.names) if lifted else []
    weights = [names[i - n_leaves] for i in sorted(exported.module_kept_var_idx) if i >= n_leaves] if lifted else []
    stablehlo, notes = prepare_stablehlo(exported, weights)
    calls = notes["custom_call_targets"]
    why = (f" (it calls custom call targets {', '.join(calls)}: kernels of the JAX/XLA runtime, which IREE "
           "does not implement)") if calls else ""
    float64 = any(str(a.dtype) == "float64" for a in (*exported.in_avals, *exported.out_avals))
    return stablehlo, notes, compile_vmfb(stablehlo, targets, flags, why, float64)


def targets_for(platforms: Sequence[str] | None) -> tuple[list[str], str | None]:
    """IREE targets for ExportOptions.platforms, and the CUDA architecture when cuda is asked for."""
    targets = []
    for platform in platforms or ("cpu",):
        if platform not in TARGETS:
            raise ExportError(f"Platform '{platform}' | unknown to IREE, expected one of cpu, cuda",
                              backend="iree", category="unsupported-platform")
        if TARGETS[platform] not in targets:
            targets.append(TARGETS[platform])
    arch = None
    if "cuda" in targets:
        arch = cuda_arch()
        if arch is None:
            raise ExportError(
                "Platform 'cuda' | got no visible NVIDIA GPU (nvidia-smi), expected one: IREE compiles for the "
                "GPU's architecture (sm_XX) and the artifact is checked on it",
                backend="iree", category="unsupported-platform")
    return targets, arch


def cuda_arch() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    caps = proc.stdout.split()
    if proc.returncode != 0 or not caps:
        return None
    arch = "sm_" + caps[0].replace(".", "")
    # Measured: IREE 3.13 rejects sm_90 and sm_100 ("missing GPU target in #hal.executable.target") and
    # compiles sm_70..sm_89 and sm_120. It embeds PTX, which the driver JIT-compiles for newer GPUs.
    return _CUDA_FALLBACK.get(arch, arch)


_CUDA_FALLBACK = {"sm_90": "sm_89", "sm_90a": "sm_89", "sm_100": "sm_89", "sm_100a": "sm_89"}


