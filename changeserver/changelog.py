"""The change log: an embedded, durable SQLite database in WAL mode.

``changes`` is keyed by (selector, lsn, idx) so one selector's changes are one
range scan. Reads give their bounds as row values, ``(lsn, idx) > (?, ?)``, which
SQLite seeks to; the same bound spelt ``lsn > ? OR (lsn = ? AND idx > ?)`` made it
scan the selector's whole history on every read. It has no second index: the
global first/last live in ``meta``, and retention deletes one range per selector
(those ``selectors`` lists), so an index on (lsn, idx) only cost every insert a
second B-tree write (-20% CPU).
``commits`` has one row per transaction (commit time, size) so retention by age
cuts at whole transactions. ``meta`` keeps what must outlive the rows: the
durable commit LSN (the restart point), the first and last sequence held, and
the newest sequence retention removed (older ``since`` values are too old).

``selectors`` has one row per selector held, with the commit LSN of its newest
change: a read of every selector's changes in a window (the bridge's read by
table) seeks only the selectors that changed since the window's start, not
every selector there ever was.

Table events (TRUNCATE, DROP, CREATE, an ALTER that redefines rows: ``pgoutput``) are
records like changes, under selectors no request names; ``reset_after`` finds the first
one a reader of given selectors must hear of.

``relations`` holds each relation (table and columns) that change bodies name
by id: a body is the change's pgoutput message (see ``pgoutput``), decoded
against its relation when served. Relations are never dropped, so an id a
durable body names always resolves.

``synchronous=FULL``: the durable LSN is confirmed to Postgres, which then
recycles that WAL; with NORMAL a power loss could drop WAL-mode commits that
Postgres no longer has, a permanent gap. Batching many transactions into one
SQLite transaction keeps the fsync cost per change small.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import marshal
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from changebroker.changeserver import pgoutput
from changebroker.changeserver.pgoutput import Record, Relation
from changebroker.changeserver.sequence import Sequence

_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    selector TEXT NOT NULL, lsn INTEGER NOT NULL, idx INTEGER NOT NULL,
    txid INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (selector, lsn, idx)) WITHOUT ROWID;
DROP INDEX IF EXISTS changes_sequence;
CREATE TABLE IF NOT EXISTS commits (
    lsn INTEGER PRIMARY KEY, unix_us INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS relations (id INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS selectors (
    selector TEXT PRIMARY KEY, last_lsn INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS selectors_last_lsn ON selectors (last_lsn);
"""
_FORMAT = 2  # PRAGMA user_version of a log this version writes (_format_of)
_MARSHAL_VERSION = 4  # pinned: logs written by one Python stay readable by the next

