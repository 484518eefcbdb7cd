"""Small inline-SVG charts for the HTML report: no plotting library, no network, no scripts.

Each function returns an <svg> string. Axes are logarithmic where values span decades (latency,
errors); every series is labelled in a legend so the chart reads without colour.
"""

from __future__ import annotations

import html
import math
import re
from typing import Sequence

PALETTE = ["#ff7f0e", "#8c564b", "#17becf", "#bcbd22", "#e377c2", "#7f7f7f"]
REFERENCE_COLOR = "#444444"
_HEX = re.compile(r"^#[0-9a-fA-F]{6}$")
# One colour per backend in every chart: each backend's own (Backend.color, recorded in results.json).
_colors: dict[str, str] = {}


def set_colors(colors: dict[str, str]) -> None:
    """The colours to draw each backend in (values that are not #rrggbb are ignored: results are input)."""
    _colors.clear()
    _colors.update({k: v for k, v in colors.items() if isinstance(v, str) and _HEX.match(v)})


def color(name: str) -> str:
    if name == "jax":
        return REFERENCE_COLOR
    return _colors.get(name) or PALETTE[sum(map(ord, name)) % len(PALETTE)]
W, H, L, R, T, B = 640, 300, 70, 150, 30, 45  # size and margins


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Decades, plus 2x and 5x marks when the range spans fewer than two decades."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1, 2, 5) if b - a <= 2 else (1,)
    return [m * 10.0 ** e for e in range(a, b + 1) for m in steps]


def _fmt(v: float) -> str:
    return f"{v:g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.0e}"


class _Frame:
    def __init__(self, title: str, xlabel: str, ylabel: str, xr, yr, xlog: bool, ylog: bool, xticks: bool = True):
        self.xlog, self.ylog, self.xticks = xlog, ylog, xticks
        self.x0: float
        self.x1: float
        self.y0: float
        self.y1: float
        self.x0, self.x1 = (math.log10(xr[0]), math.log10(xr[1])) if xlog else xr
        self.y0, self.y1 = (math.log10(yr[0]), math.log10(yr[1])) if ylog else yr
        if self.x1 == self.x0:
            self.x1 += 1
        if self.y1 == self.y0:
            self.y1 += 1
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
            f'aria-label="{html.escape(title)}" font-family="sans-serif" font-size="11">',
            f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{html.escape(title)}</text>',
            f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#999"/>',
            f'<text x="{(W - R + L) / 2}" y="{H - 8}" text-anchor="middle">{html.escape(xlabel)}</text>',
            f'<text x="14" y="{(H - B + T) / 2}" text-anchor="middle" transform="rotate(-90 14 {(H - B + T) / 2})">'
            f"{html.escape(ylabel)}</text>",
        ]
        self._ticks(xr, yr)

    def x(self, v: float) -> float:
        v = math.log10(v) if self.xlog else v
        return L + (v - self.x0) / (self.x1 - self.x0) * (W - L - R)

    def y(self, v: float) -> float:
        v = math.log10(v) if self.ylog else v
        return H - B - (v - self.y0) / (self.y1 - self.y0) * (H - T - B)

    def _ticks(self, xr, yr):
        xt = _log_ticks(*xr) if self.xlog else [xr[0] + i * (xr[1] - xr[0]) / 4 for i in range(5)]
        yt = _log_ticks(*yr) if self.ylog else [yr[0] + i * (yr[1] - yr[0]) / 4 for i in range(5)]
        for v in xt if self.xticks else []:
            px = self.x(v)
            if L - 0.5 <= px <= W - R + 0.5:
                self.parts.append(f'<line x1="{px:.1f}" y1="{H - B}" x2="{px:.1f}" y2="{H - B + 4}" stroke="#666"/>'
                                  f'<text x="{px:.1f}" y="{H - B + 15}" text-anchor="middle">{_fmt(v)}</text>')
        for v in yt:
            py = self.y(v)
            if T - 0.5 <= py <= H - B + 0.5:
                self.parts.append(f'<line x1="{L - 4}" y1="{py:.1f}" x2="{W - R}" y2="{py:.1f}" stroke="#eee"/>'
                                  f'<text x="{L - 6}" y="{py + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')

    def legend(self, names: Sequence[str]):
        for i, name in enumerate(names):
            y = T + 12 + 16 * i
            self.parts.append(f'<rect x="{W - R + 10}" y="{y - 8}" width="10" height="10" fill="{color(name)}"/>'
                              f'<text x="{W - R + 25}" y="{y + 1}">{html.escape(name)}</text>')

    def svg(self) -> str:
        return "".join(self.parts) + "</svg>"


def latency_cdf(series: dict[str, Sequence[float]], title: str) -> str:
    """Per backend: latency quantiles (0..100th percentile) as a cumulative distribution."""
    values = [v for qs in series.values() for v in qs if v > 0]
    if not values:
        return ""
    lo, hi = min(values) * 0.8, max(values) * 1.25
    f = _Frame(title, "latency per call (ms, log)", "percentile", (lo, hi), (0, 100), xlog=True, ylog=False)
    for name, qs in series.items():
        pct = [100 * k / (len(qs) - 1) for k in range(len(qs))]
        pts = " ".join(f"{f.x(max(q, lo)):.1f},{f.y(p):.1f}" for q, p in zip(qs, pct))
        f.parts.append(f'<polyline fill="none" stroke-width="2" stroke="{color(name)}" points="{pts}"/>')
    f.legend(list(series))
    return f.svg()


