"""The change log file itself: a log written in an older format is upgraded in place (or
refused, when no release wrote it), and a read costs what it returns, not what the log holds
before it."""

from __future__ import annotations

import functools
import marshal
import sqlite3
from pathlib import Path

import pytest

from changebroker.changeserver import changelog, pgoutput
from changebroker.changeserver.changelog import ChangeLog, LogReader
from changebroker.changeserver.pgoutput import Relation
from changebroker.changeserver.sequence import Sequence
from tests.support import pgoutput_messages

_FORMAT_0 = """
CREATE TABLE changes (
    selector TEXT NOT NULL, lsn INTEGER NOT NULL, idx INTEGER NOT NULL,
    txid INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (selector, lsn, idx)) WITHOUT ROWID;
CREATE INDEX changes_sequence ON changes (lsn, idx);
CREATE TABLE commits (lsn INTEGER PRIMARY KEY, unix_us INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def test_a_new_log_is_written_in_the_newest_format(tmp_path: Path) -> None:
    ChangeLog(tmp_path).close()
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (changelog._FORMAT,)


def test_a_log_in_a_format_no_release_wrote_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    row = (1, "public.t", 100, 5, 7, [("id", "1", 23)], None)  # format 0: a marshal-encoded row
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        conn.executescript(_FORMAT_0)
        conn.execute("INSERT INTO changes VALUES ('s', 200, 0, 7, ?)", (marshal.dumps(row, 4),))
    with pytest.raises(ValueError, match=r"format no release wrote.*move its directory away"):
        ChangeLog(tmp_path)
    with sqlite3.connect(tmp_path / "changes.sqlite") as conn:
        tables = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        assert tables == {"changes", "commits", "meta"}
        assert conn.execute("SELECT lsn, data FROM changes").fetchall() == [
            (200, marshal.dumps(row, 4))
        ]
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)


def _filled_log(path: Path, changes_before: int, selectors: int = 2) -> tuple[ChangeLog, Sequence]:
    """A log of ``changes_before`` changes over ``selectors`` selectors, then ten more on the
    first two; the sequence before the ten."""
    log = ChangeLog(path)
    relation_id = log.relation_id(Relation("public.t", (("id", 23),)))
    records: list[pgoutput.Record] = []
    commits = []
    for i in range(changes_before + 10):
        lsn = 1_000 + i
        message = pgoutput_messages.message(pgoutput.INSERT, [("id", str(i), 23)], None)
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
