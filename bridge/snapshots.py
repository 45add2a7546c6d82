"""Snapshots: a table's existing rows as ``S`` events, consistent with the change stream
(the watermark approach of Netflix's DBLog), read in key-ordered chunks: no long
transaction, no lock that blocks writers.

One chunk:

1. the low watermark: a new mark in ``changebroker_watermarks``, in a transaction of its own;
2. the rows: ``SELECT ... WHERE (key) > (last) ORDER BY key LIMIT n`` in a short read-only
   REPEATABLE READ transaction, which also reads its own snapshot (``txid_current_snapshot()``);
3. the high watermark, like the low one.

The bridge then reads the stream on. A change of the table whose key is in the chunk drops
that row from the chunk when it comes after the low watermark, or when its transaction is
one the chunk's snapshot did not see (a commit racing the read: the rows may not reflect
it). At the high watermark the rows left become ``S`` events, at that place in the stream:
after every change they reflect, before every change they do not. A dropped row is not
lost: the change that dropped it carries the row's newer state (or its deletion).

Progress (the last key read, rows read) is committed in the bridge's position record with
the events, so a restart resumes after the last committed chunk; chunks read but not
committed are read again, under the same run, so their events get the same eids.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from changebroker.bridge.tables import Table, split_name
from changebroker.changeserver.replication import SESSION_OPTIONS

WATERMARKS = "public.changebroker_watermarks"
# Chunks of one table read ahead of the stream: their watermarks travel through replication
# and the change log while earlier chunks are emitted.
IN_FLIGHT = 4

Key = tuple[str | None, ...]  # the key columns' text, as Postgres prints them


@dataclass
class Run:
    """One snapshot of a table, as committed in the position record."""

    id: str
    started_at: str  # RFC 3339
    estimated_rows: int = 0  # pg_class.reltuples when the run started
    rows_read: int = 0  # rows of committed chunks (emitted, or dropped for a newer change)
    last_key: list[str | None] | None = None  # text of the last key of the committed chunks
    finished_at: str | None = None
    # The sequence of the table's CREATE when the bridge saw it in the stream: every row came
    # through the stream, and the run read nothing.
    created: str | None = None

    def as_json(self) -> dict[str, Any]:
        # Every table's, several times a batch: asdict's deep copy costs 10 us; only the key
        # list is not immutable.
        last_key = None if self.last_key is None else list(self.last_key)
        return {**vars(self), "last_key": last_key}

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Run:
        return cls(**record)


@dataclass(frozen=True)
class TxSnapshot:
    """A ``txid_current_snapshot()``: which transactions a read saw."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> TxSnapshot:
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def saw(self, txid: int) -> bool:
        return txid < self.xmin or (txid < self.xmax and txid not in self.xip)


@dataclass
class Chunk:
    table: Table  # the columns as read
    run: str
    after: list[str | None] | None  # the key the chunk starts after (None: the first)
    last_key: list[str | None] | None  # the last key read (None: nothing read)
    rows: dict[Key, tuple[str | None, ...]]  # key -> the row's text, in key order
    read: int
    final: bool  # fewer rows than asked: the table ends here
    snapshot: TxSnapshot
    low: str
    high: str
    opened: bool = False  # the low watermark has been read

    def observe(self, keys: list[Key], txid: int) -> None:
        if self.opened or not self.snapshot.saw(txid):
            for key in keys:
                self.rows.pop(key, None)


