"""The change log: an embedded, durable SQLite database in WAL mode.

``changes`` is keyed by (selector, lsn, idx) so one selector's changes are one
range scan; an index on (lsn, idx) serves the global first/last and retention.
``commits`` has one row per transaction (commit time, size) so retention by age
cuts at whole transactions. ``meta`` keeps what must outlive the rows: the
durable commit LSN (the restart point), the first and last sequence held, and
the newest sequence retention removed (older ``since`` values are too old).

``synchronous=FULL``: the durable LSN is confirmed to Postgres, which then
recycles that WAL; with NORMAL a power loss could drop WAL-mode commits that
Postgres no longer has, a permanent gap. Batching many transactions into one
SQLite transaction keeps the fsync cost per change small.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from changeserver.sequence import Sequence

_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    selector TEXT NOT NULL, lsn INTEGER NOT NULL, idx INTEGER NOT NULL,
    txid INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (selector, lsn, idx)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS changes_sequence ON changes (lsn, idx);
CREATE TABLE IF NOT EXISTS commits (
    lsn INTEGER PRIMARY KEY, unix_us INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

_META_KEYS = (
    "durable_lsn",
    "end_lsn",
    "first_lsn",
    "first_idx",
    "last_lsn",
    "last_idx",
    "purged_lsn",
    "purged_idx",
)


# One change as stored: (selector, commit LSN, index in its transaction, 64-bit txid, body).
# A plain tuple: one is built per change on the ingest path, and executemany takes it as is.
Record = tuple[str, int, int, int, bytes]


@dataclass(frozen=True)
class Commit:
    lsn: int
    end_lsn: int
    unix_us: int
    size: int


@dataclass(frozen=True)
class Bounds:
    first: Sequence
    last: Sequence
    purged: Sequence  # the newest sequence retention removed; ZERO when none


@dataclass(frozen=True)
class Snapshot:
    """A ``txid_current_snapshot()``: ``xmin:xmax:xip,...``."""

    xmin: int
    xmax: int
    xip: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Snapshot:
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), tuple(int(x) for x in xip.split(",") if x))


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


class ChangeLog:
    """The writer side: one connection, used by the replication thread (and purge)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "changes.sqlite"
        self._conn = _connect(self.path)
        self._lock = threading.Lock()  # the writer thread and purge share the connection
        self._conn.executescript(_SCHEMA)
        self._conn.executemany(
            "INSERT OR IGNORE INTO meta (key, value) VALUES (?, 0)", [(k,) for k in _META_KEYS]
        )

    def _meta(self) -> dict[str, int]:
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    def durable(self) -> tuple[int, int]:
        """(commit LSN, end LSN) of the newest transaction made durable; (0, 0) when none."""
        meta = self._meta()
        return meta["durable_lsn"], meta["end_lsn"]

    def write(self, records: Iterable[Record], commits: list[Commit]) -> None:
        """Store a batch of whole transactions (in commit order) in one SQLite transaction."""
        if not commits:
            return
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO changes (selector, lsn, idx, txid, data) VALUES (?, ?, ?, ?, ?)",
                    records,
                )
                conn.executemany(
                    "INSERT INTO commits (lsn, unix_us, size) VALUES (?, ?, ?)",
                    [(c.lsn, c.unix_us, c.size) for c in commits if c.size],
                )
                sized = [c for c in commits if c.size]
                updates = {"durable_lsn": commits[-1].lsn, "end_lsn": commits[-1].end_lsn}
                if sized:
                    updates["last_lsn"] = sized[-1].lsn
                    updates["last_idx"] = sized[-1].size - 1
                    meta = self._meta()
                    # Nothing held yet, or retention removed all: the batch starts the log.
                    if meta["first_lsn"] == 0 or meta["first_lsn"] <= meta["purged_lsn"]:
                        updates["first_lsn"] = sized[0].lsn
                        updates["first_idx"] = 0
                conn.executemany(
                    "UPDATE meta SET value = ? WHERE key = ?", [(v, k) for k, v in updates.items()]
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def purge(self, before_unix_us: int) -> int:
        """Drop whole transactions committed before ``before_unix_us``; returns changes dropped."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT lsn, size FROM commits WHERE lsn ="
                    " (SELECT max(lsn) FROM commits WHERE unix_us < ?)",
                    (before_unix_us,),
                ).fetchone()
                if row is None:
                    conn.execute("COMMIT")
                    return 0
                cutoff, size = row
                dropped = conn.execute("DELETE FROM changes WHERE lsn <= ?", (cutoff,)).rowcount
                conn.execute("DELETE FROM commits WHERE lsn <= ?", (cutoff,))
                first = conn.execute("SELECT min(lsn) FROM commits").fetchone()[0]
                meta = self._meta()
                first_lsn, first_idx = (
                    (first, 0) if first is not None else (meta["last_lsn"], meta["last_idx"])
                )
                updates = {
                    "purged_lsn": cutoff,
                    "purged_idx": size - 1,
                    "first_lsn": first_lsn,
                    "first_idx": first_idx,
                }
                conn.executemany(
                    "UPDATE meta SET value = ? WHERE key = ?", [(v, k) for k, v in updates.items()]
                )
                conn.execute("COMMIT")
                return int(dropped)
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._conn.close()


class LogReader:
    """The read side for the API: its own connection, used from the event loop's thread."""

    def __init__(self, path: Path) -> None:
        self._conn = _connect(path)

    def read(
        self, selectors: list[str], since: Sequence, limit: int, snapshot: Snapshot | None
    ) -> tuple[Bounds, list[tuple[int, int, int, bytes]]]:
        """Bounds and up to ``limit`` (lsn, idx, txid, data) after ``since``, consistently."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            bounds = Bounds(
                Sequence(meta["first_lsn"], meta["first_idx"]),
                Sequence(meta["last_lsn"], meta["last_idx"]),
                Sequence(meta["purged_lsn"], meta["purged_idx"]),
            )
            rows: list[tuple[int, int, int, bytes]] = []
            if limit > 0 and selectors:
                marks = ",".join("?" * len(selectors))
                sql = (
                    f"SELECT lsn, idx, txid, data FROM changes WHERE selector IN ({marks})"
                    " AND (lsn > ? OR (lsn = ? AND idx > ?))"
                )
                params: list[object] = [*selectors, since.lsn, since.lsn, since.index]
                if snapshot is not None:
                    # Keep only transactions the snapshot could not see.
                    sql += f" AND (txid >= ? OR txid IN ({','.join('?' * len(snapshot.xip))}))"
                    params += [snapshot.xmax, *snapshot.xip]
                sql += " ORDER BY lsn, idx LIMIT ?"
                rows = conn.execute(sql, [*params, limit]).fetchall()
            return bounds, rows
        finally:
            conn.execute("COMMIT")

    def version(self) -> int:
        """Changes whenever another connection (the writer, retention) committed."""
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._conn.close()
