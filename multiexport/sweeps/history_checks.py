"""A history file is someone's SQLite database until proven ours: what is checked before and while it is read.

SQLite runs what a database holds: a trigger fires on an INSERT (`history --add`), a view runs its query
(a recursive one for ever) when `history` reads a table of that name, and any column can hold any type (a
text where a latency belongs, a 100 000-deep JSON where the versions belong). So a history must hold
exactly multiexport's tables and columns (no trigger, no view, nothing else), every query is stopped past
QUERY_SECONDS, and every value read is checked against its column: one line naming the row and column.
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import Any

from ..errors import InputError
from ..files.bounded import TooDeep, loads

TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sweeps (uid TEXT PRIMARY KEY, name TEXT, directory TEXT, created TEXT, finished TEXT,
    commit_id TEXT, shard TEXT, executor TEXT);
CREATE TABLE IF NOT EXISTS rows (sweep_uid TEXT NOT NULL, model TEXT NOT NULL, backend TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT, err_scale REAL, batch INTEGER, p50_ms REAL, ci95_low_ms REAL,
    ci95_high_ms REAL, versions TEXT, producer TEXT, machine TEXT, at TEXT, PRIMARY KEY (sweep_uid, model, backend));
"""
QUERY_SECONDS = 60.0   # any query of a real history takes milliseconds; past this it is not one
MAX_BYTES = 1 << 40    # no size cap in practice (a history grows over years); the file must be regular
_JSON_DEPTH = 8        # versions/producer: flat; machine: flat
_TEXT_LIMIT = 1 << 20


def _expected() -> dict[str, list[tuple]]:
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(TABLES)
        return {t: _columns(con, t) for t in ("meta", "sweeps", "rows")}
    finally:
        con.close()


def _columns(con: sqlite3.Connection, table: str) -> list[tuple]:
    return [tuple(r[1:3]) + (r[3], r[5]) for r in con.execute(f"PRAGMA table_info({table})")]  # name, type, notnull, pk


def guard(con: sqlite3.Connection, where: str) -> None:
    """Nothing the database holds is trusted to run: no schema functions, every statement time-limited."""
    con.execute("PRAGMA trusted_schema = OFF")
    deadline = time.monotonic() + QUERY_SECONDS
    con.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)


def check_schema(con: sqlite3.Connection, where: str) -> None:
    """Exactly multiexport's tables and columns, or nothing (a new file): a trigger, a view, an index of
    someone's or another column is a foreign schema, refused before anything is read or written."""
    objects = con.execute("SELECT type, name FROM sqlite_master").fetchall()
    if not objects:
        return
    expected = _expected()
    foreign = [f"{kind} {name!r}" for kind, name in objects
               if not (kind == "table" and name in expected)
               and not (kind == "index" and isinstance(name, str) and name.startswith("sqlite_autoindex_"))]
    if foreign:
        raise InputError(f"{where} holds {', '.join(foreign[:5])}, not multiexport's schema (its tables meta, "
                         "sweeps and rows, no triggers or views), expected a history written by `multiexport sweep`; "
                         "nothing was run or changed")
    for table, columns in expected.items():
        if _columns(con, table) != columns:
            raise InputError(f"{where} | table {table!r} has columns {[c[0] for c in _columns(con, table)]}, not "
                             "multiexport's, expected a history written by `multiexport sweep`; nothing was changed")


_KINDS = ("text", "text", "text?", "text", "text", "text", "text?", "figure?", "count?", "figure?", "figure?",
          "figure?", "strings", "strings", "object")
_NAMES = ("sweep", "created", "commit", "model", "backend", "status", "reason", "err_scale", "batch", "p50_ms",
          "ci95_low_ms", "ci95_high_ms", "versions", "producer", "machine")


def checked_row(values: tuple, where: str) -> tuple:
    """A row of `History.rows`' query, each value checked against its column (SQLite keeps any type in any
    column), the JSON columns parsed bounded; returns the values for HistoryRow."""
    out = []
    for name, kind, value in zip(_NAMES, _KINDS, values):
        out.append(_value(value, kind, f"{where} | row of model {_short(values[3])}, column {name}"))
    out[6] = out[6] or ""
    return tuple(out)


def _value(value: Any, kind: str, where: str) -> Any:
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None and (optional or kind in ("strings", "object")):
        return {} if kind in ("strings", "object") else None
    if kind == "text":
        if isinstance(value, str) and len(value) <= _TEXT_LIMIT:
            return value
        raise InputError(f"{where} holds {_short(value)}, expected text (at most {_TEXT_LIMIT} characters)")
    if kind == "count":
        if isinstance(value, int) and 0 <= value <= 1 << 40:
            return value
        raise InputError(f"{where} holds {_short(value)}, expected a batch size (an integer >= 0)")
    if kind == "figure":
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
            return float(value)
        raise InputError(f"{where} holds {_short(value)}, expected a finite number >= 0")
    if not isinstance(value, str) or len(value) > _TEXT_LIMIT:
        raise InputError(f"{where} holds {_short(value)}, expected JSON text")
    try:
        parsed = loads(value, _JSON_DEPTH)
    except (TooDeep, ValueError) as exc:
        raise InputError(f"{where} holds unreadable JSON ({exc}), expected a JSON object") from None
    if not isinstance(parsed, dict) or (kind == "strings" and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in parsed.items())):
        raise InputError(f"{where} holds {_short(parsed)}, expected a JSON object"
                         + (" of strings" if kind == "strings" else ""))
    return parsed


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "an integer too large to be a figure"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."
