"""The per-call floor of a runtime: a measurement instrument, not an example model.

`compare --floor` compares this target through every timed runtime beside the model, so what one call
costs on each calling path alone (the harness, the runtime's dispatch, the copies) is known and can be
subtracted by eye from the model's latency.
"""

from __future__ import annotations

import numpy as np

from ..leaves.target import Target

SPEC = "multiexport.measure.floor:floor"  # the TARGET string workers resolve


def floor() -> Target:
    """One add on 8 floats: what a call costs is the calling path alone."""
    return Target(lambda x: x + 1.0, args=(np.zeros(8, np.float32),), name="floor")
