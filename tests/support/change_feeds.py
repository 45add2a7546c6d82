"""For tests of change feed consumers: random writes to the changeserver harness's ``items``
table (tests/support/changeserver.py), what the table holds of a selector, and a consumer's
copy of it built from what a feed hands out."""

from __future__ import annotations

import random
import sqlite3
import threading
from dataclasses import dataclass, field

import psycopg

from changebroker.client import (
    Change,
    Item,
    Operation,
    Row,
    SnapshotRow,
    SnapshotStart,
    sequence_order,
)
from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness

SELECTORS = ("a", "b")
WANTED = "a"
# A delete's old row then has the selector: with only the key in it, the delete would go to
# the rows without a selector (changeserver/README.md "Selectors").
FULL_OLD_ROWS = "ALTER TABLE items REPLICA IDENTITY FULL"


def selector_rows(dsn: str, selector: str = WANTED) -> dict[int, str | None]:
    """``items`` of ``selector``: id -> name."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, name FROM items WHERE _change_selector = %s", (selector,)
        ).fetchall()
    return dict(rows)


def write(dsn: str, rng: random.Random, transactions: int, first_id: int = 1) -> int:
    """``transactions`` random transactions over both selectors (inserts, updates of the name,
    deletes; a row never changes selector); the next unused id."""
    next_id = first_id
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM items").fetchall()]
        for _ in range(transactions):
            with conn.transaction():
                for _ in range(rng.randint(1, 4)):
                    choice = rng.random()
                    if choice < 0.5 or not ids:
                        conn.execute(
                            "INSERT INTO items VALUES (%s, %s, %s)",
                            (next_id, f"n{rng.randint(0, 999)}", rng.choice(SELECTORS)),
                        )
                        ids.append(next_id)
                        next_id += 1
                    elif choice < 0.8:
                        conn.execute(
                            "UPDATE items SET name = %s WHERE id = %s",
                            (
                                rng.choice([None, f"u{rng.randint(0, 999)}", "ünï'code"]),
                                rng.choice(ids),
                            ),
                        )
                    else:
                        gone = ids.pop(rng.randrange(len(ids)))
                        conn.execute("DELETE FROM items WHERE id = %s", (gone,))
    return next_id


@dataclass
class Writer:
    """:func:`write` in a thread until stopped."""

    dsn: str
    seed: int
    stop: threading.Event = field(default_factory=threading.Event)
    next_id: int = 1

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(self.seed)
        while not self.stop.is_set():
            self.next_id = write(self.dsn, rng, 5, self.next_id)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(timeout=60)


def fence(cs: Harness, fence_id: int) -> str:
    """Insert a row of the other selector and wait until it is served: every write before it
    is then too. Its sequence."""
    cs.sql("INSERT INTO items VALUES (%s, 'fence', 'b')", (fence_id,))
    found: list[str] = []

    def served() -> bool:
        changes = cs.changes(selector="b", limit="100000")["changes"]
        found[:] = [
            c["sequence"]
            for c in changes
            if c["operation"] == 1 and c["newRow"]["id"]["value"] == str(fence_id)
        ]
        return bool(found)

    wait_until(served, timeout=30, what=f"fence row {fence_id} to be served")
    return found[0]


def purge_before(cs: Harness, sequence: str) -> None:
    """Retention: drop every transaction committed before the one ``sequence`` names."""
    lsn = sequence_order(sequence)[0]
    with sqlite3.connect(cs.server.changelog.path) as conn:
        (commit_us,) = conn.execute("SELECT unix_us FROM commits WHERE lsn = ?", (lsn,)).fetchone()
    assert cs.server.changelog.purge(commit_us) > 0


def row_id(row: Row) -> int:
    value = row["id"].value
    assert isinstance(value, int), row
    return value


@dataclass
class Copy:
    """What a consumer holds of ``items``, built from a feed's items: id -> name."""

    rows: dict[int, str | None] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    snapshots: list[SnapshotStart] = field(default_factory=list)

    def apply(self, item: Item) -> None:
        if isinstance(item, SnapshotStart):
            self.rows.clear()
            self.snapshots.append(item)
        elif isinstance(item, SnapshotRow):
            self.rows[row_id(item.row)] = _name(item.row)
        elif isinstance(item, Change):
            self.changes.append(item)
            if item.operation == Operation.DELETE:
                assert item.old_row is not None, item
                self.rows.pop(row_id(item.old_row), None)
            else:
                assert item.new_row is not None, item
                self.rows[row_id(item.new_row)] = _name(item.new_row)


def _name(row: Row) -> str | None:
    value = row["name"].value
    assert value is None or isinstance(value, str), row
    return value
