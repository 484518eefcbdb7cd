"""Sweeps: many targets x formats x machines, each target a `multiexport compare` of its own.

`spec` reads the TOML spec; `session.run_sweep` runs it with the local executor (`local`) or on Ray
(`ray_exec`), journaling every row (`state`) so a killed sweep resumes; `matrix` writes the combined view,
`history` the SQLite result history, `gate` the regression gate over a whole sweep.
"""

from .session import SweepConfig, SweepResult, run_sweep
from .spec import Resources, SweepSpec, SweepTask, load_spec, select

__all__ = ["Resources", "SweepConfig", "SweepResult", "SweepSpec", "SweepTask", "load_spec", "run_sweep", "select"]
