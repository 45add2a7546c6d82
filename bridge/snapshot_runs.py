"""Snapshot runs: when a table's existing rows are published (``S`` events), and how far a
run got. A run starts for a table of the publication never snapshotted nor seen created
(looked for at start, every 30 s and at a change of a table without a run), when an
operator asks, after an ALTER TABLE that redefines rows and after a gap upstream; it is
committed before any chunk is read, reads its chunks ahead of the stream (``snapshots.py``)
and emits each at its high watermark, its progress committed with those events."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg

from changebroker import kafka, logs
from changebroker.bridge import tables, values
from changebroker.bridge.data_events import data_message, occurred_at
from changebroker.bridge.event_types import SchemaRefused
from changebroker.bridge.position import Position
from changebroker.bridge.schemas import Schemas
from changebroker.bridge.snapshots import IN_FLIGHT, Chunk, Chunks, Run
from changebroker.bridge.units import TableGone, TableRefused, Units, UnitStopped, check_writable
from changebroker.broker.publishing.pipeline import ItemFailure
from changebroker.broker.publishing.producer import Message
from changebroker.changeserver.sequence import Sequence

log = logging.getLogger(__name__)

DISCOVER_EVERY = 30.0  # seconds between looks for newly published tables to snapshot
_LOG_PROGRESS_EVERY = 10.0  # seconds between a running snapshot's progress lines


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_run(created: str | None = None) -> Run:
    return Run(uuid.uuid4().hex, now_rfc3339(), created=created)


class SnapshotRuns:
    def __init__(
        self,
        chunks: Chunks,
        publication: str,
        selection: tables.Selection,
        units: Units,
        schemas: Schemas,
        cluster: kafka.Cluster,
    ) -> None:
        """``publication``: the changeserver's, whose tables are to snapshot; ``cluster``:
        the bridge's Kafka, the only one it writes to."""
        self.chunks = chunks
        self._publication = publication
        self._selection = selection
        self._units = units
        self._schemas = schemas
        self._cluster = cluster
        self.requests: dict[str, Run] = {}  # asked for, not committed yet
        self.rows_read_here: dict[str, int] = {}  # snapshot rows this process read, per table
        self.next_discovery = 0.0
        # A discovery's mark and the tables it found: decided once the mark is streamed.
        self.discovery: tuple[str, list[str]] | None = None
        self._progress_logged: dict[str, float] = {}

    def clear(self) -> None:
        """A session starts: tables are looked for at once."""
        self.next_discovery = 0.0
        self.discovery = None

    def end(self, table: str) -> None:
        """A dropped table: nothing of its runs stays in memory."""
        self.rows_read_here.pop(table, None)
        self._progress_logged.pop(table, None)

    def status(self, table: str, committed: Position) -> dict[str, Any] | None:
        run = committed.snapshots.get(table)
        if run is None:
            return None
        return {
            **run.as_json(),
            "state": "done" if run.finished_at else "running",
            "rows_read_by_this_process": self.rows_read_here.get(table, 0),
        }

    async def discover(self, position: Position) -> None:
        """Selected tables of the publication never snapshotted nor seen created: each gets
        its first run unless the stream, read up to a mark written now, brings its CREATE
        (the CREATE committed before the catalog was read, so before the mark): a table
        created while the bridge reads had every row come through the stream."""
        assert self._schemas.catalog is not None
        self.next_discovery = time.monotonic() + DISCOVER_EVERY
        if self.discovery is not None:
            return  # the last one's mark is still on its way
        found = []
        for table in await tables.published(self._schemas.catalog, self._publication):
            if not self._selection(table):
                continue
            if table in position.snapshots or table in self.requests:
                continue
            if await self._schemas.describe(table) is not None:
                found.append(table)
        if found:
            self.discovery = (await self.chunks.mark(), found)

    def discovered(self, position: Position) -> None:
        """The discovery's mark came through: its tables not seen created get their run."""
        assert self.discovery is not None
        for table in self.discovery[1]:
            if table not in position.snapshots and table not in self.requests:
                self.requests[table] = new_run()
        self.discovery = None

    async def start_requested(
        self, position: Position, commit: Callable[[Position], Awaitable[None]]
    ) -> None:
        """Commit the runs asked for (a restart then knows them) before reading any chunk:
        ``commit`` commits a copy of ``position`` with them and waits until it is in Kafka."""
        requested = dict(self.requests)
        if not requested:
            return
        position = position.copy()
        for table, run in requested.items():
            self.chunks.discard(table)
            try:
                run.estimated_rows = await self.chunks.estimate(table)
            except psycopg.errors.UndefinedTable:
                continue
            position.snapshots[table] = run
            self.rows_read_here[table] = 0
            log.info(
                "snapshot started",
                extra=logs.fields(table=table, run=run.id, estimated_rows=run.estimated_rows),
            )
        await commit(position)  # chunks are read only for runs a restart knows
        for table, run in requested.items():
            if self.requests.get(table) is run:
                del self.requests[table]

    async def read_chunks(self, position: Position) -> None:
        """Keep up to ``IN_FLIGHT`` chunks of each running snapshot ahead of the stream."""
        for table, run in position.snapshots.items():
            if (
                run.finished_at is not None
                or table in self._units.stopped
                or not self._selection(table)
            ):
                continue
            flight = self.chunks.in_flight(table)
            if len(flight) >= IN_FLIGHT or (flight and flight[-1].final):
                continue
            described = await self._schemas.describe(table)  # as it is now: DDL may change it
            while (
                described is not None
                and len(flight) < IN_FLIGHT
                and not (flight and flight[-1].final)
            ):
                after = flight[-1].last_key if flight else run.last_key
                try:
                    chunk = await self.chunks.read(described, run.id, after)
                except psycopg.errors.UndefinedTable:
                    break  # dropped: its DROP comes through the stream and ends the run
                self.rows_read_here[table] = self.rows_read_here.get(table, 0) + chunk.read
                flight = self.chunks.in_flight(table)

    async def events(
        self, chunk: Chunk, position: Position, change: Mapping[str, Any], received_at: str
    ) -> list[Message]:
        """At its high watermark, a chunk's rows left as ``S`` events; the run's progress."""
        table = chunk.table.name
        run = position.snapshots.get(table)
        if run is None or run.id != chunk.run or run.last_key != chunk.after:
            return []  # a newer run replaced it, or the chunk before it was not emitted
        if run.finished_at is not None or table in self._units.stopped:
            return []
        columns = chunk.table.columns
        when = occurred_at(change)
        flow = f"snapshot:{run.id}"
        try:
            published = await self._schemas.evolved(table, {c.name: c.oid for c in columns})
            target = published.target
            check_writable(target, self._cluster)
            out = [
                data_message(
                    published,
                    table,
                    f"snapshot/{run.id}/{orjson.dumps(key).decode()}",
                    "S",
                    {
                        c.name: values.to_json(text, c.oid)
                        for c, text in zip(columns, row, strict=True)
                    },
                    when,
                    received_at,
                    flow,
                )
                for key, row in chunk.rows.items()
            ]
        except TableGone:
            self.chunks.discard(table)
            return []
        except (SchemaRefused, ItemFailure, TableRefused, UnitStopped) as exc:
            self.chunks.discard(table)
            reason = exc.detail if isinstance(exc, ItemFailure) else str(exc)
            self._units.stop(table, reason, Sequence.parse(change["sequence"]), position)
            return []
        progress = position.own(table)
        run = position.snapshots[table]
        if chunk.last_key is not None:
            run.last_key = chunk.last_key
        run.rows_read += chunk.read
        progress.event_type = target.name
        progress.events += len(out)
        fields = logs.fields(
            table=table, run=run.id, rows_read=run.rows_read, estimated_rows=run.estimated_rows
        )
        if chunk.final:
            run.finished_at = now_rfc3339()
            log.info("snapshot finished", extra=fields)
        elif time.monotonic() - self._progress_logged.get(table, 0.0) > _LOG_PROGRESS_EVERY:
            self._progress_logged[table] = time.monotonic()
            log.info("snapshot progress", extra=fields)
        return out
