"""The machine a compare ran on: CPU, cores this process may use, thread settings, versions."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from .versions import dist_version

THREAD_VARS = ("PJRT_NPROC", "OMP_NUM_THREADS", "XLA_FLAGS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def environment() -> dict[str, Any]:
    from .export.contract import usable_cpus

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
        "cores": os.cpu_count(), "usable_cores": usable_cpus(),
        "thread_env": {k: os.environ[k] for k in THREAD_VARS if k in os.environ},
        "versions": {d: dist_version(d) for d in ("multiexport", "jax", "jaxlib", "numpy", "tensorflow-cpu",
                                                  "tensorflow", "jax2onnx", "onnx", "onnxruntime",
                                                  "iree-base-compiler", "iree-base-runtime")
                     if dist_version(d) != "not installed"},
    }
