"""The accuracy budget of reduced-precision rows: defaults per precision, `--accuracy` overrides, the figures.

Defaults (README "Reduced precision"): fp16 keeps cosine >= 0.9999 and SQNR >= 40 dB (float16's 11-bit
significand leaves ~1e-3 relative error per op: ~60 dB on the example nets, so 40 dB is a 100x margin in
noise power); int8 (dynamic or static) keeps cosine >= 0.99 and SQNR >= 20 dB (int8's 256 levels give
~30-45 dB on the example nets; 20 dB is 1 % noise power), and top-1 agreement >= 0.9 / top-5 >= 0.95 on
class scores. Top-k agreement is a fraction of few rows (a compare checks a handful of trials), so it fails
its budget only when the Wilson 95% upper bound of the observed fraction is below it. Error relative to the
scale is reported, not judged, unless asked for. Cosine and SQNR are of the values centred on jax.jit's mean
(the variation is the signal), and a leaf jax.jit gives as a constant is judged by error / scale instead.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from ..errors import UsageError
from ..results.accuracy import METRICS, AccuracyVerdict, Budget, LeafAccuracy

DEFAULT_BUDGETS: dict[str, Budget] = {
    "fp16": Budget(cos=0.9999, sqnr=40.0, top1=0.99, top5=0.99),
    "int8-dynamic": Budget(cos=0.99, sqnr=20.0, top1=0.9, top5=0.95),
    "int8": Budget(cos=0.99, sqnr=20.0, top1=0.9, top5=0.95),
}
# A leaf jax.jit gives as a constant (a zero-initialised head) has no variation for cosine or SQNR: it is judged by
# max error / its scale instead, at these bounds (fp16's ~1e-3 relative step, int8's ~1/127, each with margin).
CONSTANT_ERR = 0.05
CONSTANT_ERR_OF = {"fp16": 1e-2, "int8-dynamic": 0.05, "int8": 0.05}
# A leaf whose name says it holds scores per class (its last axis the classes) gets top-k agreement judged.
_CLASS_SCORES = re.compile(r"(logit|score|prob|class|label|pred)", re.IGNORECASE)


def parse_accuracy(text: str) -> tuple[str, dict[str, float]]:
    """('out.logits', {'top1': 0.99, 'cos': 0.999}) from "out.logits=top1:0.99,cos:0.999"; UsageError otherwise."""
    pattern, sep, spec = text.partition("=")
    if not sep or not pattern.strip() or not spec.strip():
        raise UsageError(f"Accuracy '{text}' | got no LEAF=METRIC:VALUE, expected e.g. out.logits=top1:0.99,cos:0.999")
    figures: dict[str, float] = {}
    for part in spec.split(","):
        name, colon, value = part.strip().partition(":")
        if name not in METRICS or not colon:
            raise UsageError(f"Accuracy '{text}' | got {part.strip()!r}, expected METRIC:VALUE with METRIC one of "
                             f"{', '.join(METRICS)}")
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"Accuracy '{text}' | got {name} {value!r}, expected a number") from None
        if not math.isfinite(number) or number < 0 or (name in ("cos", "top1", "top5") and number > 1):
            raise UsageError(f"Accuracy '{text}' | got {name} {value}, expected a finite number >= 0"
                             + (" and <= 1" if name in ("cos", "top1", "top5") else ""))
        figures[name] = number
    return pattern.strip(), figures


def check_accuracy(overrides: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Validate overrides given from Python (pattern -> {metric: value}) the way the CLI's are."""
    out = {}
    for pattern, figures in overrides.items():
        text = f"{pattern}=" + ",".join(f"{k}:{v}" for k, v in dict(figures).items())
        key, parsed = parse_accuracy(text)
        out[key] = parsed
    return out


def budget_for(leaf: str, precision: str, overrides: Mapping[str, Mapping[str, float]]) -> Budget:
    """The leaf's budget: the precision's default, with the first matching override's figures on top."""
    budget = DEFAULT_BUDGETS.get(precision, Budget())
    for pattern, figures in overrides.items():
        if leaf == pattern or fnmatch.fnmatchcase(leaf, pattern):
            return replace(budget, **figures)
    return budget


def is_class_scores(name: str, shape: Sequence[int], overrides_topk: bool = False) -> bool:
    """Whether a leaf holds class scores on its last axis: named so (logits, scores, probs, ...) or given a top-k
    budget by the user, and with at least 2 classes."""
    return len(shape) >= 1 and shape[-1] >= 2 and (overrides_topk or bool(_CLASS_SCORES.search(name.split(".")[-1])))


def judge(precision: str, outputs: Sequence[Mapping[str, np.ndarray]], refs: Sequence[Mapping[str, np.ndarray]],
          leaves: Sequence[str], overrides: Mapping[str, Mapping[str, float]], synthetic: bool) -> AccuracyVerdict:
    """The accuracy verdict of a reduced-precision row: each output leaf over all trials against jax.jit's."""
    found = []
    for name in leaves:
        budget = budget_for(name, precision, overrides)
        asked_topk = any((leaf_match(name, p) and ("top1" in f or "top5" in f)) for p, f in overrides.items())
        missing = [i for i, o in enumerate(outputs) if name not in o]
        if missing:
            found.append(LeafAccuracy(leaf=name, cosine=0.0, err_scale=math.inf, sqnr_db=-math.inf, top1=None,
                                      top5=None, rows=0, budget=budget, failed=[f"missing in trial {missing[0]}"]))
            continue
        got = [np.asarray(o[name]) for o in outputs]
        want = [np.asarray(r[name]) for r in refs]
        found.append(leaf_accuracy(name, got, want, budget, asked_topk, CONSTANT_ERR_OF.get(precision, CONSTANT_ERR)))
    return AccuracyVerdict(precision=precision, leaves=found, trials=len(outputs), synthetic=synthetic)


