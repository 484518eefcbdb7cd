"""IREE's facts in manifest.json's `format`: how the .vmfb was compiled, which driver runs it, and its function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multiexport.sdk import FormatFacts


@dataclass(frozen=True, kw_only=True)
class IreeFacts(FormatFacts):
    """The facts of an IREE artifact (module.vmfb compiled ahead of time from the exported StableHLO).

    weights: where the baked weights live and how a runtime binds them, in words.
    target_backends: the HAL target backends compiled for (`llvm-cpu`, `cuda`).
    drivers: target backend -> the driver the runner uses (`local-sync` or `local-task` for llvm-cpu). The llvm-cpu
        driver varies per artifact: with `iree.driver=auto` (the default) the export times both on the example
        inputs and keeps the faster, so two artifacts of one IREE release may name different drivers; the native
        section's `run_args` carry the same choice (`--device=local-sync` or `--device=local-task`), and a
        consumer should pass them as written rather than assume one device.
    driver_choice: how the llvm-cpu driver was chosen (measured at export, or asked for), or None.
    compile_flags: the flags iree-compile got beyond the target backends.
    cpu_config: the llvm-cpu options (data tiling, im2col) and why, or why iree-compile rejected them.
    compile_command: the whole iree-compile command line, to compile the StableHLO again.
    host_cpu_note: why llvm-cpu code may not run on other CPUs, or None without llvm-cpu.
    function: the module function a consumer calls. module_signature: its declaration.
    module_args, module_results: the leaves the function takes and returns, in order.
    dynamic: whether the module keeps symbolic dims (a module IREE cannot compile with them is not written: the
        export driver's static-size fallback compiles one per size, each with its own facts).
    stablehlo: what was done to the StableHLO before compiling, and why.
    """

    weights: str
    target_backends: list[str]
    drivers: dict[str, str]
    driver_choice: dict[str, Any] | None
    compile_flags: list[str]
    cpu_config: dict[str, Any]
    compile_command: list[str]
    host_cpu_note: str | None
    function: str
    module_signature: str
    module_args: list[str]
    module_results: list[str]
    dynamic: bool
    stablehlo: dict[str, Any]