def lines(series: dict[str, Sequence[tuple[float, float]]], title: str, xlabel: str, ylabel: str) -> str:
    """Per backend: y against x on log-log axes (latency or throughput against batch size)."""
    pts_all = [p for pts in series.values() for p in pts if p[0] > 0 and p[1] > 0]
    if len(pts_all) < 2:
        return ""
    xs, ys = [p[0] for p in pts_all], [p[1] for p in pts_all]
    f = _Frame(title, xlabel, ylabel, (min(xs) * 0.8, max(xs) * 1.25), (min(ys) * 0.8, max(ys) * 1.25), True, True)
    for name, pts in series.items():
        c = color(name)
        coords = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in pts if x > 0 and y > 0)
        f.parts.append(f'<polyline fill="none" stroke-width="2" stroke="{c}" points="{coords}"/>')
        for x, y in pts:
            if x > 0 and y > 0:
                f.parts.append(f'<circle cx="{f.x(x):.1f}" cy="{f.y(y):.1f}" r="3" fill="{c}"/>')
    f.legend(list(series))
    return f.svg()


def error_bars(errors: dict[str, dict[str, float]], tolerances: dict[str, float], title: str) -> str:
    """Max relative error per output leaf (groups) and backend (bars), log scale; dashed line = rtol."""
    leaves = sorted({leaf for per in errors.values() for leaf in per})
    if not leaves:
        return ""
    floor = 1e-9  # a bit-exact backend shows as a stub at the floor, labelled "exact"
    vals = [max(v, floor) for per in errors.values() for v in per.values() if math.isfinite(v)] + \
           [t for t in tolerances.values() if t > 0] + [floor * 10]
    f = _Frame(title, "output leaf", "max relative error (log)", (0, len(leaves)), (floor, max(vals) * 10), False, True,
               xticks=False)
    names = list(errors)
    group_w = (W - L - R) / len(leaves)
    bar_w = group_w * 0.8 / max(len(names), 1)
    for g, leaf in enumerate(leaves):
        gx = L + g * group_w
        f.parts.append(f'<text x="{gx + group_w / 2:.1f}" y="{H - B + 15}" text-anchor="middle">{html.escape(leaf)}</text>')
        for i, name in enumerate(names):
            v = errors[name].get(leaf)
            if v is None:
                continue
            shown = max(v, floor) if math.isfinite(v) else max(vals) * 10
            x = gx + group_w * 0.1 + i * bar_w
            y = f.y(shown)
            f.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w * 0.9:.1f}" height="{H - B - y:.1f}" '
                           f'fill="{color(name)}"><title>{html.escape(name)} {html.escape(leaf)}: {v:.3g}</title></rect>')
            if v == 0:
                f.parts.append(f'<text x="{x + bar_w * 0.45:.1f}" y="{y - 3:.1f}" text-anchor="middle" font-size="9">exact</text>')
        tol = tolerances.get(leaf)
        if tol:
            ty = f.y(tol)
            f.parts.append(f'<line x1="{gx:.1f}" y1="{ty:.1f}" x2="{gx + group_w:.1f}" y2="{ty:.1f}" stroke="#000" '
                           f'stroke-dasharray="4 3"><title>rtol {tol:g}</title></line>')
    f.legend(names)
    return f.svg()


def latency_throughput(series: dict[str, Sequence[tuple[float, float]]], bound_ms: float, title: str) -> str:
    """Per format: p99 latency against the throughput achieved (Server scenario, one point per target rate), log-log,
    with the p99 bound as a dashed line; a point whose p99 is not finite (requests dropped) is left out."""
    kept = {name: [(x, y) for x, y in pts if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
            for name, pts in series.items()}
    kept = {name: pts for name, pts in kept.items() if pts}
    pts_all = [p for pts in kept.values() for p in pts]
    if not pts_all:
        return ""
    xs, ys = [p[0] for p in pts_all], [p[1] for p in pts_all] + [bound_ms]
    f = _Frame(title, "throughput achieved (requests/s, log)", "p99 latency (ms, log)",
               (min(xs) * 0.8, max(xs) * 1.25), (min(ys) * 0.8, max(ys) * 1.25), True, True)
    by = f.y(bound_ms)
    f.parts.append(f'<line x1="{L}" y1="{by:.1f}" x2="{W - R}" y2="{by:.1f}" stroke="#d62728" stroke-dasharray="6 4"/>'
                   f'<text x="{W - R - 4}" y="{by - 4:.1f}" text-anchor="end" fill="#d62728">p99 bound '
                   f'{_fmt(bound_ms)} ms</text>')
    for name, pts in kept.items():
        c = color(name)
        coords = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in pts)
        f.parts.append(f'<polyline fill="none" stroke-width="2" stroke="{c}" points="{coords}"/>')
        for x, y in pts:
            f.parts.append(f'<circle cx="{f.x(x):.1f}" cy="{f.y(y):.1f}" r="3" fill="{c}"/>')
    f.legend(list(kept))
    return f.svg()
