"""XLA's native consumer: `pjrt_run` (csrc/pjrt_run.cc) on the PJRT C API, loading the plugin it is given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from multiexport.errors import UsageError
from multiexport.exporting.native_consumer import Call, NativeConsumer, Request

from .section import CONSUMER


@dataclass(frozen=True)
class PjrtConsumer(NativeConsumer):
    """pjrt_run: the plugin is an argument (a CPU plugin, or jax's CUDA plugin for device "gpu"); the CPU client
    reads its threads from PJRT_NPROC."""

    consumer: str = CONSUMER
    program: str = "pjrt_run"
    threads_flag: bool = False
    devices: tuple[str, ...] = ("cpu", "gpu")
    static_modules: bool = True

    def thread_env(self, threads: int) -> dict[str, str]:
        return {"PJRT_NPROC": str(threads)}

    def program_args(self, manifest: Any, native: Mapping[str, Any], call: Call) -> tuple[list[str], dict[str, str]]:
        from multiexport.native.build import find_pjrt_plugin, plugin_environment

        found = find_pjrt_plugin(call.plugin, call.device)
        return ["--plugin", str(found)], plugin_environment(found)

    def bundle_runtime(self, request: Request) -> list[Path]:
        return [_bundled_plugin(request)]

    def bundle_argv(self, request: Request) -> list[str]:
        return ["--plugin", f"../lib/{_bundled_plugin(request).name}"]


def _bundled_plugin(request: Request) -> Path:
    from multiexport.native.build import find_pjrt_plugin, is_cuda_plugin

    plugin = find_pjrt_plugin(request.plugin)
    if is_cuda_plugin(plugin):  # it dlopens CUDA from the NVIDIA wheels through LD_LIBRARY_PATH, and the driver
        raise UsageError(f"PJRT plugin '{plugin}' | a CUDA plugin cannot be bundled yet, expected a CPU plugin: it "
                         "loads the NVIDIA wheels' libraries through LD_LIBRARY_PATH and the server's driver")
    return plugin
