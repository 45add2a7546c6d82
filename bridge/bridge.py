"""The loop: long-poll ``/changes``, turn each change into events through the broker's
publishing pipeline, commit the events and the new position in one Kafka transaction.

Tables by name: the bridge reads every change of the tables ``--include``/``--exclude``
select (the changeserver's ``table`` extension of ``/changes``), whatever their selector;
each selected table is first published as it is (a snapshot: ``snapshots.py``), its rows as
``S`` events woven into the stream, unless the stream brought its CREATE, and again whenever
an operator asks or an ALTER TABLE redefines its rows. A TRUNCATE or DROP TABLE is a table
event in every partition (``table_events.py``); a DROP ends the table's unit.

Units of progress: each table is a unit, and each event type of the outbox is one. A unit
whose change cannot be published (its schema change refused, an event the event type
rejects, an outbox event type that does not exist) stops: its later changes are skipped
while the others go on, and its position is held just before the change that stopped it.
The held position is part of the committed position record, so nothing is lost: when the
unit resumes (``POST /units/{unit}/resume`` on the bridge, or a restart) the bridge reads
again from the oldest held position and publishes only what each unit has not published.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
from psycopg import sql as psql

from changebroker import auth, kafka, logs, pg
from changebroker.bridge import tables, values
from changebroker.bridge.changes_client import Answer, ChangesClient, ChangesUnreadable
from changebroker.bridge.commits import Commits
from changebroker.bridge.event_types import (
    EventTypes,
    Published,
    SchemaRefused,
    event_type_name,
)
from changebroker.bridge.snapshots import IN_FLIGHT, WATERMARKS, Chunk, Chunks, Run
from changebroker.bridge.table_events import ended_rows
from changebroker.bridge.transactions import (
    Transactions,
    ensure_positions_topic,
    load_position,
)
from changebroker.broker.event_types.store import Store
from changebroker.broker.publishing.partitioning import java_string_hash
from changebroker.broker.publishing.pipeline import ItemFailure, Target, prepare, received_now
from changebroker.broker.publishing.producer import Message
from changebroker.broker.settings import TIMELINE_WAIT_TIMEOUT
from changebroker.broker.timelines.writers import Writer
from changebroker.changeserver.ddl import CREATE, DROP, REDEFINE, TRUNCATE
from changebroker.changeserver.sequence import ZERO, Sequence
from changebroker.timestamps import utc_second

log = logging.getLogger(__name__)

_OPS = {1: "C", 2: "U", 3: "D"}
_INSERT, _DELETE = 1, 3
# eids are uuid5 of "<unit>/<sequence>" in this namespace: the same change, the same eid.
EID_NAMESPACE = uuid.UUID("6f1c2f4e-1b0a-5c39-9b7e-2f1d0c4b8a11")
_EID_PREFIX = EID_NAMESPACE.bytes


# The variant digit of a hex digest's 17th digit: its top two bits set to 10 (RFC 4122).
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def eid(name: str) -> str:
    """``str(uuid.uuid5(EID_NAMESPACE, name))`` without the UUID object: one per event, and a
    snapshot makes millions. Cut from the hex digest with the version and variant digits set
    (1.5 against 1.9 µs with the bits set on the bytes first)."""
    h = hashlib.sha1(_EID_PREFIX + name.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


_DISCOVER_EVERY = 30.0  # seconds between looks for newly published tables to snapshot
_LOG_PROGRESS_EVERY = 10.0  # seconds between a running snapshot's progress lines
_TURN_EVERY = 256  # changes converted between turns of the event loop


def own_tables(outbox_table: str) -> frozenset[str]:
    """The product's tables, never published as data events: every table its migrations
    create in the application's default schema, and the outbox (published on its own)."""
    created = {
        f"public.{name}"
        for component in pg.components()
        for _, path in pg.migrations(component)
        for name in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", path.read_text())
    }
    return frozenset({*created, "public.changebroker_migrations", WATERMARKS, outbox_table})


@dataclass(frozen=True)
class Settings:
    changeserver_url: str
    broker_url: str
    meta_dsn: str  # the broker's metadata database (event types)
    app_dsn: str  # the application database (the tables' catalog)
    kafka_bootstrap: str
    name: str = "bridge"
    include: tuple[str, ...] = ()  # globs of schema.table; empty: every published table
    exclude: tuple[str, ...] = ()
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # table -> key columns
    publication: str = "changebroker"  # the changeserver's: the tables there are to snapshot
    snapshot_chunk: int = 10_000  # rows read at once
    prefix: str = "changebroker"
    pattern: str = "{prefix}.{schema}.{table}"
    outbox_table: str = "public.changebroker_outbox"
    partitions: int = 4
    limit: int = 10_000
    block: int = 5
    # Of the positions topic; None: what the cluster allows (event types: the broker's).
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    client_token: str | None = None  # sent to the changeserver and the broker
    ca_file: Path | None = None  # trusted for their HTTPS besides the system's CAs


@dataclass
class Progress:
    event_type: str = ""
    sequence: str = ""  # last change published
    events: int = 0
    commit_time: int = 0  # of that change, Unix seconds

    def as_json(self) -> dict[str, Any]:
        # Every unit's, several times a batch: a shallow copy (the fields are immutable), not
        # asdict's deep one (0.5 against 6.7 us).
        return dict(vars(self))


