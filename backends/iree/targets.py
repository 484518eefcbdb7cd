"""IREE's names for where a module runs: compile targets, runtime drivers, and the artifact's module file."""

from __future__ import annotations

MODULE = "model.vmfb"
DRIVERS = {"llvm-cpu": "local-task", "cuda": "cuda"}  # IREE target -> runtime HAL driver
DEVICE_TARGET = {"cpu": "llvm-cpu", "gpu": "cuda"}  # Runner device -> IREE target
