"""Checks of the environment JAX will start in, before any work: a setting that cannot work is exit 2
naming the variable and what to change, not a crash, an exit 70 or XLA's own exit 1 (the parity-failure code).

XLA parses `XLA_FLAGS` when its first backend starts and an unknown flag kills the whole process from C++
(it cannot be caught), so a set `XLA_FLAGS` is tried once in a child process first (about a second, only
when the variable is set). `JAX_PLATFORMS` naming a platform this machine lacks fails inside jax (an
empty AssertionError in jax 0.10) on the first array: it is tried in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys

from .errors import EnvironmentProblem

_PROBE = "import jax; jax.devices()"


def check_jax_environment() -> None:
    """Raise EnvironmentProblem when XLA_FLAGS or JAX_PLATFORMS, as set, keep JAX from starting."""
    flags = os.environ.get("XLA_FLAGS", "").strip()
    if flags:
        _check_xla_flags(flags)
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        _check_platforms(platforms)


def _check_xla_flags(flags: str) -> None:
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return  # the probe itself could not run: the real run will say what is wrong
    if proc.returncode == 0:
        return
    lines = [line for line in proc.stderr.splitlines() if "XLA_FLAGS" in line or "flag" in line.lower()]
    if not lines:
        return  # JAX failed for another reason (JAX_PLATFORMS is checked next)
    said = lines[-1].split("] ", 1)[-1].strip()
    raise EnvironmentProblem(f"Environment 'XLA_FLAGS={flags}' | XLA refuses it: {said}; remove the flag from "
                             "XLA_FLAGS (or unset XLA_FLAGS)")


def _check_platforms(platforms: str) -> None:
    import jax

    try:
        jax.devices()
    except Exception as exc:  # noqa: BLE001 - jax raises RuntimeError, or a bare AssertionError (0.10)
        said = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        raise EnvironmentProblem(f"Environment 'JAX_PLATFORMS={platforms}' | JAX cannot start it on this machine "
                                 f"({said}); unset JAX_PLATFORMS or set it to a platform this machine has, e.g. "
                                 "JAX_PLATFORMS=cpu") from exc
