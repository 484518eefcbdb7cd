"""What `locate` found, as data: per backend the first diverging op, who is at fault, and its cone; written to
locate.json and read back by the report (no JAX needed)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..exporting.intermediates import Site
from .pairing import SiteError
from .replay import Replay

SCHEMA = "multiexport.locate/1"


@dataclass(frozen=True)
class Finding:
    """One diverging site: where it is, how far off, and (for candidates) its replay."""

    site: Site
    error: SiteError
    replay: Replay | None = None

    def to_json(self) -> dict[str, Any]:
        return {"site": self.site.to_json(), "error": self.error.to_json(),
                "replay": self.replay.to_json() if self.replay else None}

    def line(self) -> str:
        """`op17 stablehlo.convolution f32[1,8,8,16] at model.py:42 (Conv_0): max abs 0.31, 0.19 of max|ref|`."""
        s, e = self.site, self.error
        where = f" at {s.location}" if s.location else ""
        scope = f" ({s.scope})" if s.scope else ""
        return (f"{s.key} {s.op} {s.dtype}{list(s.shape)}{where}{scope}: max abs {e.max_abs:.3g}, "
                f"{e.relative:.3g} of max|ref| {e.max_ref:.3g}, {e.bad} of {e.size} elements beyond tolerance")


@dataclass(frozen=True)
class BackendLocation:
    """`locate`'s answer for one backend.

    backend, artifact: what was examined. how: how its intermediates were obtained. recompiled: the values come
    from a re-compile of the shipped module with outputs added. mapped/total: sites with a value / all sites.
    unmapped: why sites could not be mapped, reason -> count. outputs: the artifact's final outputs against
    jax.jit in this trial (one line); failing: whether they are beyond tolerance. first: the first diverging
    op whose inputs agree; culprit: the first such op that the artifact computes differently on its own inputs
    (replayed); cone: diverging ops downstream of the culprit (else the first). verdict: one paragraph.
    error: set when the backend could not be examined (then the rest is empty). reduced: the --reduce directory.
    """

    backend: str
    artifact: str = ""
    how: str = ""
    recompiled: bool = False
    mapped: int = 0
    total: int = 0
    unmapped: Mapping[str, int] = field(default_factory=dict)
    outputs: str = ""
    failing: bool = False
    first: Finding | None = None
    culprit: Finding | None = None
    cone: tuple[Finding, ...] = ()
    verdict: str = ""
    error: str = ""
    reduced: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "artifact": self.artifact, "how": self.how, "recompiled": self.recompiled,
                "mapped": self.mapped, "total": self.total, "unmapped": dict(self.unmapped), "outputs": self.outputs,
                "failing": self.failing, "first": self.first.to_json() if self.first else None,
                "culprit": self.culprit.to_json() if self.culprit else None,
                "cone": [f.to_json() for f in self.cone], "verdict": self.verdict, "error": self.error,
                "reduced": self.reduced}


@dataclass(frozen=True)
class LocateResult:
    """Everything one `locate` run found.

    target: the target's name. trial: the trial examined and how it was made. reference: how the instrumented
    reference compares with jax.jit. backends: one answer per backend. cross: what the backends' outputs say
    about each other (all agree with each other but not with jax.jit?). versions: the producers and runtimes.
    """

    target: str
    trial: str
    trial_origin: str
    reference: str
    backends: tuple[BackendLocation, ...]
    cross: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "target": self.target, "trial": self.trial, "trial_origin": self.trial_origin,
                "reference": self.reference, "backends": [b.to_json() for b in self.backends], "cross": self.cross,
                "versions": dict(self.versions)}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