@dataclass
class Chunks:
    """The chunks read and not yet emitted, and the reads that make them."""

    name: str  # the bridge's: its row in the watermark table
    dsn: str
    size: int
    pending: dict[str, list[Chunk]] = field(default_factory=dict)  # table -> in stream order
    _marks: dict[str, tuple[Chunk, bool]] = field(default_factory=dict)  # mark -> (chunk, high)
    _conn: psycopg.AsyncConnection[Any] | None = None

    async def open(self) -> None:
        # The changeserver's session settings: the text of every value as pgoutput sends it.
        self._conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, options=SESSION_OPTIONS
        )

    async def close(self) -> None:
        self.pending.clear()
        self._marks.clear()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def in_flight(self, table: str) -> list[Chunk]:
        return self.pending.get(table, [])

    def discard(self, table: str) -> None:
        for chunk in self.pending.pop(table, []):
            self._marks.pop(chunk.low, None)
            self._marks.pop(chunk.high, None)

    async def estimate(self, table: str) -> int:
        assert self._conn is not None
        schema, name = split_name(table)
        row = await (
            await self._conn.execute(
                "SELECT reltuples::bigint FROM pg_class"
                " WHERE oid = format('%%I.%%I', %s::text, %s::text)::regclass",
                (schema, name),
            )
        ).fetchone()
        return max(0, int(row[0])) if row else 0

    async def read(self, table: Table, run: str, after: list[str | None] | None) -> Chunk:
        """Low watermark, one chunk after ``after``, high watermark; the chunk then waits in
        ``pending`` for its watermarks to come through the stream."""
        conn = self._conn
        assert conn is not None
        low = await self.mark()
        columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in table.key)
        types = {c.name: c.type_name for c in table.columns}
        query = sql.SQL("SELECT {} FROM {}").format(
            columns, sql.Identifier(*split_name(table.name))
        )
        if after is not None:
            # Typed from the text: every key type reads back from its own output.
            bound = sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(types[k])) for k in table.key
            )
            query += sql.SQL(" WHERE ({}) > ({})").format(keys, bound)
        query += sql.SQL(" ORDER BY {} LIMIT {}").format(keys, sql.Literal(self.size))
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        try:
            snapshot_row = await (
                await conn.execute("SELECT txid_current_snapshot()::text")
            ).fetchone()
            assert snapshot_row is not None
            cursor = conn.cursor()
            for column in table.columns:
                cursor.adapters.register_loader(column.oid, TextLoader)
            await cursor.execute(query, after)
            rows = await cursor.fetchall()
        finally:
            await conn.execute("COMMIT")
        high = await self.mark()
        at = [[c.name for c in table.columns].index(k) for k in table.key]
        chunk = Chunk(
            table=table,
            run=run,
            after=after,
            last_key=[rows[-1][i] for i in at] if rows else None,
            rows={tuple(row[i] for i in at): tuple(row) for row in rows},
            read=len(rows),
            final=len(rows) < self.size,
            snapshot=TxSnapshot.parse(snapshot_row[0]),
            low=low,
            high=high,
        )
        self.pending.setdefault(table.name, []).append(chunk)
        self._marks[low] = (chunk, False)
        self._marks[high] = (chunk, True)
        return chunk

    async def mark(self) -> str:
        """A new watermark, written in a transaction of its own: when the stream brings it,
        every transaction committed before it was written has come through."""
        assert self._conn is not None
        mark = uuid.uuid4().hex
        await self._conn.execute(
            "INSERT INTO changebroker_watermarks (name, mark) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET mark = excluded.mark, written_at = now()",
            (self.name, mark),
        )
        return mark

    def mark_of(self, change: Mapping[str, Any]) -> str | None:
        """The mark a change of the watermark table wrote, if it is this bridge's."""
        row = change.get("newRow") or {}
        if (row.get("name") or {}).get("value") != self.name:
            return None
        mark: str | None = (row.get("mark") or {}).get("value")
        return mark

    def observe(self, change: Mapping[str, Any]) -> None:
        """A change of a table with chunks pending: drop the rows it makes stale."""
        pending = self.pending.get(change["table"])
        if not pending:
            return
        key_names = pending[0].table.key
        keys = []
        for side in ("newRow", "oldRow"):
            row = change.get(side)
            if row and all(k in row for k in key_names):
                keys.append(tuple(row[k]["value"] for k in key_names))
        for chunk in pending:
            chunk.observe(keys, change["txid"])

    def watermark(self, mark: str) -> Chunk | None:
        """A mark from the stream: the chunk whose high watermark it is, if any."""
        found = self._marks.pop(mark, None)
        if found is None:
            return None  # a mark of an earlier session, or of a discarded chunk
        chunk, high = found
        if not high:
            chunk.opened = True
            return None
        pending = self.pending.get(chunk.table.name, [])
        if chunk in pending:
            pending.remove(chunk)
        return chunk
