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

from ..exporting.instrument import compiled, isolate_op
from ..exporting.intermediates import Site
from ..exporting.native_section import MLIR_DTYPES
from ..measure.tolerance import SENSITIVITY_MARGIN, default_tolerance
from ..results.parity import Tolerance
from .pairing import SiteError, compare_site
from .reference import Reference

# Ops whose output can move far more than their input on some inputs (the verdict help names them).
ILL_CONDITIONED = ("stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.power", "stablehlo.log",
                   "stablehlo.divide", "stablehlo.reduce", "stablehlo.subtract", "stablehlo.add", "stablehlo.rsqrt",
                   "stablehlo.sqrt", "stablehlo.tan", "stablehlo.dot_general", "stablehlo.convolution")


@dataclass(frozen=True)
class Replay:
    """The replay of one site's op on the artifact's inputs.

    verdict: "op-differs" (the artifact's output is not the op's on its own inputs), "faithful" (it is: the
        difference came in through the inputs and was amplified), "undetermined" (it differs, but on inputs
        borrowed from the reference downstream of an earlier divergence: no evidence either way), or
        "not-replayed" (why in `text`).
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
        call = compiled(isolated)
        results = call(args)
        sensitivity = rounding_sensitivity(call, args, site.result)
    except Exception as exc:  # XLA refusing a hand-built module is a fact to report, not a crash
        return Replay(site.key, "not-replayed", f"not replayed: XLA could not run the op alone: "
                      f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    # Two faithful computations of one op differ by its rounding (another summation order): the op's own
    # sensitivity to a rounding step of its inputs widens the tolerance as compare widens a leaf's (x10), without
    # compare's cap: a wrong op (a padding, a transposed weight, a rounding) moves its result by a fraction of its
    # values, far past any rounding; an op whose rounding alone moves it that far cannot tell, and says so.
    base = default_tolerance(site.dtype)
    tol = Tolerance(base.rtol, base.atol, max(base.scale, SENSITIVITY_MARGIN * (sensitivity or 0.0)))
    versus = compare_site(site, results[site.result], got[site.key], tol)
    inputs = ("the artifact's own values" if not borrowed else
              f"the artifact's values, the reference's for {', '.join(borrowed)} (unmapped in the artifact)")
    worst_in = max((errors[k].relative for k in isolated.operands if k in errors and errors[k].status != "unmapped"),
                   default=0.0)
    out = errors[site.key].relative if site.key in errors else 0.0
    amplification = out / worst_in if worst_in > 0 else None
    rounding = f"; a rounding step of its inputs moves it {sensitivity:.2g}" if sensitivity else ""
    tainted = _after_divergence(borrowed, by_key, errors)
    if versus.status == "diverge" and tainted:
        # The borrowed values are the reference's, downstream of an op the artifact already computes apart from
        # it: not what the artifact's op received, so a mismatch here is no evidence against this op.
        text = (f"undetermined: the replay took the reference's values for {', '.join(tainted)} (unmapped in the "
                "artifact), which lie downstream of an op that already diverges, so they are not what the "
                f"artifact's op received ({versus.relative:.3g} of max|ref| from that replay)")
        return Replay(site.key, "undetermined", text, versus.max_abs, versus.relative, amplification, inputs)
    upstream = _upstream_error(borrowed, by_key, errors) if versus.status == "diverge" else 0.0
    if upstream > 0:
        # The borrowed values are the reference's; the artifact computed them from values it holds up to
        # `upstream` of max|ref| apart from the reference's. If moving them that much moves this op as far as
        # the difference seen, the replay cannot tell a wrong op from that difference.
        spread = borrowed_sensitivity(call, args, site.result,
                                      [i for i, k in enumerate(isolated.operands) if k in borrowed], upstream)
        if spread is not None and versus.relative <= SENSITIVITY_MARGIN * spread:
            text = (f"undetermined: the replay took the reference's values for {', '.join(borrowed)} (unmapped in "
                    f"the artifact), which the artifact computes from values up to {upstream:.2g} of max|ref| "
                    f"from the reference's; moving them that much moves this op {spread:.2g} of max|ref|, as far "
                    f"as the {versus.relative:.3g} seen")
            return Replay(site.key, "undetermined", text, versus.max_abs, versus.relative, amplification, inputs)
    if versus.status == "diverge":
        text = (f"the artifact computes this op differently: on its own inputs it is {versus.relative:.3g} of "
                f"max|ref| from the op's result (XLA, this op alone{rounding})")
        return Replay(site.key, "op-differs", text, versus.max_abs, versus.relative, amplification, inputs)
    gain = f", {amplification:.3g}x its inputs' relative error" if amplification is not None else ""
    if sensitivity is not None and sensitivity > UNDECIDABLE:
        text = (f"this op is too ill-conditioned on these inputs for a replay to tell a wrong op from rounding: a "
                f"rounding step of its inputs moves it {sensitivity:.2g} of max|ref|, and the artifact is "
                f"{versus.relative:.2g} from XLA's result")
        return Replay(site.key, "faithful", text, versus.max_abs, versus.relative, amplification, inputs)
    came = (f"the difference came in through its inputs and was amplified here{gain}" if amplification is not None
            else "the difference is this op's own rounding (another order of operations)")
    text = (f"the artifact computes this op faithfully on its own inputs (within {versus.relative:.2g} of max|ref| "
            f"of XLA's result{rounding}): {came}")
    return Replay(site.key, "faithful", text, versus.max_abs, versus.relative, amplification, inputs)


def _upstream_error(borrowed: list[str], by_key: Mapping[str, Site], errors: Mapping[str, SiteError]) -> float:
    """The largest relative difference (of max|ref|) the artifact shows at a mapped ancestor of the borrowed
    inputs: how far apart from the reference's the values they are computed from may already be."""
    worst, seen, todo = 0.0, set(), list(borrowed)
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in errors and errors[k].status != "unmapped":
            worst = max(worst, errors[k].relative)
            continue  # its own value is the artifact's: what is above it is accounted for by it
        todo.extend(o for o in (by_key[k].operands if k in by_key else ()) if o not in seen)
    return worst


