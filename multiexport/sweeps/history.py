"""The result history: every row of every sweep in one SQLite file, to ask what changed and when.

One row per sweep x model x backend: status, reason, the worst leaf's error relative to its scale, the
median latency with its 95 % interval at the first measured size, the versions the artifact records and
the run's distributions, the machine, and when. A sweep is keyed by the uid in its sweep.json, so
recording it again (a resumed sweep, `multiexport history --add`) replaces its rows, never doubles them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import InputError
from ..files.bounded import open_regular
from ..files.text import visible
from ..results import load_results
from . import matrix
from .history_checks import MAX_BYTES, QUERY_SECONDS, TABLES, check_schema, checked_row, guard
from .state import DONE, SweepDir

SCHEMA_VERSION = 1
TASK_ROW = "*"  # the backend column of a task that ended without results (its state is the status)


@dataclass(frozen=True)
class HistoryRow:
    """One model x backend of one sweep, as recorded.

    sweep: the sweep's name; created: when it started (UTC); commit: the spec's commit. model, backend,
    status, reason: from its results.json (backend "*": the task ended without results, status its state).
    err_scale: worst leaf error relative to its scale. batch, p50_ms, ci95_low_ms, ci95_high_ms: latency at
    the first measured size. versions: the distributions the compare ran with (multiexport, jax, each
    backend's). producer: the versions the artifact records (none when no artifact was made).
    machine: host, CPU, cores, platform.
    """

    sweep: str
    created: str
    commit: str | None
    model: str
    backend: str
    status: str
    reason: str
    err_scale: float | None
    batch: int | None
    p50_ms: float | None
    ci95_low_ms: float | None
    ci95_high_ms: float | None
    versions: dict[str, str]
    producer: dict[str, str]
    machine: dict[str, Any]


@dataclass(frozen=True)
class Change:
    """A row whose status differs from the same model x backend in the sweep before it (`before` None: the
    first sweep that has the row). `versions` lists the distributions the two compares ran with that differ
    (a package added or removed included); None when one of them wrote no results to say."""

    before: HistoryRow | None
    after: HistoryRow
    versions: dict[str, tuple[str | None, str | None]] | None


class History:
    """A history file, created on first write."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def _connect(self, create: bool) -> sqlite3.Connection:
        """A connection to a history of this schema: created when new (`create`), read-only otherwise. A
        database that is not a history is refused before anything is written to it; one that is runs
        nothing it holds (no trigger, no view: refused as a foreign schema) and every query is time-limited."""
        where = f"History '{self.path}'"
        if not create and not os.path.lexists(self.path):
            raise InputError(f"{where} | no such file, expected a history written by `multiexport sweep`")
        if os.path.lexists(self.path):  # a FIFO or device would block or be read for ever: refused first
            os.close(open_regular(self.path, "History", MAX_BYTES, InputError,
                                  "expected an SQLite history written by `multiexport sweep`"))
        try:
            con = (sqlite3.connect(self.path, timeout=30) if create else
                   sqlite3.connect(f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro", uri=True, timeout=30))
        except sqlite3.Error as exc:
            raise InputError(f"{where} | {exc}, expected an SQLite history written by `multiexport sweep`") from None
        try:
            guard(con, where)
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:
                raise InputError(f"{where} | an SQLite database with tables {', '.join(sorted(tables)[:5])} and no "
                                 "multiexport schema, expected a history written by `multiexport sweep` (or a new file)")
            check_schema(con, where)
            if not tables:
                if not create:
                    raise InputError(f"{where} | an empty database, expected a history written by `multiexport sweep`")
                con.executescript(TABLES)
                con.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                con.commit()
            found = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if found is None or found[0] != str(SCHEMA_VERSION):
                raise InputError(f"{where} | schema {found[0] if found else None!r}, expected {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            con.close()
            raise InputError(f"{where} | {exc}, expected an SQLite history written by `multiexport sweep`") from None
        except BaseException:
            con.close()
            raise
        return con

    @contextlib.contextmanager
    def _session(self, create: bool = True) -> Iterator[sqlite3.Connection]:
        con = self._connect(create)
        try:
            yield con
            con.commit()
        except sqlite3.DatabaseError as exc:
            why = (f"a query ran past {QUERY_SECONDS:g} s and was stopped" if "interrupt" in str(exc) else str(exc))
            raise InputError(f"History '{self.path}' | {why}, expected a history written by `multiexport sweep`") from None
        except OverflowError as exc:  # a figure past SQLite's 64-bit integers
            raise InputError(f"History '{self.path}' | a value cannot be stored ({exc}), expected figures a "
                             "compare measures") from None
        finally:
            con.close()

    def check(self) -> None:
        """Refuse now (before a sweep starts) a file that is not a history; create it when new."""
        self._connect(create=True).close()

    # -- writing ------------------------------------------------------------------------------------------

    def record_sweep(self, sweep: SweepDir) -> None:
        m = sweep.meta
        with self._session() as con:
            con.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?, NULL, ?, ?, ?) ON CONFLICT(uid) DO UPDATE SET "
                        "directory = excluded.directory", (m["uid"], m.get("name"), str(sweep.root.resolve()),
                                                           m.get("created"), m.get("commit"), m.get("shard"),
                                                           m.get("executor")))

    def finish_sweep(self, sweep: SweepDir) -> None:
        with self._session() as con:
            con.execute("UPDATE sweeps SET finished = ? WHERE uid = ?",
                        (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), sweep.meta["uid"]))

    def record_row(self, sweep: SweepDir, row: Any) -> None:
        """Record one task's rows (a `matrix.Row`): one per backend from its results.json, or one "*" row."""
        uid, name = sweep.meta["uid"], row.outcome.name
        records = list(_records(sweep, row))
        with self._session() as con:
            con.execute("DELETE FROM rows WHERE sweep_uid = ? AND model = ?", (uid, name))
            con.executemany("INSERT INTO rows VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [(uid, name, *r) for r in records])

    def add(self, directory: Path) -> int:
        """Record an existing sweep directory (every ended row); returns how many tasks it had."""

        sweep = SweepDir.read(directory)
        self.record_sweep(sweep)
        ended = sweep.ended()
        for row in matrix.rows_of(directory, ended, sweep.meta.get("tasks", list(ended))):
            self.record_row(sweep, row)
        return len(ended)

    # -- reading ------------------------------------------------------------------------------------------

    def rows(self, model: str | None = None, backend: str | None = None) -> list[HistoryRow]:
        """Every recorded row (of `model`, `backend` when given), oldest sweep first."""
        query = ("SELECT s.name, s.created, s.commit_id, r.model, r.backend, r.status, r.reason, r.err_scale, "
                 "r.batch, r.p50_ms, r.ci95_low_ms, r.ci95_high_ms, r.versions, r.producer, r.machine FROM rows r JOIN sweeps s "
                 "ON s.uid = r.sweep_uid WHERE (? IS NULL OR r.model = ?) AND (? IS NULL OR r.backend = ?) "
                 "ORDER BY s.created, s.rowid, r.model, r.backend")
        with self._session(create=False) as con:
            found = con.execute(query, (model, model, backend, backend)).fetchall()
        return [HistoryRow(*checked_row(r, f"History '{self.path}'")) for r in found]

    def changes(self, model: str | None = None, backend: str | None = None) -> list[Change]:
        """Every change of status of a model x backend from one sweep to the next that has it, oldest first."""
        last: dict[tuple[str, str], HistoryRow] = {}
        out = []
        for row in self._expanded(self.rows(model, None), backend):
            key = (row.model, row.backend)
            before = last.get(key)
            if before is None or before.status != row.status:
                out.append(Change(before, row, _version_changes(before, row) if before else {}))
            last[key] = row
        return out


    @staticmethod
    def _expanded(rows: Sequence[HistoryRow], backend: str | None) -> Iterator[HistoryRow]:
        """The rows, where a whole task ended without results (backend "*") as that status on every backend
        the model had before: its ONNX row did change, from ok to the task's `failed`."""
        seen: dict[str, list[str]] = {}
        for row in rows:
            if row.backend == TASK_ROW:
                known = seen.get(row.model, [])
                if known:
                    yield from (dataclasses.replace(row, backend=n) for n in known if backend in (None, n))
                elif backend is None:
                    yield row
                continue
            known = seen.setdefault(row.model, [])
            if row.backend not in known:
                known.append(row.backend)
            if backend in (None, row.backend):
                yield row


def _version_changes(a: HistoryRow, b: HistoryRow) -> dict[str, tuple[str | None, str | None]] | None:
    if not a.versions or not b.versions:
        return None  # a task that wrote no results: its versions are unknown, not absent
    names = sorted(set(a.versions) | set(b.versions))
    return {n: (a.versions.get(n), b.versions.get(n)) for n in names if a.versions.get(n) != b.versions.get(n)}


def _records(sweep: SweepDir, row: Any) -> Iterator[tuple]:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    o = row.outcome
    if o.state != DONE:
        yield (TASK_ROW, o.state, o.reason, None, None, None, None, None, "{}", "{}", json.dumps({"host": o.host}), at)
        return

    results = load_results(sweep.row_file(o.name, "results.json"))
    env = results.environment or {}
    machine = {"host": env.get("host") or o.host, "cpu": env.get("cpu"), "cores": env.get("cores"),
               "platform": env.get("platform")}
    run_versions = env.get("versions") or {}
    for name, r in results.backends.items():
        first = r.first_measured()
        lat = first.latency if first else None
        yield (name, r.status.value, " ".join(r.reason.split())[:2000], r.worst_err_scale(),
               first.batch if first else None, lat.p50_ms if lat else None,
               lat.ci95_low_ms if lat else None, lat.ci95_high_ms if lat else None,
               json.dumps(run_versions, sort_keys=True), json.dumps(r.versions, sort_keys=True), json.dumps(machine), at)


def render_rows(rows: Sequence[HistoryRow]) -> str:
    """A terminal table of history rows."""
    lines = [f"{'sweep':<20} {'created':<20} {'model':<24} {'backend':<11} {'status':<22} p50 [95% CI]"]
    for r in rows:
        lat = (f"{r.p50_ms:.3g} ms [{r.ci95_low_ms:.3g}, {r.ci95_high_ms:.3g}]" if r.p50_ms is not None
               and r.ci95_low_ms is not None and r.ci95_high_ms is not None else "-")
        lines.append(visible(f"{r.sweep[:20]:<20} {r.created:<20} {r.model[:24]:<24} {r.backend:<11} {r.status:<22} {lat}"))
    return "\n".join(lines)


def render_changes(changes: Sequence[Change]) -> str:
    """One line per change of status, with what changed in the versions."""
    lines = []
    for c in changes:
        a = c.after
        where = f"sweep {a.sweep!r} ({a.created}{', commit ' + a.commit[:12] if a.commit else ''})"
        if c.before is None:
            lines.append(f"{a.model}/{a.backend}: first recorded as {a.status} in {where}")
            continue
        versions = ("unknown (a task that wrote no results)" if c.versions is None else
                    ", ".join(f"{n} {x or '-'} -> {y or '-'}" for n, (x, y) in c.versions.items()) or "the same")
        lines.append(f"{a.model}/{a.backend}: {c.before.status} -> {a.status} in {where}, after sweep "
                     f"{c.before.sweep!r} ({c.before.created})" + f"; versions: {versions}"
                     + (f"; reason: {' '.join(a.reason.split())[:200]}" if a.reason and a.status != "ok" else ""))
    return "\n".join(visible(line) for line in lines)  # every string came from a database: shown escaped
