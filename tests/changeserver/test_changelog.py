"""The change log file itself: a log written in the older body format is upgraded in place,
and a read costs what it returns, not what the log holds before it."""

from __future__ import annotations

import functools
import json
import marshal
import sqlite3
from pathlib import Path
from typing import Any

from changeserver import changelog, changes, pgoutput
from changeserver.changelog import ChangeLog, LogReader
from changeserver.pgoutput import Relation
from changeserver.sequence import Sequence

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
        assert conn.execute("SELECT * FROM selectors").fetchall() == [("s", 200)]
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
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


def _filled_log(path: Path, changes_before: int, selectors: int = 2) -> tuple[ChangeLog, Sequence]:
    """A log of ``changes_before`` changes over ``selectors`` selectors, then ten more on the
    first two; the sequence before the ten."""
    log = ChangeLog(path)
    relation_id = log.relation_id(Relation("public.t", (("id", 23),)))
    records: list[pgoutput.Record] = []
    commits = []
    for i in range(changes_before + 10):
        lsn = 1_000 + i
        message = changelog._message(pgoutput.INSERT, [("id", str(i), 23)], None)
        body = pgoutput.BODY.pack(lsn, 0, relation_id) + message
        selector = i % (selectors if i < changes_before else 2)
        records.append((f"s{selector}", lsn, 0, 7, body))
        commits.append(changelog.Commit(lsn, lsn, 0, 1))
    log.write(records, commits)
    return log, Sequence(1_000 + changes_before - 1, 0)


def _read_costs(path: Path, changes_before: int, selectors: int = 2) -> tuple[int, int]:
    """SQLite's virtual machine steps (in hundreds) of reading the last ten changes of the
    log, by selector and by table."""
    log, since = _filled_log(path, changes_before, selectors)
    reader = LogReader(path / "changes.sqlite")
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    costs = []
    reads = (
        functools.partial(reader.read, ["s0", "s1"], since, 100, None),
        functools.partial(reader.read_tables, ("public.*",), since, 100),
    )
    for read in reads:
        steps = 0
        reader._conn.set_progress_handler(count, 100)
        _, rows = read()
        reader._conn.set_progress_handler(None, 0)
        assert len(rows) == 10
        costs.append(steps)
    reader.close()
    log.close()
    return costs[0], costs[1]


def test_a_read_after_a_sequence_seeks_to_it_whatever_the_log_holds_before(
    tmp_path: Path,
) -> None:
    """Long-pollers and the bridge read just past the newest changes: that read must not
    cost more as the log grows (it scanned each selector's whole history once)."""
    small = _read_costs(tmp_path / "small", 20)
    big = _read_costs(tmp_path / "big", 20_000)
    assert big[0] <= 2 * small[0] + 2, (small, big)
    assert big[1] <= 2 * small[1] + 2, (small, big)


def test_a_read_by_table_seeks_only_the_selectors_that_changed_since(tmp_path: Path) -> None:
    """The bridge reads every selector's changes of its tables: past the newest changes,
    that read must not cost more with each selector the log ever held."""
    few = _read_costs(tmp_path / "few", 20_000, selectors=2)
    many = _read_costs(tmp_path / "many", 20_000, selectors=10_000)
    assert many[1] <= 2 * few[1] + 2, (few, many)


def test_a_log_from_before_the_selector_list_lists_its_selectors_when_opened(
    tmp_path: Path,
) -> None:
    log, _ = _filled_log(tmp_path, 20, selectors=5)
    log.close()
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        conn.execute("DROP TABLE selectors")  # as format 1 wrote it
        conn.execute("PRAGMA user_version = 1")
    ChangeLog(tmp_path).close()
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        listed = dict(conn.execute("SELECT selector, last_lsn FROM selectors").fetchall())
        held = dict(conn.execute("SELECT selector, max(lsn) FROM changes GROUP BY selector"))
        version = conn.execute("PRAGMA user_version").fetchone()
    assert listed == held
    assert len(listed) == 5
    assert version == (2,)
    reader = LogReader(tmp_path / "changes.sqlite")
    _, rows = reader.read_tables(("public.*",), Sequence(0, 0), 100)
    assert len(rows) == 30
    reader.close()
