"""The machine a compare ran on: CPU, cores this process may use, thread settings, versions, and its TPU:
found from device files and the environment without opening it, since libtpu lets one process hold a chip."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .exporting.contract import usable_cpus
from .exporting.registry import backend_class, names
from .versions import dist_version

THREAD_VARS = ("PJRT_NPROC", "OMP_NUM_THREADS", "XLA_FLAGS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
CORE_DISTRIBUTIONS = ("multiexport", "jax", "jaxlib", "numpy")


def distributions() -> tuple[str, ...]:
    """The core's distributions, then each registered backend's (`Backend.distributions`), once each."""

    found = list(CORE_DISTRIBUTIONS)
    for name in names():
        try:
            found += [d for d in backend_class(name).distributions if d not in found]
        except Exception:  # a backend that cannot even be imported says so in its row, not here
            continue
    return tuple(found)


def environment() -> dict[str, Any]:
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
        **_accelerators(),
    }


def _accelerators() -> dict[str, Any]:
    """A TPU seen on this machine (never opened here) and the JAX_PLATFORMS this process runs with: on a TPU
    machine the compare's own processes say `cpu` (run.devices.keep_jax_off_the_tpu)."""
    found = tpu_presence()
    out: dict[str, Any] = {"jax_platforms": os.environ["JAX_PLATFORMS"]} if os.environ.get("JAX_PLATFORMS") else {}
    if found.attached:
        out["tpu"] = found.describe()
    return out


# -- the TPU: found without opening it -------------------------------------------------------------------------

TPU_ENV_PREFIX = "TPU_"
SAVED_PLATFORMS_ENV = "MULTIEXPORT_USER_JAX_PLATFORMS"  # the user's JAX_PLATFORMS, for the one TPU process
DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio/[0-9]*")


@dataclass(frozen=True)
class TpuPresence:
    """Whether a TPU is attached to this machine, known without opening it (libtpu lets one process hold a chip).

    evidence: what says so: device files (/dev/accel*, /dev/vfio/N) and TPU_ACCELERATOR_TYPE; empty: no TPU.
    libtpu: the libtpu.so of the installed `libtpu` package (a PJRT plugin: it exports GetPjrtApi), or None.
    """

    evidence: tuple[str, ...]
    libtpu: Path | None

    @property
    def attached(self) -> bool:
        return bool(self.evidence)

    def describe(self) -> str:
        """One phrase for notes and reasons: what was seen, and whether JAX can use it."""
        if not self.evidence:
            return "no TPU: no /dev/accel* or /dev/vfio device and no TPU_ACCELERATOR_TYPE"
        seen = ", ".join(self.evidence)
        return f"a TPU ({seen})" + ("" if self.libtpu else "; libtpu is not installed, so JAX cannot use it")


def tpu_presence(env: Mapping[str, str] | None = None, dev: str = "") -> TpuPresence:
    """The TPU of this machine from device files and the environment alone: no libtpu is loaded, no lock taken.

    env: the environment to read (default os.environ). dev: a root prefixed to the device globs (tests).
    """
    import glob
    import importlib.util

    env = os.environ if env is None else env
    evidence = [path[len(dev):] for pattern in DEVICE_GLOBS for path in sorted(glob.glob(dev + pattern))]
    if env.get("TPU_ACCELERATOR_TYPE"):
        evidence.append(f"TPU_ACCELERATOR_TYPE={env['TPU_ACCELERATOR_TYPE']}")
    libtpu = None
    try:
        spec = importlib.util.find_spec("libtpu")  # finds the package without running its __init__
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            if (Path(root) / "libtpu.so").is_file():
                libtpu = (Path(root) / "libtpu.so").resolve()
                break
    return TpuPresence(tuple(evidence), libtpu)


def keep_jax_off_the_tpu() -> TpuPresence:
    """On a machine with a TPU, make JAX in this process and in every process it starts use the CPU only.

    libtpu lets one process hold a chip: a parent that opened it for its reference would make every worker that
    imports JAX fail ("Unable to initialize backend 'tpu': ABORTED: ... libtpu multi-process lockfile"). So the
    parent and the CPU workers run with JAX_PLATFORMS=cpu (inherited through the environment) and the one TPU
    worker gets the user's setting back (`tpu_worker_environment`). Call it before JAX starts a backend: with JAX
    imported already, its config is set too (JAX reads JAX_PLATFORMS when it is imported).
    """
    import sys

    found = tpu_presence()
    if not found.attached or os.environ.get("JAX_PLATFORMS", "").strip() == "cpu":
        return found
    os.environ.setdefault(SAVED_PLATFORMS_ENV, os.environ.get("JAX_PLATFORMS", ""))
    os.environ["JAX_PLATFORMS"] = "cpu"
    if "jax" in sys.modules:
        import jax

        jax.config.update("jax_platforms", "cpu")
    return found


def tpu_worker_environment() -> dict[str, str]:
    """The variables the one process that owns the TPU starts with: JAX on the TPU (and the CPU beside it, for
    host copies), whatever `keep_jax_off_the_tpu` set for the others; the TPU_* variables pass as they are."""
    saved = os.environ.get(SAVED_PLATFORMS_ENV, "")
    return {"JAX_PLATFORMS": saved if saved and saved != "cpu" else "tpu,cpu"}


def tpu_variables(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The TPU_* variables of `env` (default os.environ): what libtpu reads for its topology. Under `env -i`
    without them libtpu asks a cloud metadata server, about 30 s per key, which looks like a hang."""
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(TPU_ENV_PREFIX)}
