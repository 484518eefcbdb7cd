"""One backend's results.json row, built once from what its stages returned (`outcomes.RowOutcomes`).

No stage writes a row: each returns its outcome, and this is the only place that turns outcomes into the
`BackendResult` the reports, the recommendation and the gate read; its status and reason are
`verdict.decide`'s. Reasons are kept as results.json keeps them: a converter's colours removed, any other
control character escaped (`files.text.clean_message`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..exporting.precision import split_variant
from ..exporting.registry import display
from ..files.text import clean_message
from ..results import BackendResult
from .outcomes import RowOutcomes
from .verdict import decide


def build_row(outcomes: RowOutcomes, interrupted: bool = False) -> BackendResult:
    """The row of `outcomes.backend`: its status and reason decided by `verdict.decide`, every other field
    from the export's and the check's outcomes (None or empty where that stage was not reached)."""
    status, reason = decide(outcomes, interrupted)
    ex, check = outcomes.exported, outcomes.check
    ran = check if check is not None and check.failure is None else None  # no figures from a failed run
    bench = ran.bench if ran is not None else None
    for size in bench.sizes if bench is not None else []:
        size.reason = clean_message(size.reason)
    return BackendResult(
        outcomes.backend, status, clean_message(reason), display=display(outcomes.backend),
        artifact=ex.artifact if ex is not None else None,
        export_seconds=ex.seconds if ex is not None else None,
        export_cpu_seconds=ex.cpu_seconds if ex is not None else None,
        binding=list(ex.binding) if ex is not None else [],
        parity=ran.parity if ran is not None else None,
        error_vs_float64=dict(ran.error_vs_float64) if ran is not None and ran.error_vs_float64 is not None else None,
        bench=bench,
        native=check.native if check is not None else None,
        warnings=list(ex.warnings) if ex is not None else [],
        export_setup=ex.setup if ex is not None else None,
        export_peak_rss_bytes=ex.peak_rss_bytes if ex is not None else None,
        export_child_peak_rss_bytes=ex.child_peak_rss_bytes if ex is not None else None,
        weights=dict(ex.weights) if ex is not None else None,
        versions=dict(ex.versions) if ex is not None else {},
        requires=dict(ex.requires) if ex is not None else {},
        supports=dict(ex.supports) if ex is not None else {},
        precision=split_variant(outcomes.backend)[1],
        accuracy=ran.accuracy if ran is not None else None,
        precision_facts=ex.precision_facts if ex is not None else None,
        artifact_bytes=ex.artifact_bytes if ex is not None else None)


def build_rows(outcomes: Mapping[str, RowOutcomes], order: Sequence[str], interrupted: bool = False
               ) -> dict[str, BackendResult]:
    """Every row, in the compare's order."""
    return {name: build_row(outcomes[name], interrupted) for name in order}
