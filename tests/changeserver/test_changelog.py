"""The change log file itself: a log written in the older body format is upgraded in place."""

from __future__ import annotations

import json
import marshal
import sqlite3
from pathlib import Path
from typing import Any

from changeserver import changes
from changeserver.changelog import ChangeLog, LogReader

_FORMAT_0 = """
CREATE TABLE changes (
    selector TEXT NOT NULL, lsn INTEGER NOT NULL, idx INTEGER NOT NULL,
    txid INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (selector, lsn, idx)) WITHOUT ROWID;
CREATE INDEX changes_sequence ON changes (lsn, idx);
CREATE TABLE commits (lsn INTEGER PRIMARY KEY, unix_us INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def test_format_0_bodies_are_served_as_before(tmp_path: Path) -> None:
    one, two, three = [("id", "1", 23), ("body", None, 25)], [("id", "2", 23)], [("id", "3", 23)]
    rows: list[
        tuple[Any, ...]
    ] = [  # (operation, table, change LSN, commit time, xid, new row, old row)
        (1, "public.t", 100, 5, 7, one, None),
        (2, "public.t", 101, 5, 7, two, None),  # unchanged TOAST left out
        (2, "public.t", 102, 5, 7, [*three, ("body", "x", 25)], [*two, ("body", None, 25)]),
        (3, "public.t", 103, 5, 7, None, [*three, ("body", None, 25)]),
    ]
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        conn.executescript(_FORMAT_0)
        conn.executemany(
            "INSERT INTO changes VALUES ('s', 200, ?, 7, ?)",
            [(idx, marshal.dumps(row, 4)) for idx, row in enumerate(rows)],
        )
    ChangeLog(tmp_path).close()
    reader = LogReader(tmp_path / "changes.sqlite")
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        stored = conn.execute("SELECT lsn, idx, txid, data FROM changes ORDER BY idx").fetchall()
    served = [
        json.loads(changes.to_json(lsn, idx, txid, data, reader.relation))
        for lsn, idx, txid, data in stored
    ]
    for change, (operation, table, change_lsn, _, _, new, old) in zip(served, rows, strict=True):
        assert (change["operation"], change["table"]) == (operation, table)
        assert change["changeSequence"] == change_lsn
        assert change.get("newRow") == _as_served(new)
        assert change.get("oldRow") == _as_served(old)
    reader.close()


def _as_served(row: list[tuple[str, str | None, int]] | None) -> dict[str, Any] | None:
    """A row (name, text, type OID) as /changes gives it (no bool columns here)."""
    if row is None:
        return None
    return {name: {"value": value, "type": oid} for name, value, oid in row}
