"""Pairing an artifact's intermediate values with the reference's, site by site, and finding where they part.

A site *agrees* when every element is within the dtype's parity tolerance (`measure.tolerance`: |got - ref| <=
atol + scale * max|ref| + rtol * |ref|, non-finite elements equal), *diverges* otherwise, and is *unmapped* when
the format could not give its value. A *candidate* is a diverging site whose mapped inputs all agree: the first
place where a difference appears. The cone of a site is every site downstream of it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..exporting.intermediates import Site
from ..measure.tolerance import default_tolerance
from ..results.parity import Tolerance


@dataclass(frozen=True)
class SiteError:
    """One site's pairing.

    status: "agree", "diverge" or "unmapped". max_abs: the largest |got - ref| over finite elements.
    max_ref: the largest |ref|. bad: how many elements are beyond tolerance (non-finite mismatches included).
    note: for unmapped, why; otherwise what else is known (the artifact's module has another op here).
    """

    key: str
    status: str
    max_abs: float = 0.0
    max_ref: float = 0.0
    bad: int = 0
    size: int = 0
    note: str = ""

    @property
    def relative(self) -> float:
        """max_abs as a fraction of max|ref| (max_abs itself when the reference is all zero)."""
        return self.max_abs / self.max_ref if self.max_ref else self.max_abs

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "status": self.status, "max_abs": self.max_abs, "max_ref": self.max_ref,
                "relative": self.relative, "bad": self.bad, "size": self.size, "note": self.note}


def tolerance_of(site: Site, overrides: Mapping[str, Tolerance] | None = None) -> Tolerance:
    """The tolerance a site is paired with: an override for its dtype name, else the dtype's parity default."""
    return (overrides or {}).get(site.dtype) or default_tolerance(site.dtype)


def compare_site(site: Site, ref: np.ndarray, got: Any, tol: Tolerance, note: str = "") -> SiteError:
    """Pair one site's reference value with the artifact's (broadcast to the site's shape)."""
    try:
        value = np.broadcast_to(np.asarray(got), site.shape)
    except ValueError:
        return SiteError(site.key, "diverge", float("inf"), 0.0, int(np.prod(site.shape)), int(np.prod(site.shape)),
                         f"the artifact's value has shape {np.shape(got)}, expected {site.shape}")
    a, b = _wide(value), _wide(np.asarray(ref))
    fa, fb = np.isfinite(a), np.isfinite(b)
    with np.errstate(invalid="ignore"):
        nonfinite_bad = ~(fa & fb) & ~((a == b) | (np.isnan(a) & np.isnan(b)))
    both = fa & fb
    max_ref = float(np.max(np.abs(b[fb]))) if fb.any() else 0.0
    diff = np.zeros(a.shape)
    np.subtract(a, b, out=diff, where=both)
    np.abs(diff, out=diff)
    allowed = tol.atol + tol.scale * max_ref + tol.rtol * np.abs(np.where(both, b, 0.0))
    bad = int(np.count_nonzero(nonfinite_bad) + np.count_nonzero(both & (diff > allowed)))
    max_abs = float(diff.max()) if diff.size else 0.0
    return SiteError(site.key, "diverge" if bad else "agree", max_abs, max_ref, bad, int(a.size), note)


def _wide(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "c":
        return np.abs(a.astype(np.complex128))
    if a.dtype == bool:
        return a.astype(np.float64)
    return a.astype(np.float64)


def pair(sites: Sequence[Site], ref: Mapping[str, np.ndarray], got: Mapping[str, Any],
         unmapped: Mapping[str, str], notes: Mapping[str, str] | None = None,
         overrides: Mapping[str, Tolerance] | None = None) -> dict[str, SiteError]:
    """Site key -> its pairing, for every site."""
    out = {}
    for site in sites:
        if site.key in got:
            out[site.key] = compare_site(site, ref[site.key], got[site.key], tolerance_of(site, overrides),
                                         (notes or {}).get(site.key, ""))
        else:
            out[site.key] = SiteError(site.key, "unmapped", note=unmapped.get(site.key, "cannot map: not given"))
    return out


def candidates(sites: Sequence[Site], errors: Mapping[str, SiteError]) -> list[Site]:
    """Diverging sites whose every mapped input agrees (inputs that are arguments or constants agree: the
    artifact is fed the same values and holds the same program), in data-flow order."""
    out = []
    for site in sites:
        if errors[site.key].status != "diverge":
            continue
        if all(errors[o].status != "diverge" for o in site.operands if o in errors):
            out.append(site)
    return out


def cone(sites: Sequence[Site], start: Site, errors: Mapping[str, SiteError], limit: int) -> list[Site]:
    """The first `limit` diverging sites downstream of `start` (reading it, directly or through others)."""
    reached = {start.key}
    out: list[Site] = []
    for site in sites:
        if site.index <= start.index:
            continue
        if any(o in reached for o in site.operands):
            reached.add(site.key)
            if errors[site.key].status == "diverge" and len(out) < limit:
                out.append(site)
    return out


def align(reference: Sequence[Site], own: Sequence[Site]) -> tuple[dict[str, str], dict[str, str]]:
    """(reference key -> own key, reference key -> note) pairing an artifact's own module's sites with the
    reference's by op sequence (op name, shape, dtype), as a diff aligns lines: equal runs pair one to one; a
    replaced run of equal length pairs one to one too, noted (the artifact's module has another op there);
    anything else stays unpaired (inserted or dropped ops), and an op that reads an inserted op is noted."""
    ref_sig = [(s.op, s.shape, s.dtype) for s in reference]
    own_sig = [(s.op, s.shape, s.dtype) for s in own]
    keys: dict[str, str] = {}
    notes: dict[str, str] = {}
    own_by_key = {o.key: o for o in own}
    matcher = difflib.SequenceMatcher(a=ref_sig, b=own_sig, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for r, o in zip(reference[i1:i2], own[j1:j2]):
                keys[r.key] = o.key
                if (r.op, r.shape, r.dtype) != (o.op, o.shape, o.dtype):
                    notes[r.key] = (f"the artifact's module has {o.op} {list(o.shape)} {o.dtype} here, the reference "
                                    f"{r.op} {list(r.shape)} {r.dtype}")
    paired = set(keys.values())
    extra = {o.key: o for o in own if o.key not in paired}
    for r in reference:
        counterpart = own_by_key.get(keys.get(r.key, ""))
        reads = [extra[k].op for k in (counterpart.operands if counterpart else ()) if k in extra]
        if reads:
            notes[r.key] = (f"in the artifact's module this op reads {', '.join(reads)}, an op the reference has not"
                            + (f"; {notes[r.key]}" if r.key in notes else ""))
    return keys, notes