def borrowed_sensitivity(call: Any, args: list[np.ndarray], result: int, which: list[int], relative: float
                         ) -> float | None:
    """How far the op's result moves (of its max |value|) when the float inputs at `which` move by `relative`
    of their max |value| each, in a random direction per element (seeded), the worst of DRAWS draws."""
    rng = np.random.default_rng(1)
    exact = np.asarray(call(args)[result], np.float64)
    scale = float(np.max(np.abs(exact[np.isfinite(exact)]), initial=0.0))
    moving = [i for i in which if np.issubdtype(args[i].dtype, np.floating)]
    if not moving or scale == 0.0:
        return None
    worst = 0.0
    for _ in range(DRAWS):
        moved = list(args)
        for i in moving:
            a = args[i]
            step = relative * float(np.max(np.abs(a[np.isfinite(a)]), initial=0.0))
            moved[i] = (a + np.where(rng.random(a.shape) < 0.5, -step, step)).astype(a.dtype)
        out = np.asarray(call(moved)[result], np.float64)
        both = np.isfinite(out) & np.isfinite(exact)
        if both.any():
            worst = max(worst, float(np.max(np.abs(out[both] - exact[both]))))
    return worst / scale


def _after_divergence(borrowed: list[str], by_key: Mapping[str, Site], errors: Mapping[str, SiteError]) -> list[str]:
    """The borrowed inputs with a diverging op among their ancestors (themselves included)."""
    tainted = []
    for key in borrowed:
        seen, todo = set(), [key]
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            if k in errors and errors[k].status == "diverge":
                tainted.append(key)
                break
            todo.extend(o for o in (by_key[k].operands if k in by_key else ()) if o not in seen)
    return tainted


DRAWS = 2  # perturbed replays per op (measure/rounding.py draws 3 for a whole model)
UNDECIDABLE = 0.05  # past this sensitivity (of max|ref|) a replay cannot tell a wrong op from rounding


def rounding_sensitivity(call: Any, args: list[np.ndarray], result: int) -> float | None:
    """How far the op's result moves when every float input moves by one rounding step (one ulp, random
    direction, seeded), as a fraction of the result's max |value|: the op's own share of the
    difference two faithful implementations show. None for an op with no float input or an all-zero result."""
    rng = np.random.default_rng(0)
    exact = np.asarray(call(args)[result], np.float64)
    scale = float(np.max(np.abs(exact[np.isfinite(exact)]), initial=0.0))
    floats = [np.issubdtype(a.dtype, np.floating) for a in args]
    if not any(floats) or scale == 0.0:
        return None
    worst = 0.0
    for _ in range(DRAWS):
        moved = [np.nextafter(a, np.where(rng.random(a.shape) < 0.5, -np.inf, np.inf).astype(a.dtype)) if f else a
                 for a, f in zip(args, floats)]
        out = np.asarray(call(moved)[result], np.float64)
        both = np.isfinite(out) & np.isfinite(exact)
        if both.any():
            worst = max(worst, float(np.max(np.abs(out[both] - exact[both]))))
    return worst / scale


def _dtype(type_text: str) -> np.dtype | None:
    found = re.search(r"(?:<|x)([a-z]+[0-9A-Za-z]*|complex<f(?:32|64)>)>$", type_text)
    name = MLIR_DTYPES.get(found.group(1)) if found else None
    if name is None:
        return None
    if name.startswith(("bfloat16", "float8")):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)
