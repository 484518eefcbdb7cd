"""Who is at fault at a diverging op: replay it alone, in XLA, on the artifact's own inputs to it.

An op whose output differs while its inputs agree (within tolerance) either computes something else (the
converter or runtime changed it: a padding, a rounding, a transposed weight) or is ill-conditioned on these
inputs (rounding-level input differences amplified: an exp of huge logits, a sum that cancels). Running the
reference semantics of that one op (`isolate_op`, compiled by XLA on the CPU) on the artifact's values of its
inputs separates the two: if the artifact's output equals the replay, the artifact computes the op faithfully
and the difference is amplification; if not, the op itself is computed differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..exporting.instrument import isolate_op
from ..exporting.intermediates import Site
from ..exporting.native_section import MLIR_DTYPES
from ..measure.tolerance import default_tolerance
from .pairing import SiteError, compare_site
from .reference import Reference, run_module

# Ops whose output can move far more than their input on some inputs (the verdict help names them).
ILL_CONDITIONED = ("stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.power", "stablehlo.log",
                   "stablehlo.divide", "stablehlo.reduce", "stablehlo.subtract", "stablehlo.add", "stablehlo.rsqrt",
                   "stablehlo.sqrt", "stablehlo.tan", "stablehlo.dot_general", "stablehlo.convolution")


@dataclass(frozen=True)
class Replay:
    """The replay of one site's op on the artifact's inputs.

    verdict: "op-differs" (the artifact's output is not the op's on its own inputs), "faithful" (it is: the
        difference came in through the inputs and was amplified), or "not-replayed" (why in `text`).
    max_abs, relative: the artifact's output against the replay (absolute, and of max|replay|).
    amplification: the output's relative error over its worst input's (None when the inputs are exact).
    inputs: where the inputs came from. text: one line for the report.
    """

    key: str
    verdict: str
    text: str
    max_abs: float = 0.0
    relative: float = 0.0
    amplification: float | None = None
    inputs: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "verdict": self.verdict, "text": self.text, "max_abs": self.max_abs,
                "relative": self.relative, "amplification": self.amplification, "inputs": self.inputs}


def replay(reference: Reference, site: Site, got: Mapping[str, Any], errors: Mapping[str, SiteError],
           feed: Mapping[str, np.ndarray]) -> Replay:
    """Replay `site`'s op on the artifact's values of its inputs (the reference's where the artifact has none)."""
    if site.key not in got:
        return Replay(site.key, "not-replayed", "not replayed: the artifact gives no value for this op")
    try:
        isolated = isolate_op(reference.source, site.index)
    except ValueError as exc:
        return Replay(site.key, "not-replayed", f"not replayed: {exc}")
    by_key = {s.key: s for s in reference.sites}
    args, borrowed = [], []
    for key, type_text in zip(isolated.operands, isolated.operand_types):
        dtype = _dtype(type_text)
        if key.startswith("arg"):
            value = np.asarray(feed[reference.arg_leaves[int(key[3:])]])
        elif key in got and key in by_key:
            value = np.broadcast_to(np.asarray(got[key]), by_key[key].shape)
        elif key in reference.values:
            value = reference.values[key]
            borrowed.append(key)
        else:
            return Replay(site.key, "not-replayed", f"not replayed: its input {key} has no value here")
        args.append(np.ascontiguousarray(value.astype(dtype) if dtype else value))
    try:
        results = run_module(isolated, args)
    except Exception as exc:  # XLA refusing a hand-built module is a fact to report, not a crash
        return Replay(site.key, "not-replayed", f"not replayed: XLA could not run the op alone: "
                      f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    versus = compare_site(site, results[site.result], got[site.key], default_tolerance(site.dtype))
    inputs = ("the artifact's own values" if not borrowed else
              f"the artifact's values, the reference's for {', '.join(borrowed)} (unmapped in the artifact)")
    worst_in = max((errors[k].relative for k in isolated.operands if k in errors and errors[k].status != "unmapped"),
                   default=0.0)
    out = errors[site.key].relative if site.key in errors else 0.0
    amplification = out / worst_in if worst_in > 0 else None
    if versus.status == "diverge":
        text = (f"the artifact computes this op differently: on its own inputs it is {versus.relative:.3g} of "
                f"max|ref| from the op's result (XLA, this op alone)")
        return Replay(site.key, "op-differs", text, versus.max_abs, versus.relative, amplification, inputs)
    gain = f", {amplification:.3g}x its inputs' relative error" if amplification is not None else ""
    text = (f"the artifact computes this op faithfully on its own inputs (within {versus.relative:.2g} of max|ref| "
            f"of XLA's result): the difference came in through its inputs and was amplified here{gain}")
    return Replay(site.key, "faithful", text, versus.max_abs, versus.relative, amplification, inputs)


def _dtype(type_text: str) -> np.dtype | None:
    found = re.search(r"(?:<|x)([a-z]+[0-9A-Za-z]*|complex<f(?:32|64)>)>$", type_text)
    name = MLIR_DTYPES.get(found.group(1)) if found else None
    if name is None:
        return None
    if name.startswith(("bfloat16", "float8")):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)
