"""Reading results.json of schema 1 (multiexport 0.1) as schema 2, so `multiexport diff` compares across
the upgrade: the statuses, the parity verdicts and the latencies mean the same in both.

Schema 2 added fields (each with a default: the backend's display, versions, requires, supports, the
pairing, per-size status) and changed three shapes, converted here: `trials` was a list of names (now
`TrialInfo`s); a size's `native` figures (measured by 0.1's own native loop) moved to the backend's
`native` result, so they are dropped, not guessed; parity statistics gained `err_scale` (the error over
max|reference|), which 0.1 did not record: such leaves are marked `LEGACY_SCALE` so the drift check
skips them instead of treating a missing figure as an error of 0.
"""

from __future__ import annotations

import copy
from typing import Any

LEGACY_SCHEMA = "multiexport.results/1"
LEGACY_SCALE = -1.0  # err_scale of a schema-1 leaf: not recorded (never a real value: errors are >= 0)


def upgrade(data: dict[str, Any], schema: str) -> dict[str, Any]:
    """Schema-1 results data as schema-2 data (a copy; the input is not changed)."""
    out = copy.deepcopy(data)
    out["schema"] = schema
    trials = out.get("trials")
    if isinstance(trials, list):
        out["trials"] = [{"name": t} if isinstance(t, str) else t for t in trials]
    rows = list((out.get("backends") or {}).values()) if isinstance(out.get("backends"), dict) else []
    reference = out.get("reference")
    for row in [*rows, reference]:
        if not isinstance(row, dict):
            continue
        # Any shape may be wrong here (a crafted file): only what has the expected shape is converted, the rest
        # is left for from_json to refuse with the field's path.
        bench = row.get("bench")
        for size in _items(bench, "sizes"):
            if isinstance(size, dict):
                size.pop("native", None)
        parity = row.get("parity")
        for leaf in _items(parity, "leaves"):
            stats = leaf.get("stats") if isinstance(leaf, dict) else None
            if isinstance(stats, dict) and "err_scale" not in stats:
                stats["err_scale"] = LEGACY_SCALE
    return out


def _items(parent: Any, key: str) -> list[Any]:
    """parent[key] when parent is an object and that is a list, else no items."""
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, list) else []
