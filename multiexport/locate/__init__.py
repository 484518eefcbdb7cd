"""`multiexport locate`: where parity breaks. For one trial, every StableHLO op's value in the reference (XLA on
the CPU, checked against jax.jit) paired with the artifact's value for it, the first op that diverges while its
inputs agree, whether the artifact computes that op differently (replayed alone on the artifact's inputs), its
source line and module path, and the ops downstream of it. docs/locate.md describes it."""

from .engine import LocateConfig, locate
from .result import BackendLocation, Finding, LocateResult

__all__ = ["BackendLocation", "Finding", "LocateConfig", "LocateResult", "locate"]