@dataclass
class Position:
    """What is committed with every batch (the position record)."""

    since: Sequence = ZERO
    held: dict[str, Sequence] = field(default_factory=dict)
    progress: dict[str, Progress] = field(default_factory=dict)
    # Tables an operator moved to another event type (a change their old one refuses).
    renamed: dict[str, str] = field(default_factory=dict)
    snapshots: dict[str, Run] = field(default_factory=dict)  # table -> its newest run
    # The units whose Progress and Run objects are this position's own, not shared with the
    # position it was copied from (see copy).
    _own: set[str] = field(default_factory=set, init=False, compare=False, repr=False)

    def floor(self, unit: str) -> Sequence:
        return self.held.get(unit, self.since)

    def as_json(self) -> dict[str, Any]:
        return {
            "since": str(self.since),
            "held": {unit: str(seq) for unit, seq in self.held.items()},
            "progress": {unit: p.as_json() for unit, p in self.progress.items()},
            "renamed": dict(self.renamed),
            "snapshots": {table: run.as_json() for table, run in self.snapshots.items()},
        }

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> Position:
        if record is None:
            return cls()
        return cls(
            Sequence.parse(record["since"]),
            {unit: Sequence.parse(seq) for unit, seq in record["held"].items()},
            {unit: Progress(**p) for unit, p in record["progress"].items()},
            dict(record.get("renamed", {})),
            {table: Run.of(run) for table, run in record.get("snapshots", {}).items()},
        )

    def copy(self) -> Position:
        """A position to change for the next batch. Its Progress and Run objects are this
        one's until :meth:`own` copies a unit's: a batch copies the units it touches, not
        every unit ever seen (dropped tables too), and this position (committed, or being
        committed) stays as it is."""
        return Position(
            self.since,
            dict(self.held),
            dict(self.progress),
            dict(self.renamed),
            dict(self.snapshots),
        )

    def forget(self, unit: str) -> None:
        """The unit's progress, hold and run gone (a dropped table): a table of the name
        later in the same batch starts from nothing, its Progress made anew by :meth:`own`."""
        for kept in (self.progress, self.held, self.snapshots):
            kept.pop(unit, None)
        self._own.discard(unit)

    def own(self, unit: str) -> Progress:
        """The unit's progress (and run, if it has one) to change: copied on first use."""
        if unit not in self._own:
            self._own.add(unit)
            progress = self.progress.get(unit)
            self.progress[unit] = Progress() if progress is None else dataclasses.replace(progress)
            run = self.snapshots.get(unit)
            if run is not None:
                self.snapshots[unit] = dataclasses.replace(run)
        return self.progress[unit]


def _code(answer: Answer) -> str | None:
    """The ``code`` of a changeserver error body, if it has one."""
    try:
        body = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def before(seq: Sequence) -> Sequence:
    """The greatest sequence below ``seq``: holding a unit there republishes ``seq`` on."""
    if seq.index > 0:
        return Sequence(seq.lsn, seq.index - 1)
    return Sequence(seq.lsn - 1, 0xFFFFFFFF)


def occurred_at(change: Mapping[str, Any]) -> str:
    # /changes gives the commit time in whole seconds (transicator's contract).
    return utc_second(change["timestamp"]) + "Z"