_META_KEYS = (
    "durable_lsn",
    "end_lsn",
    "first_lsn",
    "first_idx",
    "last_lsn",
    "last_idx",
    "purged_lsn",
    "purged_idx",
    "slot_created",  # 1 once replication started from our slot: its absence is then a loss
    "retired",  # 1 once a markdown dropped our slot at shutdown: nothing continues this log
)
_TABLES = ("changes", "commits", "relations", "selectors", "meta")


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
    # Commit LSN of the newest transaction made durable: every transaction that committed at
    # or before it is held (a ``since`` past it names a change this log has yet to receive).
    durable: int = 0


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
        version = _format_of(self._conn, self.path)
        self._conn.executescript(_SCHEMA)
        self._conn.executemany(
            "INSERT OR IGNORE INTO meta (key, value) VALUES (?, 0)", [(k,) for k in _META_KEYS]
        )
        _upgrade(self._conn, version)
        self._relations = {
            _load_relation(data): id
            for id, data in self._conn.execute("SELECT id, data FROM relations")
        }
        self._new_relations: list[tuple[int, bytes]] = []  # stored with the next batch

    def relation_id(self, relation: Relation) -> int:
        """The id bodies name ``relation`` by; a new one is stored with the next write."""
        found = self._relations.get(relation)
        if found is None:
            found = self._relations[relation] = len(self._relations) + 1
            self._new_relations.append((found, _dump_relation(relation)))
        return found

    def _meta(self) -> dict[str, int]:
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    def durable(self) -> tuple[int, int]:
        """(commit LSN, end LSN) of the newest transaction made durable; (0, 0) when none."""
        meta = self._meta()
        return meta["durable_lsn"], meta["end_lsn"]

    def slot_created(self) -> bool:
        with self._lock:  # a peer's seed request asks from the event loop's thread
            return self._meta()["slot_created"] == 1

    def note_slot_created(self) -> None:
        with self._lock:
            self._conn.execute("UPDATE meta SET value = 1 WHERE key = 'slot_created'")

    def retired(self) -> bool:
        with self._lock:
            return self._meta()["retired"] == 1

    def note_retired(self) -> None:
        """Our slot is about to be dropped for good (a markdown's shutdown)."""
        with self._lock:
            self._conn.execute("UPDATE meta SET value = 1 WHERE key = 'retired'")

    def copy_to(self, target: Path) -> None:
        """A consistent copy of the whole log at ``target`` (SQLite's online backup)."""
        source = _connect(self.path)
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()

    def import_seed(self, seed: Path) -> None:
        """Replace this log's content, whole, by a peer's copy (``copy_to``): its changes, its
        relations and its bounds and durable position; replication goes on from there with a
        slot that is already ours (``slot_created``), skipping what the copy holds."""
        with self._lock:
            conn = self._conn
            conn.execute("ATTACH DATABASE ? AS seed", (str(seed),))
            try:
                ours = conn.execute("PRAGMA main.user_version").fetchone()[0]
                theirs = conn.execute("PRAGMA seed.user_version").fetchone()[0]
                if ours != theirs:
                    raise ValueError(
                        f"the peer's change log is format {theirs}, ours {ours}:"
                        " run the same changebroker version on every server of a fleet"
                    )
                with _immediate(conn):
                    for table in _TABLES:
                        conn.execute(f"DELETE FROM main.{table}")
                        conn.execute(f"INSERT INTO main.{table} SELECT * FROM seed.{table}")
                    conn.executemany(
                        "INSERT OR IGNORE INTO meta (key, value) VALUES (?, 0)",
                        [(k,) for k in _META_KEYS],
                    )
                    _set_meta(conn, {"slot_created": 1, "retired": 0})
            finally:
                conn.execute("DETACH DATABASE seed")
            self._relations = {
                _load_relation(data): id
                for id, data in conn.execute("SELECT id, data FROM relations")
            }
            self._new_relations = []

    def restart_after_gap(self, start_lsn: int) -> None:
        """Changes up to ``start_lsn`` (a new slot's start) are lost: drop what the log holds,
        and mark everything before ``start_lsn`` as removed, so a reader of any position
        handed out so far gets SNAPSHOT_TOO_OLD rather than a silent gap."""
        with self._lock:
            conn = self._conn
            with _immediate(conn):
                conn.execute("DELETE FROM changes")
                conn.execute("DELETE FROM commits")
                # The log is empty: first = last, both before the gap; the next write
                # starts the log again (first <= purged).
                meta = self._meta()
                updates = {
                    "purged_lsn": start_lsn,
                    "purged_idx": 0,
                    "first_lsn": meta["last_lsn"],
                    "first_idx": meta["last_idx"],
                    "durable_lsn": max(meta["durable_lsn"], start_lsn),
                    "end_lsn": max(meta["end_lsn"], start_lsn),
                }
                _set_meta(conn, updates)

    def write(self, records: list[Record], commits: list[Commit]) -> None:
        """Store a batch of whole transactions (in commit order) in one SQLite transaction."""
        if not commits:
            return
        newest = {record[0]: record[1] for record in records}  # selector -> its last LSN
        with self._lock:
            conn = self._conn
            with _immediate(conn):
                conn.executemany(
                    "INSERT INTO relations (id, data) VALUES (?, ?)", self._new_relations
                )
                conn.executemany(
                    "INSERT INTO changes (selector, lsn, idx, txid, data) VALUES (?, ?, ?, ?, ?)",
                    records,
                )
                conn.executemany(
                    "INSERT INTO commits (lsn, unix_us, size) VALUES (?, ?, ?)",
                    [(c.lsn, c.unix_us, c.size) for c in commits if c.size],
                )
                conn.executemany(_NEWEST_CHANGE, newest.items())
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
                _set_meta(conn, updates)
            self._new_relations = []

    def purge(self, before_unix_us: int) -> int:
        """Drop whole transactions committed before ``before_unix_us``; returns changes dropped."""
        with self._lock:
            conn = self._conn
            with _immediate(conn):
                row = conn.execute(
                    "SELECT lsn, size FROM commits WHERE lsn ="
                    " (SELECT max(lsn) FROM commits WHERE unix_us < ?)",
                    (before_unix_us,),
                ).fetchone()
                if row is None:
                    return 0
                cutoff, size = row
                dropped = 0
                for (selector,) in conn.execute("SELECT selector FROM selectors").fetchall():
                    dropped += conn.execute(
                        "DELETE FROM changes WHERE selector = ? AND lsn <= ?", (selector, cutoff)
                    ).rowcount
                conn.execute("DELETE FROM selectors WHERE last_lsn <= ?", (cutoff,))
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
                _set_meta(conn, updates)
                return int(dropped)

    def close(self) -> None:
        self._conn.close()