def leaf_match(name: str, pattern: str) -> bool:
    """Whether leaf `name` is `pattern` or matches it as a glob."""
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def leaf_accuracy(name: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray], budget: Budget,
                  asked_topk: bool = False, constant_err: float = CONSTANT_ERR) -> LeafAccuracy:
    """The figures of one leaf over trials (`got[i]` against jax.jit's `want[i]`), judged against `budget`.

    Cosine and SQNR are taken on the values centred on jax.jit's mean, so an output that lost its variation (a
    constant where log-probabilities were) cannot pass on its offset alone; a leaf jax.jit gives as a constant
    has no variation to compare and is judged by err/scale (`budget.err`, else `constant_err`). A trial whose
    shape or dtype differs from jax.jit's fails the leaf whatever its figures."""
    for g_i, w_i in zip(got, want):
        if np.shape(g_i) != np.shape(w_i) or np.asarray(g_i).dtype != np.asarray(w_i).dtype:
            what = (f"shape {np.shape(g_i)}, expected {np.shape(w_i)}" if np.shape(g_i) != np.shape(w_i) else
                    f"{np.asarray(g_i).dtype.name}, expected {np.asarray(w_i).dtype.name}")
            return LeafAccuracy(leaf=name, cosine=0.0, err_scale=math.inf, sqnr_db=-math.inf, top1=None, top5=None,
                                rows=0, budget=budget, failed=[f"got {what}"])
    g = np.concatenate([np.asarray(a, np.float64).ravel() for a in got]) if got else np.zeros(0)
    w = np.concatenate([np.asarray(a, np.float64).ravel() for a in want]) if want else np.zeros(0)
    failed = []
    finite = np.isfinite(w)
    same_special = (g[~finite] == w[~finite]) | (np.isnan(g[~finite]) & np.isnan(w[~finite]))
    if (np.isfinite(g) != finite).any() or not same_special.all():
        failed.append("non-finite values where jax.jit's are finite, or other inf/nan than jax.jit's")
    g, w = np.where(finite, g, 0.0), np.where(finite, w, 0.0)
    g = np.where(np.isfinite(g), g, 0.0)
    mean = float(w.mean()) if w.size else 0.0
    gc, wc = g - mean, w - mean
    noise = float(np.sum((g - w) ** 2))
    signal = float(np.sum(wc ** 2))
    norms = math.sqrt(float(np.sum(gc ** 2))) * math.sqrt(signal)
    cosine = float(np.dot(gc, wc) / norms) if norms > 0 else (1.0 if noise == 0 else 0.0)
    scale = float(np.max(np.abs(w))) if w.size else 0.0
    err = float(np.max(np.abs(g - w))) if w.size else 0.0
    err_scale = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    if signal == 0:  # a constant reference: nothing to correlate with, so the error against its scale decides
        budget = replace(budget, cos=None, sqnr=None, err=budget.err if budget.err is not None else constant_err)
    top1 = top5 = None
    rows = 0
    classes = {np.shape(a)[-1] for a in want if np.ndim(a)}
    float_scores = all(np.asarray(a).dtype.kind == "f" for a in want)
    if want and float_scores and len(classes) == 1 and is_class_scores(name, np.shape(want[0]), asked_topk):
        width = classes.pop()
        ranked_got = np.concatenate([np.asarray(a, np.float64).reshape(-1, width) for a in got])
        ranked_want = np.concatenate([np.asarray(a, np.float64).reshape(-1, width) for a in want])
        rows = len(ranked_want)
        best = ranked_want.argmax(axis=-1)
        top1 = float(np.mean(ranked_got.argmax(axis=-1) == best)) if rows else None
        if width > 5 and rows:
            top = np.argsort(-ranked_got, axis=-1)[:, :5]
            top5 = float(np.mean([b in t for b, t in zip(best, top)]))
    checks = (("cos", cosine, budget.cos, True), ("sqnr", sqnr, budget.sqnr, True), ("err", err_scale, budget.err, False),
              ("top1", top1, budget.top1, True), ("top5", top5, budget.top5, True))
    for metric, value, limit, at_least in checks:
        if limit is None or value is None:
            continue
        if metric in ("top1", "top5"):
            # a fraction of a few rows: beyond budget only when even its 95% upper bound is
            high = wilson_upper(value, rows)
            if high < limit:
                failed.append(f"{metric} {_fmt(metric, value)} of {rows} rows (at most {high:.1%} at 95% confidence), "
                              f"budget >= {limit:g}")
        elif (value < limit) if at_least else (value > limit):
            failed.append(f"{metric} {_fmt(metric, value)}, budget {'>=' if at_least else '<='} {limit:g}")
    return LeafAccuracy(leaf=name, cosine=cosine, err_scale=err_scale, sqnr_db=sqnr, top1=top1, top5=top5, rows=rows,
                        budget=budget, failed=failed)


def wilson_upper(fraction: float, n: int, z: float = 1.96) -> float:
    """The upper end of the Wilson score interval (95% at z=1.96) of a fraction observed over n rows: top-k
    agreement over a handful of rows cannot show much, and one changed row must not read as a failed budget."""
    if n <= 0:
        return 1.0
    center = fraction + z * z / (2 * n)
    spread = z * math.sqrt(fraction * (1 - fraction) / n + z * z / (4 * n * n))
    return min(1.0, (center + spread) / (1 + z * z / n))


def _fmt(metric: str, value: float) -> str:
    if metric in ("top1", "top5"):
        return f"{value:.1%}"
    if metric == "sqnr":
        return f"{value:.1f} dB"
    return f"{value:.6g}"
