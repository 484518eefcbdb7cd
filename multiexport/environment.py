"""The machine a compare ran on: CPU, cores this process may use, thread settings, versions."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from .versions import dist_version

THREAD_VARS = ("PJRT_NPROC", "OMP_NUM_THREADS", "XLA_FLAGS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
CORE_DISTRIBUTIONS = ("multiexport", "jax", "jaxlib", "numpy")


def distributions() -> tuple[str, ...]:
    """The core's distributions, then each registered backend's (`Backend.distributions`), once each."""
    from .exporting.registry import backend_class, names

    found = list(CORE_DISTRIBUTIONS)
    for name in names():
        try:
            found += [d for d in backend_class(name).distributions if d not in found]
        except Exception:  # a backend that cannot even be imported says so in its row, not here
            continue
    return tuple(found)


def environment() -> dict[str, Any]:
    from .exporting.contract import usable_cpus

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
        "versions": {d: dist_version(d) for d in distributions() if dist_version(d) != "not installed"},
    }