class LogReader:
    """The read side for the API: its own connection, used from the event loop's thread."""

    def __init__(self, path: Path) -> None:
        self._conn = _connect(path)
        self._relations: dict[int, Relation] = {}
        self._matched: dict[tuple[int, tuple[str, ...]], bool] = {}  # (relation, patterns)

    def relation(self, id: int) -> Relation:
        """The relation a durable body names (relations are immutable: cached for good)."""
        found = self._relations.get(id)
        if found is None:
            (data,) = self._conn.execute(
                "SELECT data FROM relations WHERE id = ?", (id,)
            ).fetchone()
            found = self._relations[id] = _load_relation(data)
        return found

    def read(
        self, selectors: list[str], since: Sequence, limit: int, snapshot: Snapshot | None
    ) -> tuple[Bounds, list[tuple[int, int, int, bytes]]]:
        """Bounds and up to ``limit`` (lsn, idx, txid, data) after ``since``, consistently."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            bounds = _bounds(conn)
            rows: list[tuple[int, int, int, bytes]] = []
            if limit > 0 and selectors:
                marks = ",".join("?" * len(selectors))
                sql = (
                    f"SELECT lsn, idx, txid, data FROM changes WHERE selector IN ({marks})"
                    " AND (lsn, idx) > (?, ?)"
                )
                params: list[object] = [*selectors, since.lsn, since.index]
                if snapshot is not None:
                    condition, values = _unseen_by(snapshot)
                    sql += condition
                    params += values
                sql += " ORDER BY lsn, idx LIMIT ?"
                rows = conn.execute(sql, [*params, limit]).fetchall()
            return bounds, rows
        finally:
            conn.execute("COMMIT")

    def reset_after(
        self, selectors: list[str], since: Sequence, snapshot: Snapshot | None
    ) -> tuple[Sequence, str] | None:
        """The first table event after ``since`` (and, with ``snapshot``, not visible in it)
        that may have removed or redefined rows of ``selectors``: its sequence and what
        happened; ``None`` when there is none. Table events are few: one seek."""
        resets = [pgoutput.RESET_EVERY]
        if pgoutput.NO_SELECTOR in selectors:
            resets.append(pgoutput.RESET_UNSELECTED)
        query = (
            f"SELECT lsn, idx, data FROM changes WHERE selector IN ({','.join('?' * len(resets))})"
            " AND (lsn, idx) > (?, ?)"
        )
        params: list[object] = [*resets, since.lsn, since.index]
        if snapshot is not None:
            condition, values = _unseen_by(snapshot)
            query += condition
            params += values
        row = self._conn.execute(query + " ORDER BY lsn, idx LIMIT 1", params).fetchone()
        if row is None:
            return None
        lsn, idx, data = row
        table = self.relation(pgoutput.BODY.unpack_from(data)[2]).table
        return Sequence(
            lsn, idx
        ), f"{table} {pgoutput.table_event_detail(data, pgoutput.BODY.size)}"

    def read_tables(
        self, patterns: tuple[str, ...], since: Sequence, limit: int
    ) -> tuple[Bounds, list[tuple[int, int, int, bytes]]]:
        """Every change after ``since`` of the tables ``patterns`` (``fnmatch`` globs of
        ``schema.table``) match, whatever its selector, from a window of at most ``limit``
        changes of any table; ``bounds.last`` is the window's end, so a reader moves past
        the changes of other tables too.

        The window is found in ``commits`` (one row per transaction, with its size), then
        each selector's range of it is read by primary key: no scan of the whole log.
        """
        conn = self._conn
        conn.execute("BEGIN")
        try:
            bounds = _bounds(conn)
            if limit <= 0 or since >= bounds.last:
                return bounds, []
            end, counted = bounds.last, 0
            for lsn, size in conn.execute(
                "SELECT lsn, size FROM commits WHERE lsn >= ? ORDER BY lsn LIMIT ?",
                (since.lsn, limit + 1),
            ):
                first = since.index + 1 if lsn == since.lsn else 0
                if counted + size - first >= limit:
                    end = Sequence(lsn, first + limit - counted - 1)
                    break
                counted += max(0, size - first)
            selectors = [
                selector
                for (selector,) in conn.execute(
                    "SELECT selector FROM selectors WHERE last_lsn >= ?", (since.lsn,)
                )
            ]
            if not selectors:
                return bounds, []
            marks = ",".join("?" * len(selectors))
            rows = conn.execute(
                f"SELECT lsn, idx, txid, data FROM changes WHERE selector IN ({marks})"
                " AND (lsn, idx) > (?, ?) AND (lsn, idx) <= (?, ?) ORDER BY lsn, idx",
                [*selectors, since.lsn, since.index, end.lsn, end.index],
            ).fetchall()
            wanted = [row for row in rows if self._matches(row[3], patterns)]
            return dataclasses.replace(bounds, last=end), wanted
        finally:
            conn.execute("COMMIT")

    def _matches(self, data: bytes, patterns: tuple[str, ...]) -> bool:
        relation_id = pgoutput.BODY.unpack_from(data)[2]
        key = (relation_id, patterns)
        found = self._matched.get(key)
        if found is None:
            if len(self._matched) > 10_000:
                self._matched.clear()
            table = self.relation(relation_id).table
            found = self._matched[key] = any(fnmatch.fnmatchcase(table, p) for p in patterns)
        return found

    def bounds(self) -> Bounds:
        """First, last and newest purged sequence held now."""
        return _bounds(self._conn)

    def oldest_commit_unix_us(self) -> int | None:
        """Commit time of the oldest transaction held (what retention removes next)."""
        row = self._conn.execute(
            "SELECT unix_us FROM commits WHERE lsn = (SELECT min(lsn) FROM commits)"
        ).fetchone()
        return None if row is None else int(row[0])

    def version(self) -> int:
        """Changes whenever another connection (the writer, retention) committed."""
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._conn.close()


def _unseen_by(snapshot: Snapshot) -> tuple[str, list[object]]:
    """The condition (and its parameters) that keeps only the transactions ``snapshot``
    could not see."""
    return (
        f" AND (txid >= ? OR txid IN ({','.join('?' * len(snapshot.xip))}))",
        [snapshot.xmax, *snapshot.xip],
    )


def _dump_relation(relation: Relation) -> bytes:
    return marshal.dumps((relation.table, relation.columns), _MARSHAL_VERSION)


def _load_relation(data: bytes) -> Relation:
    table, columns = marshal.loads(data)
    return Relation(table, tuple(columns))


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taking the write lock at once; committed when the block ends,
    rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _set_meta(conn: sqlite3.Connection, updates: dict[str, int]) -> None:
    conn.executemany(
        "UPDATE meta SET value = ? WHERE key = ?", [(v, k) for k, v in updates.items()]
    )


_NEWEST_CHANGE = (
    "INSERT INTO selectors (selector, last_lsn) VALUES (?, ?)"
    " ON CONFLICT (selector) DO UPDATE SET last_lsn = excluded.last_lsn"
)


def _format_of(conn: sqlite3.Connection, path: Path) -> int:
    """The log's format (``PRAGMA user_version``): 1, pgoutput messages with a relation id; 2,
    ``selectors`` lists every selector held; 0, a new log. A log holding changes without a
    format was written before any release, in a form this version does not read."""
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    holds_changes = (
        version == 0
        and conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'changes'"
        ).fetchone()
    )
    if holds_changes and conn.execute("SELECT 1 FROM changes LIMIT 1").fetchone():
        conn.close()
        raise ValueError(
            f"{path} holds changes in a format no release wrote (marshal-encoded rows):"
            " move its directory away, and the changeserver starts a new change log"
        )
    return version


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Bring the log to this format, step by step; each step commits with the version it
    reaches, so one interrupted runs again, whole."""
    if version == 0:
        conn.execute(f"PRAGMA user_version = {_FORMAT}")
    elif version < 2:
        _list_selectors(conn)


def _list_selectors(conn: sqlite3.Connection) -> None:
    """Fill ``selectors`` from the changes held (format 2)."""
    with _immediate(conn):
        (selector,) = conn.execute("SELECT min(selector) FROM changes").fetchone()
        while selector is not None:  # each step a seek on the primary key
            (lsn,) = conn.execute(
                "SELECT max(lsn) FROM changes WHERE selector = ?", (selector,)
            ).fetchone()
            conn.execute(_NEWEST_CHANGE, (selector, lsn))
            (selector,) = conn.execute(
                "SELECT min(selector) FROM changes WHERE selector > ?", (selector,)
            ).fetchone()
        conn.execute("PRAGMA user_version = 2")


def _bounds(conn: sqlite3.Connection) -> Bounds:
    """First, last and newest purged sequence, as the ``meta`` table holds them."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    return Bounds(
        Sequence(meta["first_lsn"], meta["first_idx"]),
        Sequence(meta["last_lsn"], meta["last_idx"]),
        Sequence(meta["purged_lsn"], meta["purged_idx"]),
        meta["durable_lsn"],
    )
