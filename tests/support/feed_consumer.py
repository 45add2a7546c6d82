"""A change feed consumer in a process of its own, for tests that SIGKILL it::

    python -m tests.support.feed_consumer URL SELECTOR POSITIONS COPY FORMAT LAST_ID

It applies each item to a SQLite copy of ``items`` (id -> name) in ``COPY``, recording in
the same transaction the change's sequence and which run applied it; a run records the
position it started from. The position is kept in the file ``POSITIONS``. It exits 0 once
it has applied the insert of row ``LAST_ID``.
"""

from __future__ import annotations

import sqlite3
import sys

from changebroker.client import (
    Change,
    ChangeFeed,
    FilePositionStore,
    Operation,
    SnapshotRow,
    SnapshotStart,
)
from tests.support.change_feeds import row_id

LIMIT = 7  # small answers: many positions stored, many places to be killed between them

SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE IF NOT EXISTS applied (sequence TEXT NOT NULL, run INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (run INTEGER PRIMARY KEY, started_from TEXT);
"""


def main(argv: list[str]) -> int:
    url, selector, positions, copy, wire_format, last_id = argv
    db = sqlite3.connect(copy, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    with ChangeFeed(
        url,
        [selector],
        store=FilePositionStore(positions),
        format=wire_format,  # type: ignore[arg-type]
        limit=LIMIT,
        block=1,
    ) as feed:
        run = db.execute("INSERT INTO runs (started_from) VALUES (?)", (feed.position,)).lastrowid
        for item in feed:
            db.execute("BEGIN")
            if isinstance(item, SnapshotStart):
                db.execute("DELETE FROM rows")
            elif isinstance(item, SnapshotRow):
                db.execute(
                    "INSERT OR REPLACE INTO rows VALUES (?, ?)",
                    (row_id(item.row), item.row["name"].value),
                )
            elif isinstance(item, Change):
                db.execute("INSERT INTO applied VALUES (?, ?)", (item.sequence, run))
                if item.operation == Operation.DELETE:
                    assert item.old_row is not None
                    db.execute("DELETE FROM rows WHERE id = ?", (row_id(item.old_row),))
                else:
                    assert item.new_row is not None
                    db.execute(
                        "INSERT OR REPLACE INTO rows VALUES (?, ?)",
                        (row_id(item.new_row), item.new_row["name"].value),
                    )
            db.execute("COMMIT")
            if (
                isinstance(item, Change)
                and item.operation == Operation.INSERT
                and item.new_row is not None
                and row_id(item.new_row) == int(last_id)
            ):
                return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