def row_values(row: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {name: values.to_json(col["value"], col["type"]) for name, col in row.items()}


class UnitStopped(Exception):
    """This change cannot be published; its unit stops here."""


class TableGone(Exception):
    """The table is dropped (or renamed) and never had an event type: nothing says what its
    key was, and its DROP, ahead in the stream, ends whatever it had."""


class TableRefused(Exception):
    """The bridge cannot publish this table (no key): none of its changes are published."""


class WriterLapsed(Exception):
    """The bridge could not renew its registration as a writer of events: a timeline switch
    may go by without it, so it writes nothing until its session starts again."""


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Bridge:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.position = Position()  # as processed: committed, or being committed
        self.committed = Position()  # as Kafka holds it: what status reports
        self.stopped: dict[str, str] = {}  # unit -> why; in memory: a restart retries
        self.changeserver_last = ZERO
        self.ready = asyncio.Event()
        self._published: dict[str, Published] = {}  # table -> its event type as last set
        self._row_types: dict[str, dict[str, int]] = {}  # table -> column OIDs seen
        self._wake = asyncio.Event()
        self._renames: dict[str, str] = {}  # asked for, not committed yet
        self._resumes: dict[str, str | None] = {}  # unit -> its new event type; asked for
        # The next read, started while the current batch is processed and committed.
        self._prefetch: tuple[Sequence, asyncio.Future[Answer]] | None = None
        # A gap was reported: the next read asks for everything the changeserver holds.
        self._read_all = False
        self._catalog: psycopg.AsyncConnection[Any] | None = None
        self._event_types: EventTypes | None = None
        # The cluster of --kafka-bootstrap: its transactions hold the events and the position.
        self._cluster = kafka.Cluster(settings.kafka_bootstrap)
        self._writer: Writer | None = None
        self.selection = tables.Selection(
            settings.include, settings.exclude, own_tables(settings.outbox_table)
        )
        self.refused: dict[str, str] = {}  # table -> why it is not published
        self._gone: set[str] = set()  # dropped before any change was published (TableGone)
        self.rows_read_here: dict[str, int] = {}  # snapshot rows this process read, per table
        self._tables: dict[str, tables.Table] = {}  # as last described
        self._snapshot_requests: dict[str, Run] = {}  # asked for, not committed yet
        self._chunks = Chunks(settings.name, settings.app_dsn, settings.snapshot_chunk)
        self._next_discovery = 0.0
        # A discovery's mark and the tables it found: decided once the mark is streamed.
        self._discovery: tuple[str, list[str]] | None = None
        self._progress_logged: dict[str, float] = {}

    # -- status -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        last = self.changeserver_last
        units = {}
        position = self.committed
        every = {*position.progress, *self.stopped, *position.held, *position.snapshots}
        for unit in sorted({*every, *self.refused}):
            progress = position.progress.get(unit, Progress())
            floor = position.floor(unit)
            units[unit] = {
                **progress.as_json(),
                "position": str(floor),
                "lag_bytes": max(0, last.lsn - floor.lsn),
                "stopped": self.stopped.get(unit),
                "refused": self.refused.get(unit),
                "snapshot": self._snapshot_status(unit),
            }
        return {
            "name": self.settings.name,
            "ready": self.ready.is_set(),
            "position": str(position.since),
            "changeserver_last_sequence": str(last),
            "lag_bytes": max(0, last.lsn - position.since.lsn),
            "units": units,
        }

    def _snapshot_status(self, table: str) -> dict[str, Any] | None:
        run = self.committed.snapshots.get(table)
        if run is None:
            return None
        return {
            **run.as_json(),
            "state": "done" if run.finished_at else "running",
            "rows_read_by_this_process": self.rows_read_here.get(table, 0),
        }

    async def request_snapshot(self, table: str) -> str:
        """Publish ``table`` again as ``S`` events (a new run, with new eids), beside its live
        changes; returns the run's id. ``LookupError``: not a table the bridge publishes."""
        if not self.selection(table):
            raise LookupError(f"{table} is not selected by --include/--exclude")
        if self._catalog is None:
            raise LookupError("the bridge is starting: ask again once /health answers")
        if await self._describe(table) is None:
            raise LookupError(self.refused.get(table) or f"{table} does not exist")
        run = self._snapshot_requests[table] = Run(uuid.uuid4().hex, now_rfc3339())
        log.info("snapshot requested", extra=logs.fields(table=table, run=run.id))
        self._wake.set()
        return run.id

    def resume(self, unit: str, event_type: str | None = None) -> bool:
        """An operator acted on what stopped ``unit``: try its held changes again, into
        ``event_type`` when given (Nakadi's answer to a change the mode refuses: a new event
        type; it is committed with the next batch, so a restart keeps it).

        It takes effect before the next batch is read: a batch under way skips the unit's
        changes to its end, as the held position it commits says."""
        if unit not in self.stopped:
            return False
        self._resumes[unit] = event_type
        log.info("unit resumed", extra=logs.fields(unit=unit, event_type=event_type or ""))
        self._wake.set()
        return True

    def _apply_resumes(self) -> None:
        for unit, event_type in self._resumes.items():
            self.stopped.pop(unit, None)
            self._published.pop(unit, None)
            if event_type:
                self._renames[unit] = event_type
        self._resumes.clear()

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Sessions until cancelled; a failed session (Kafka, HTTP, Postgres) starts over from
        the committed position with a fresh transactional producer."""
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Kafka, HTTP and Postgres trouble, or a bug: either way the loop must not end
                # while /health says the process is fine; each attempt is logged.
                self.ready.clear()
                log.warning(
                    "bridge session failed; starting over from the committed position",
                    extra=logs.fields(error=f"{type(exc).__name__}: {exc}"),
                    exc_info=exc,
                )
                await asyncio.sleep(1)

    async def _session(self) -> None:
        s = self.settings
        await asyncio.to_thread(
            ensure_positions_topic, s.kafka_bootstrap, s.replication_factor, s.min_insync_replicas
        )
        producer = await asyncio.to_thread(Transactions, s.kafka_bootstrap, s.name)
        # The next batches are read and turned into events while a transaction is under way.
        commits = Commits(producer, self._on_committed, s.limit)
        store = Store(s.meta_dsn, pool_size=2)
        # The bridge takes part in timeline switches as a writer (broker/timelines/writers.py).
        writer = Writer(
            s.meta_dsn,
            store.pool,
            "bridge",
            wait_timeout=TIMELINE_WAIT_TIMEOUT,
            on_resume=store.forget_revisions,
            auto_pause=False,
        )
        try:
            record = await asyncio.to_thread(load_position, s.kafka_bootstrap, s.name)
            self.position = self.committed = Position.of(record)
            await asyncio.to_thread(pg.migrate, s.app_dsn, "outbox")
            await asyncio.to_thread(pg.migrate, s.app_dsn, "bridge")
            # Stops not committed with a held position (the failed batch's) must not skip
            # anything now; the committed ones are retried, as after any restart.
            self.stopped.clear()
            self.refused.clear()
            self._gone.clear()
            self._published.clear()
            self._row_types.clear()
            self._next_discovery = 0.0
            self._discovery = None
            await store.open()
            await writer.start()
            self._writer = writer
            await self._chunks.open()
            client: dict[str, Any] = {
                "headers": auth.client_headers(s.client_token),
                "verify": auth.client_verify(s.ca_file),
            }
            async with (
                await psycopg.AsyncConnection.connect(s.app_dsn, autocommit=True) as catalog,
                httpx.AsyncClient(base_url=s.broker_url, timeout=60, **client) as broker,
                contextlib.aclosing(
                    ChangesClient(
                        s.changeserver_url,
                        headers=client["headers"],
                        ca_file=s.ca_file,
                        timeout=s.block + 60,
                    )
                ) as changes,
            ):
                self._catalog = catalog
                self._event_types = EventTypes(store, broker, self._cluster)
                await self._publish_watermarks(catalog)
                log.info(
                    "bridge resuming",
                    extra=logs.fields(since=str(self.position.since), held=len(self.position.held)),
                )
                self.ready.set()
                while True:
                    await self._step(changes, commits)
        finally:
            if self._prefetch is not None:
                self._prefetch[1].cancel()
                self._prefetch = None
            await commits.close()
            self._catalog = self._event_types = None
            self._writer = None
            await self._chunks.close()
            await asyncio.to_thread(producer.close)
            await writer.stop()
            await store.close()

    async def _publish_watermarks(self, catalog: psycopg.AsyncConnection[Any]) -> None:
        """The watermark table must reach the stream: a publication of named tables (not FOR
        ALL TABLES) gets it added."""
        row = await (
            await catalog.execute(
                "SELECT puballtables, EXISTS (SELECT 1 FROM pg_publication_tables t"
                " WHERE t.pubname = p.pubname AND t.schemaname || '.' || t.tablename = %s)"
                " FROM pg_publication p WHERE pubname = %s",
                (WATERMARKS, self.settings.publication),
            )
        ).fetchone()
        if row is None or row[0] or row[1]:
            return
        schema, name = tables.split_name(WATERMARKS)
        await catalog.execute(
            psql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                psql.Identifier(self.settings.publication), psql.Identifier(schema, name)
            )
        )
        log.info(
            "watermark table added to the publication",
            extra=logs.fields(publication=self.settings.publication),
        )

    async def _describe(self, table: str) -> tables.Table | None:
        """The table now, with the operator's ``--key``; ``None`` (and the table refused,
        logged once) when it has no key, or it no longer exists."""
        assert self._catalog is not None
        described = await tables.describe(self._catalog, table, self.settings.keys.get(table, ()))
        if described is None:
            return None
        reason = tables.refusal(described)
        if reason is not None:
            if self.refused.get(table) != reason:
                log.error("table refused", extra=logs.fields(table=table, reason=reason))
            self.refused[table] = reason
            return None
        self.refused.pop(table, None)
        self._tables[table] = described
        return described

    # -- snapshots ----------------------------------------------------------------------

    async def _discover(self) -> None:
        """Selected tables of the publication never snapshotted nor seen created: each gets
        its first run unless the stream, read up to a mark written now, brings its CREATE
        (the CREATE committed before the catalog was read, so before the mark): a table
        created while the bridge reads had every row come through the stream."""
        assert self._catalog is not None
        self._next_discovery = time.monotonic() + _DISCOVER_EVERY
        if self._discovery is not None:
            return  # the last one's mark is still on its way
        found = []
        for table in await tables.published(self._catalog, self.settings.publication):
            if not self.selection(table):
                continue
            if table in self.position.snapshots or table in self._snapshot_requests:
                continue
            if await self._describe(table) is not None:
                found.append(table)
        if found:
            self._discovery = (await self._chunks.mark(), found)

    def _discovered(self, position: Position) -> None:
        """The discovery's mark came through: its tables not seen created get their run."""
        assert self._discovery is not None
        for table in self._discovery[1]:
            if table not in position.snapshots and table not in self._snapshot_requests:
                self._snapshot_requests[table] = Run(uuid.uuid4().hex, now_rfc3339())
        self._discovery = None

    async def _start_requested(self, commits: Commits[Position]) -> None:
        """Commit the runs asked for (a restart then knows them) before reading any chunk."""
        requested = dict(self._snapshot_requests)
        if not requested:
            return
        position = self.position.copy()
        for table, run in requested.items():
            self._chunks.discard(table)
            try:
                run.estimated_rows = await self._chunks.estimate(table)
            except psycopg.errors.UndefinedTable:
                continue
            position.snapshots[table] = run
            self.rows_read_here[table] = 0
            log.info(
                "snapshot started",
                extra=logs.fields(table=table, run=run.id, estimated_rows=run.estimated_rows),
            )
        await self._commit(commits, [], position)
        await commits.drain()  # chunks are read only for runs a restart knows
        for table, run in requested.items():
            if self._snapshot_requests.get(table) is run:
                del self._snapshot_requests[table]

    async def _read_chunks(self) -> None:
        """Keep up to ``IN_FLIGHT`` chunks of each running snapshot ahead of the stream."""
        for table, run in self.position.snapshots.items():
            if run.finished_at is not None or table in self.stopped or not self.selection(table):
                continue
            flight = self._chunks.in_flight(table)
            if len(flight) >= IN_FLIGHT or (flight and flight[-1].final):
                continue
            described = await self._describe(table)  # as it is now: DDL may have changed it
            while (
                described is not None
                and len(flight) < IN_FLIGHT
                and not (flight and flight[-1].final)
            ):
                after = flight[-1].last_key if flight else run.last_key
                try:
                    chunk = await self._chunks.read(described, run.id, after)
                except psycopg.errors.UndefinedTable:
                    break  # dropped: its DROP comes through the stream and ends the run
                self.rows_read_here[table] = self.rows_read_here.get(table, 0) + chunk.read
                flight = self._chunks.in_flight(table)

    async def _snapshot_events(
        self, chunk: Chunk, position: Position, change: Mapping[str, Any], received_at: str
    ) -> list[Message]:
        """At its high watermark, a chunk's rows left as ``S`` events; the run's progress."""
        table = chunk.table.name
        run = position.snapshots.get(table)
        if run is None or run.id != chunk.run or run.last_key != chunk.after:
            return []  # a newer run replaced it, or the chunk before it was not emitted
        if run.finished_at is not None or table in self.stopped:
            return []
        columns = chunk.table.columns
        when = occurred_at(change)
        flow = f"snapshot:{run.id}"
        try:
            published = await self._evolved(table, {c.name: c.oid for c in columns})
            target = published.target
            self._writable(target)
            out = [
                _prepare(
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
            self._chunks.discard(table)
            return []
        except (SchemaRefused, ItemFailure, TableRefused, UnitStopped) as exc:
            self._chunks.discard(table)
            reason = exc.detail if isinstance(exc, ItemFailure) else str(exc)
            self._stop(table, reason, Sequence.parse(change["sequence"]), position)
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

    def _stop(self, unit: str, reason: str, seq: Sequence, position: Position) -> None:
        self.stopped[unit] = reason
        position.held[unit] = before(seq)
        log.error(
            "unit stopped: its changes wait until an operator acts",
            extra=logs.fields(unit=unit, sequence=str(seq), reason=reason),
        )

    # -- the stream ---------------------------------------------------------------------

    def _read_from(self) -> Sequence:
        if self._read_all:
            return ZERO
        resumed = [seq for unit, seq in self.position.held.items() if unit not in self.stopped]
        return min([self.position.since, *resumed])

    async def _step(self, changes: ChangesClient, commits: Commits[Position]) -> None:
        assert self._writer is not None
        if self._writer.pending.is_set():
            await self._pause(commits)
        self._apply_resumes()
        if time.monotonic() >= self._next_discovery:
            await self._discover()
        await self._start_requested(commits)
        await self._read_chunks()
        since = self._read_from()
        self._wake.clear()
        poll = self._poll(changes, since)
        woken: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
        paused: asyncio.Future[Any] = asyncio.ensure_future(self._writer.pending.wait())
        try:
            while not (poll.done() or woken.done()):
                turn = commits.turn()
                waits = [poll, woken, paused] if turn is None else [poll, woken, paused, turn]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if turn is not None and turn.done():
                    await commits.advance()
                if paused.done():
                    # Nothing is being prepared meanwhile: the read goes on, the writes wait.
                    await self._pause(commits)
                    paused = asyncio.ensure_future(self._writer.pending.wait())
        except BaseException:
            poll.cancel()  # the session ends: no read may outlive its client unheard
            raise
        finally:
            woken.cancel()
            paused.cancel()
        if not poll.done():
            # An operator resumed a unit while we waited: read again from its held position.
            poll.cancel()
            return
        answer = poll.result()
        if answer.status == 400 and _code(answer) == "SNAPSHOT_TOO_OLD":
            await self._after_gap(commits, since)
            return
        if answer.status != 200:
            said = answer.body[:500].decode(errors="replace")
            raise ChangesUnreadable(f"GET /changes answered {answer.status}: {said}")
        if not self._writer.alive():
            raise WriterLapsed("could not renew the bridge's registration as a writer in time")
        self._read_all = False
        body = answer.changes()
        last = Sequence.parse(body["lastSequence"])
        if body["changes"]:
            # Read on while this batch is turned into events and committed.
            self._prefetch = (last, self._poll(changes, last))
        self.changeserver_last = max(self.changeserver_last, last)
        position = self.position.copy()
        position.renamed.update(self._renames)
        messages: list[Message] = []
        received_at = received_now()
        # Read from before ``since`` (a resumed unit, or after a gap): only then may a change
        # be one that a unit published already, so only then is each change's sequence
        # parsed and compared.
        rewound = since < self.position.since
        for i, change in enumerate(body["changes"]):
            if i % _TURN_EVERY == _TURN_EVERY - 1:
                # Let the loop run: the read ahead is sent and its answer received meanwhile,
                # not after the batch (converting 10,000 changes takes ~0.3 s).
                await asyncio.sleep(0)
            if change["table"] == WATERMARKS:
                mark = self._chunks.mark_of(change)
                if mark is None:
                    continue
                if self._discovery is not None and self._discovery[0] == mark:
                    self._discovered(position)
                chunk = self._chunks.watermark(mark)
                if chunk is not None:
                    messages += await self._snapshot_events(chunk, position, change, received_at)
                continue
            if change["operation"] > _DELETE:
                messages += await self._table_event(change, position, rewound, received_at)
                continue
            published = await self._publish(change, position, rewound, received_at)
            if published is None:
                continue
            unit, event_type, produced = published
            messages.extend(produced)
            progress = position.own(unit)
            progress.event_type = event_type
            progress.sequence = change["sequence"]
            progress.events += len(produced)
            progress.commit_time = change["timestamp"]
        position.since = max(position.since, last)
        for unit, held in list(position.held.items()):
            if unit in self.stopped:
                continue
            position.held[unit] = max(held, last)
            if position.held[unit] >= position.since:
                del position.held[unit]
        if position != self.position:  # the fields' equality: as the records would compare
            await self._commit(commits, messages, position)

    async def _pause(self, commits: Commits[Position]) -> None:
        """A timeline switch asks every writer to pause: what was prepared is committed first,
        then the bridge waits for the switch and writes to the event types as they are now."""
        assert self._writer is not None
        await commits.drain()
        await self._writer.paused()
        await self._retarget()

    async def _retarget(self) -> None:
        """Read every event type in force again: a timeline switch gave it a new topic."""
        assert self._event_types is not None
        for table, published in list(self._published.items()):
            target = await self._event_types.target(published.target.name)
            if target is None:
                del self._published[table]
            else:
                self._published[table] = Published.of(target, published.schema)

    def _writable(self, target: Target) -> None:
        """Refuse an event type whose active timeline is on another Kafka cluster."""
        if target.cluster != self._cluster:
            raise UnitStopped(
                f"event type {target.name} is on another Kafka cluster"
                f" ({target.cluster.bootstrap}); the bridge commits events and its position in"
                f" one transaction of its own ({self._cluster.bootstrap}): create a timeline of"
                " it on the bridge's cluster, then resume the unit"
            )

    async def _after_gap(self, commits: Commits[Position], since: Sequence) -> None:
        """The changeserver no longer holds changes after ``since`` (its replication slot was
        lost and made again, or retention removed them): read on from the start of what it
        holds, and snapshot every table again, so the rows the gap hid are published as
        ``S`` events; the new runs are committed before any chunk is read.

        The position stays at ``since``: the read from the start skips every change up to
        it. A server of a fleet that did not lose them serves them again (the load balancer
        may send that read to any server), and they were published already."""
        log.error(
            "changes after our position are gone upstream: snapshotting every table again",
            extra=logs.fields(since=str(since), tables=len(self.position.snapshots)),
        )
        if self._prefetch is not None:  # a read after ``since``: too old as well
            self._prefetch[1].cancel()
            self._prefetch = None
        self.position = dataclasses.replace(self.position.copy(), held={})
        self._read_all = True
        for table in self.position.snapshots:
            self._snapshot_requests[table] = Run(uuid.uuid4().hex, now_rfc3339())
        if self._snapshot_requests:
            await self._start_requested(commits)
        else:
            await self._commit(commits, [], self.position)
            await commits.drain()

    async def _commit(
        self, commits: Commits[Position], messages: list[Message], position: Position
    ) -> None:
        """Commit ``messages`` and ``position`` in a Kafka transaction after what came before;
        ``self.position`` is ``position`` from now on (a failed commit ends the session,
        which starts over from what Kafka holds)."""
        self.position = position
        await commits.add(messages, position.as_json(), position)

    def _on_committed(self, position: Position) -> None:
        self.committed = position
        for unit, name in position.renamed.items():
            if self._renames.get(unit) == name:
                del self._renames[unit]

    def _poll(self, changes: ChangesClient, since: Sequence) -> asyncio.Future[Answer]:
        """The read of changes after ``since``: the one prefetched if it starts there."""
        prefetched, self._prefetch = self._prefetch, None
        if prefetched is not None:
            if prefetched[0] == since:
                return prefetched[1]
            prefetched[1].cancel()  # a resumed unit moved the read back
        s = self.settings
        # Every change of these tables whatever its selector (the changeserver's extension).
        read = (*(s.include or ("*",)), s.outbox_table, WATERMARKS)
        params = [
            *(("table", pattern) for pattern in read),
            ("since", str(since)),
            ("limit", str(s.limit)),
            ("block", str(s.block)),
        ]
        return asyncio.ensure_future(changes.get(params))

    async def _publish(
        self, change: Mapping[str, Any], position: Position, rewound: bool, received_at: str
    ) -> tuple[str, str, list[Message]] | None:
        """(unit, event type, messages) of one change; ``None`` when it publishes nothing."""
        table = change["table"]
        outbox = table == self.settings.outbox_table
        if not outbox and (
            not self.selection(table) or table in self.refused or table in self._gone
        ):
            return None
        if outbox:
            if change["operation"] != _INSERT:
                return None  # the outbox's deletes (and updates) publish nothing
            unit = f"outbox:{change['newRow']['event_type']['value']}"
        else:
            unit = table
        if unit in self.stopped:
            return None
        if rewound and Sequence.parse(change["sequence"]) <= position.floor(unit):
            return None
        if not outbox:
            self._chunks.observe(change)
        try:
            if outbox:
                event_type, messages = await self._outbox_event(change, received_at)
            else:
                event_type, messages = await self._data_events(change, received_at)
        except TableRefused:
            return None  # refused and logged by _describe; nothing of it is published
        except TableGone:
            # Not some changes of it and not others: none, until its DROP.
            self._gone.add(table)
            log.warning(
                "table dropped before any change of it was published: its changes are skipped"
                " until its DROP",
                extra=logs.fields(table=table),
            )
            return None
        except (UnitStopped, SchemaRefused, ItemFailure) as exc:
            reason = exc.detail if isinstance(exc, ItemFailure) else str(exc)
            self._stop(unit, reason, Sequence.parse(change["sequence"]), position)
            return None
        return unit, event_type, messages

    # -- data change events -------------------------------------------------------------

    async def _data_events(
        self, change: Mapping[str, Any], received_at: str
    ) -> tuple[str, list[Message]]:
        table = change["table"]
        row = change.get("newRow") or change.get("oldRow") or {}
        row_types = {n: c["type"] for n, c in row.items()}
        # Asked of every change: answered without a coroutine while the schema stands.
        published = self._in_force(table, row_types) or await self._evolved(table, row_types)
        target = published.target
        self._writable(target)
        op = _OPS[change["operation"]]
        seq = change["sequence"]
        when = occurred_at(change)

        def event(eid_name: str, op: str, data: dict[str, Any]) -> Message:
            return _prepare(published, table, eid_name, op, data, when, received_at)

        if op == "D":
            old_row = row_values(change["oldRow"])
            described = self._tables.get(table)
            if described is not None and not described.full_identity and target.key_fields:
                # REPLICA IDENTITY DEFAULT: the old row is its key; the rest is not known.
                old_row = {k: old_row.get(k) for k in target.key_fields}
            return target.name, [event(seq, "D", old_row)]
        data = row_values(change["newRow"])
        old = change.get("oldRow")
        out = []
        if op == "U" and old is not None and target.key_fields:
            old_data = row_values(old)
            if any(old_data.get(k) != data.get(k) for k in target.key_fields):
                # The key changed: the row under the old key is gone, and consumers hear so.
                old_key = {k: old_data.get(k) for k in target.key_fields}
                out.append(event(f"{seq}/old", "D", old_key))
        out.append(event(seq, op, data))
        return target.name, out

    def _in_force(self, table: str, row_types: dict[str, int]) -> Published | None:
        """The table's event type as last set, unless this row brings columns or types the
        bridge has not seen (``None``: :meth:`_evolved` is needed)."""
        published = self._published.get(table)
        if published is not None and row_types.items() <= self._row_types.get(table, {}).items():
            return published
        return None

    async def _evolved(self, table: str, row_types: dict[str, int]) -> Published:
        """The table's event type, its schema evolved first when this row brings columns or
        types the bridge has not seen."""
        in_force = self._in_force(table, row_types)
        if in_force is not None:
            return in_force
        known = self._row_types.get(table, {})
        assert self._catalog is not None and self._event_types is not None
        name = self._event_type_name(table)
        # As last set, or as stored (a restart, a table redefined): what it declared stays.
        published = self._published.get(table) or await self._event_types.published(name)
        described = await self._describe(table)
        if described is None and table in self.refused:
            raise TableRefused(self.refused[table])
        catalog = described is not None
        if described is None and published is None:
            raise TableGone(table)
        if described is None:
            # Dropped since: the change's own columns are all there is to go by.
            assert published is not None
            described = tables.Table(table, (), published.target.key_fields)
        previous = published.schema if published else None
        schema = tables.json_schema(described, row_types, previous, catalog)
        if published is None or tables.canonical(schema) != tables.canonical(published.schema):
            published = await self._event_types.ensure(
                name, described, schema, self.settings.partitions
            )
            log.info(
                "table schema in force",
                extra=logs.fields(table=table, event_type=name, version=published.target.version),
            )
        self._published[table] = published
        self._row_types[table] = {**known, **row_types}
        return published

    def _event_type_name(self, table: str) -> str:
        """The table's event type: where an operator moved it, else by ``--pattern``."""
        return self._renames.get(table) or self.position.renamed.get(
            table, event_type_name(self.settings.pattern, self.settings.prefix, table)
        )

    # -- table events -------------------------------------------------------------------

    async def _table_event(
        self, change: Mapping[str, Any], position: Position, rewound: bool, received_at: str
    ) -> list[Message]:
        """A TRUNCATE, DROP, CREATE or REDEFINE of a table (the changeserver's table events):

        * TRUNCATE: a table event in every partition ends every earlier row; a snapshot run
          under way is done (the rows it had not read are gone, later ones are changes);
        * DROP: the same, the event type's schema marked as ended, and the unit ends: its
          progress, run and state are forgotten (a dropped table's name is no unit);
        * CREATE: a new table, every row of which comes through the stream: no snapshot;
        * REDEFINE: earlier events no longer describe the rows (a column renamed, a default
          filled in, a retype...): the schema follows the catalog, and a new snapshot run
          publishes every row again, each ``S`` event replacing the row.

        Pending chunks of the table are dropped in each case: read before, they may describe
        rows as they no longer are."""
        table, operation = change["table"], change["operation"]
        if not self.selection(table) or table in self.stopped:
            return []
        if rewound and Sequence.parse(change["sequence"]) <= position.floor(table):
            return []
        self._chunks.discard(table)
        self._snapshot_requests.pop(table, None)
        self._gone.discard(table)
        if operation in (CREATE, DROP) and self._discovery is not None:
            # The catalog the pending discovery read may have shown the table this drops (a
            # run for it would read the next table of the name, whose CREATE comes through
            # the stream), or the one this creates: either way the stream tells the rest.
            with contextlib.suppress(ValueError):
                self._discovery[1].remove(table)
        log.info(
            "table event",
            extra=logs.fields(table=table, operation=operation, detail=change.get("detail", "")),
        )
        if operation == CREATE:
            # Refused now (no key): its changes are not published, so it is not complete
            # from the stream; once it has a key, it is snapshotted. Gone again: it was.
            await self._describe(table)
            if table not in self.refused:
                run = Run(uuid.uuid4().hex, now_rfc3339(), created=change["sequence"])
                run.finished_at = run.started_at
                position.snapshots[table] = run
            return []
        if operation == REDEFINE:
            await self._redefined(table, change, position)
            return []
        if table in self.refused:
            if operation == DROP:
                self._end_unit(table, position)
            return []  # never published: no rows to end
        try:
            messages = await self._ended_rows(table, change, position, received_at)
        except UnitStopped as exc:
            self._stop(table, str(exc), Sequence.parse(change["sequence"]), position)
            return []
        if operation == DROP:
            await self._mark_dropped(table)
            self._end_unit(table, position)
        elif operation == TRUNCATE:
            running = position.snapshots.get(table)
            if running is not None and running.finished_at is None:
                running.finished_at = now_rfc3339()
                log.info(
                    "snapshot finished: the table was truncated", extra=logs.fields(table=table)
                )
        return messages

    async def _ended_rows(
        self, table: str, change: Mapping[str, Any], position: Position, received_at: str
    ) -> list[Message]:
        """The table events that end every earlier row of ``table``, one per partition (none
        when the table never had an event type)."""
        assert self._event_types is not None
        published = self._published.get(table) or await self._event_types.published(
            self._event_type_name(table)
        )
        if published is None:
            return []
        if not published.ends_rows:
            raise UnitStopped(
                f"event type {published.target.name} was created before table events: its"
                " schema requires the key in every event, so a TRUNCATE or DROP TABLE cannot"
                " be told to its consumers. Move the table to a new event type"
                ' (POST /units/<table>/resume with {"event_type": ...})'
            )
        sequence = change["sequence"]
        eids = [
            eid(f"{table}/{sequence}/partition/{p}") for p in range(published.target.partitions)
        ]
        flow_id = "truncate" if change["operation"] == TRUNCATE else "drop"
        messages = ended_rows(published, table, eids, flow_id, occurred_at(change), received_at)
        progress = position.progress.setdefault(table, Progress())
        progress.event_type = published.target.name
        progress.sequence = sequence
        progress.events += len(messages)
        progress.commit_time = change["timestamp"]
        return messages

    async def _redefined(self, table: str, change: Mapping[str, Any], position: Position) -> None:
        """The schema follows the catalog now (renamed and dropped columns marked, added ones
        declared), and a new run publishes every row again."""
        self._published.pop(table, None)
        self._row_types.pop(table, None)
        described = await self._describe(table)
        if described is None:
            return  # refused, or gone again: its DROP follows
        try:
            await self._evolved(table, {})
        except TableGone:
            return
        except (SchemaRefused, TableRefused) as exc:
            self._stop(table, str(exc), Sequence.parse(change["sequence"]), position)
            return
        self._snapshot_requests[table] = Run(uuid.uuid4().hex, now_rfc3339())

    async def _mark_dropped(self, table: str) -> None:
        """The event type stays, for its retention; its schema says the table was dropped."""
        assert self._event_types is not None
        name = self._event_type_name(table)
        published = await self._event_types.published(name)
        if published is None:
            return
        key = tables.Table(table, (), published.target.key_fields)
        schema = tables.dropped_schema(published.schema, table)
        try:
            await self._event_types.ensure(name, key, schema, self.settings.partitions)
        except SchemaRefused as exc:
            log.warning(
                "dropped table's event type not marked",
                extra=logs.fields(table=table, error=str(exc)),
            )

    def _end_unit(self, table: str, position: Position) -> None:
        """A dropped table is no unit any more: nothing of it stays in the position record,
        ``/status`` or memory (a table of the same name later is a new unit)."""
        position.forget(table)
        for state in (
            self.stopped,
            self.refused,
            self._published,
            self._row_types,
            self._tables,
            self.rows_read_here,
            self._progress_logged,
        ):
            state.pop(table, None)

    # -- the outbox ---------------------------------------------------------------------

    async def _outbox_event(
        self, change: Mapping[str, Any], received_at: str
    ) -> tuple[str, list[Message]]:
        """An outbox insert as an event of its event type, validated by that type's schema.

        Its partition: the event type's strategy; under ``random`` (any partition will do)
        the row's ``partition_key`` picks it, so one key's events keep their commit order.
        """
        assert self._event_types is not None
        row = row_values(change["newRow"])
        name = row["event_type"]
        target = await self._event_types.target(name)
        if target is None:
            raise UnitStopped(f"outbox event type {name!r} does not exist: create it")
        self._writable(target)
        event = row["payload"]
        if not isinstance(event, dict):
            raise UnitStopped(f"outbox row {row.get('id')}: payload must be a JSON object")
        key = row.get("partition_key")
        chosen = None
        if key is not None and target.partition_strategy == "random":
            chosen = abs(java_string_hash(str(key))) % target.partitions
        if target.category != "undefined":
            metadata = dict(event.get("metadata") or {})
            metadata.setdefault("eid", eid(f"outbox:{name}/{change['sequence']}"))
            metadata.setdefault("occurred_at", occurred_at(change))
            if chosen is not None:
                metadata["partition"] = str(chosen)
                target = dataclasses.replace(target, partition_strategy="user_defined")
            event = {**event, "metadata": metadata}
        message = prepare(target, event, 0, received_at)
        if chosen is not None and target.category == "undefined":
            message = dataclasses.replace(message, partition=chosen)
        return name, [message]


def _prepare(
    published: Published,
    table: str,
    eid_name: str,
    op: str,
    data: dict[str, Any],
    when: str,
    received_at: str,
    flow_id: str | None = None,
) -> Message:
    metadata = {"eid": eid(f"{table}/{eid_name}"), "occurred_at": when}
    if flow_id is not None:
        metadata["flow_id"] = flow_id
    event = {
        "metadata": metadata,
        "data_op": op,
        "data_type": table,
        "data": data,
    }
    target, own = published.target, published.own
    message = prepare(target, event, 0, received_at, valid=own is not None and own.admits(data))
    if target.key_fields:
        message.key = record_key(data, target.key_fields)
    return message


def record_key(data: Mapping[str, Any], key_fields: Iterable[str]) -> bytes:
    """A data event's Kafka record key: its row's key values as the event renders them, a
    compact JSON array in key order. One row's events share it (a key change's ``D`` has the
    old key's), so the replay picks each row's last event by it before parsing any."""
    return orjson.dumps([data[k] for k in key_fields])
