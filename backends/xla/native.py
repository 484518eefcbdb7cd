"""XLA's native consumer: `pjrt_run` (csrc/pjrt_run.cc) on the PJRT C API, loading the plugin it is given, and
how it is built (its runtime is found by runtime.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from multiexport.sdk import ArtifactError, Call, NativeConsumer, Recipe, Request, UsageError, inside, tpu_presence

from .runtime import (
    find_pjrt_header,
    find_pjrt_plugin,
    is_cuda_plugin,
    is_tpu_plugin,
    plugin_environment,
    tpu_environment,
)
from .section import CONSUMER

SOURCE = Path(__file__).resolve().parent / "csrc" / "pjrt_run.cc"  # package data: a wheel carries it


@dataclass(frozen=True)
class PjrtConsumer(NativeConsumer):
    """pjrt_run: the plugin is an argument (a CPU plugin, jax's CUDA plugin for device "gpu", libtpu for "tpu"); the
    CPU client reads its threads from PJRT_NPROC."""

    consumer: str = CONSUMER
    program: str = "pjrt_run"
    threads_flag: bool = False
    devices: tuple[str, ...] = ("cpu", "gpu", "tpu")
    static_modules: bool = True
    load_loop: bool = True  # pjrt_run --load-lanes: the scenarios of `multiexport load` in C (common/mx_load.h)

    def check_fields(self, native: Mapping[str, Any], directory: Path) -> None:
        """Refuse a `platform_modules` entry (section.platform_module) that is not one platform's program inside
        the artifact binding the main module's own leaves and files."""

        where = f"Artifact '{directory}' | manifest.json native.platform_modules"
        modules = native.get("platform_modules", {})
        if not isinstance(modules, dict):
            raise ArtifactError(f"{where} | got {type(modules).__name__}, expected an object of platform -> program")
        for platform, module in modules.items():
            if not isinstance(module, dict) or module.get("platforms") != [platform] \
                    or not isinstance(module.get("args"), list) or not isinstance(module.get("results"), list):
                raise ArtifactError(f"{where} | entry {platform!r} is not a program lowered for {platform!r} alone "
                                    "with args and results lists")
            inside(directory, str(module.get("program")), "native program")
            for role, entries, main in (("args", module["args"], native.get("args", [])),
                                        ("results", module["results"], native.get("results", []))):
                leaves = [_key(e) for e in main if isinstance(e, dict) and e.get("kind") in ("leaf", "weight")]
                for entry in entries:
                    if not isinstance(entry, dict) or _key(entry) not in leaves:
                        raise ArtifactError(f"{where} | {platform!r} {role} entry {entry!r} is none of the main "
                                            f"module's {role}")

    def recipe(self) -> Recipe:
        """C++17 against `pjrt_c_api.h` (runtime.find_pjrt_header). No library: the program dlopens the plugin it
        is given, so one build serves every plugin of PJRT C API major 0. -pthread: the load loop's lanes."""

        header = find_pjrt_header()
        return Recipe("c++", SOURCE, ("-std=c++17", f"-I{header}", "-ldl", "-pthread"), (header / "pjrt_c_api.h",))

    def user_options(self) -> Mapping[str, str]:
        return {"cflags": "include flags for a program on the PJRT C API: the shared C sources and pjrt_c_api.h",
                "plugin": "the installed PJRT plugin to dlopen: a CPU plugin's with --device cpu (the default), "
                          "jax's CUDA plugin with --device gpu, libtpu's libtpu.so with --device tpu"}

    def user_answer(self, option: str, common: Path, device: str) -> str:

        if option == "cflags":
            return f"-I{common} -I{find_pjrt_header()}"
        if option == "plugin":
            return str(find_pjrt_plugin(device=device))
        return super().user_answer(option, common, device)

    def thread_env(self, threads: int) -> dict[str, str]:
        return {"PJRT_NPROC": str(threads)}

    def program_args(self, manifest: Any, native: Mapping[str, Any], call: Call) -> tuple[list[str], dict[str, str]]:

        found = find_pjrt_plugin(call.plugin, call.device)
        return ["--plugin", str(found), *_client_args(found)], plugin_environment(found)

    def bundle_runtime(self, request: Request) -> list[Path]:
        return [_bundled_plugin(request)]

    def bundle_argv(self, request: Request) -> list[str]:
        plugin = _bundled_plugin(request)
        return ["--plugin", f"../lib/{plugin.name}", *_client_args(plugin)]

    def bundle_environment(self, request: Request) -> dict[str, str]:
        """Defaults run.sh sets when the server's environment has none: for libtpu, this machine's TPU_* variables
        (a server of the same TPU type; its own values win), without which libtpu waits on a metadata server."""

        return tpu_environment() if is_tpu_plugin(_bundled_plugin(request)) else {}


def _client_args(plugin: Path) -> list[str]:
    """pjrt_run's client flags for `plugin`: a CPU plugin's client gets one device, as jaxlib creates its own CPU
    client (the plugin's default of 4 made each call of the CNN 93-135 us instead of ~50 us, identical outputs, and
    its load lanes slower than the Python runner's); libtpu and CUDA plugins take no such option."""
    return [] if is_tpu_plugin(plugin) or is_cuda_plugin(plugin) else ["--cpu-devices", "1"]


def _bundled_plugin(request: Request) -> Path:
    """The plugin a bundle carries: the one asked for, else libtpu on a machine with a TPU (the device it runs on,
    as `native` picks it), else the installed CPU plugin."""


    here = tpu_presence()
    plugin = find_pjrt_plugin(request.plugin, "tpu" if here.attached and here.libtpu else "cpu")
    if is_cuda_plugin(plugin):  # it dlopens CUDA from the NVIDIA wheels through LD_LIBRARY_PATH, and the driver
        raise UsageError(f"PJRT plugin '{plugin}' | a CUDA plugin cannot be bundled yet, expected a CPU plugin: it "
                         "loads the NVIDIA wheels' libraries through LD_LIBRARY_PATH and the server's driver")
    return plugin


def _key(entry: Mapping[str, Any]) -> tuple:
    """What a platform program's argument shares with the main module's: the leaf or tensor, and its file."""
    return tuple(entry.get(k) for k in ("kind", "leaf", "index", "tensor", "file", "dtype"))
