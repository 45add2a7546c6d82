"""The loop: long-poll ``/changes``, turn each change into events through the broker's
publishing pipeline, commit the events and the new position in one Kafka transaction.

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
import dataclasses
import functools
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg

from broker.bridge import tables, values
from broker.bridge.event_types import EventTypes, Published, SchemaRefused, event_type_name
from broker.bridge.transactions import (
    Transactions,
    ensure_positions_topic,
    load_position,
)
from broker.partitioning import java_string_hash
from broker.producer import Message
from broker.publishing import ItemFailure, Target, prepare, received_now
from broker.store import Store
from changebroker import logs, pg
from changeserver.sequence import ZERO, Sequence

log = logging.getLogger(__name__)

_OPS = {1: "C", 2: "U", 3: "D"}
_INSERT = 1
# eids are uuid5 of "<unit>/<sequence>" in this namespace: the same change, the same eid.
EID_NAMESPACE = uuid.UUID("6f1c2f4e-1b0a-5c39-9b7e-2f1d0c4b8a11")


@dataclass(frozen=True)
class Settings:
    changeserver_url: str
    broker_url: str
    meta_dsn: str  # the broker's metadata database (event types)
    app_dsn: str  # the application database (the tables' catalog)
    kafka_bootstrap: str
    name: str = "bridge"
    selectors: tuple[str, ...] = ("bridge",)
    tables: tuple[str, ...] = ()  # empty: every table whose changes arrive
    prefix: str = "changebroker"
    pattern: str = "{prefix}.{schema}.{table}"
    outbox_table: str = "public.changebroker_outbox"
    partitions: int = 4
    limit: int = 10_000
    block: int = 5
    replication_factor: int = 1


@dataclass
class Progress:
    event_type: str = ""
    sequence: str = ""  # last change published
    events: int = 0
    commit_time: int = 0  # of that change, Unix seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "event_type": self.event_type,
            "sequence": self.sequence,
            "events": self.events,
            "commit_time": self.commit_time,
        }


@dataclass
class Position:
    """What is committed with every batch (the position record)."""

    since: Sequence = ZERO
    held: dict[str, Sequence] = field(default_factory=dict)
    progress: dict[str, Progress] = field(default_factory=dict)
    # Tables an operator moved to another event type (a change their old one refuses).
    renamed: dict[str, str] = field(default_factory=dict)

    def floor(self, unit: str) -> Sequence:
        return self.held.get(unit, self.since)

    def as_json(self) -> dict[str, Any]:
        return {
            "since": str(self.since),
            "held": {unit: str(seq) for unit, seq in self.held.items()},
            "progress": {unit: p.as_json() for unit, p in self.progress.items()},
            "renamed": dict(self.renamed),
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
        )

    def copy(self) -> Position:
        return Position(
            self.since,
            dict(self.held),
            {unit: Progress(**p.as_json()) for unit, p in self.progress.items()},
            dict(self.renamed),
        )


def before(seq: Sequence) -> Sequence:
    """The greatest sequence below ``seq``: holding a unit there republishes ``seq`` on."""
    if seq.index > 0:
        return Sequence(seq.lsn, seq.index - 1)
    return Sequence(seq.lsn - 1, 0xFFFFFFFF)


def occurred_at(change: Mapping[str, Any]) -> str:
    return _rfc3339(change["timestamp"])


@functools.lru_cache(maxsize=64)
def _rfc3339(seconds: int) -> str:
    # /changes gives the commit time in whole seconds (transicator's contract); a batch's
    # changes mostly share one, hence the cache.
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def row_values(row: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {name: values.to_json(col["value"], col["type"]) for name, col in row.items()}


class UnitStopped(Exception):
    """This change cannot be published; its unit stops here."""


class Bridge:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.position = Position()
        self.stopped: dict[str, str] = {}  # unit -> why; in memory: a restart retries
        self.changeserver_last = ZERO
        self.ready = asyncio.Event()
        self._published: dict[str, Published] = {}  # table -> its event type as last set
        self._row_types: dict[str, dict[str, int]] = {}  # table -> column OIDs seen
        self._wake = asyncio.Event()
        self._renames: dict[str, str] = {}  # asked for, not committed yet
        # The next read, started while the current batch is processed and committed.
        self._prefetch: tuple[Sequence, asyncio.Future[httpx.Response]] | None = None
        self._catalog: psycopg.AsyncConnection[Any] | None = None
        self._event_types: EventTypes | None = None

    # -- status -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        last = self.changeserver_last
        units = {}
        for unit in sorted({*self.position.progress, *self.stopped, *self.position.held}):
            progress = self.position.progress.get(unit, Progress())
            floor = self.position.floor(unit)
            units[unit] = {
                **progress.as_json(),
                "position": str(floor),
                "lag_bytes": max(0, last.lsn - floor.lsn),
                "stopped": self.stopped.get(unit),
            }
        return {
            "name": self.settings.name,
            "ready": self.ready.is_set(),
            "position": str(self.position.since),
            "changeserver_last_sequence": str(last),
            "lag_bytes": max(0, last.lsn - self.position.since.lsn),
            "units": units,
        }

    def resume(self, unit: str, event_type: str | None = None) -> bool:
        """An operator acted on what stopped ``unit``: try its held changes again, into
        ``event_type`` when given (Nakadi's answer to a change the mode refuses: a new event
        type; it is committed with the next batch, so a restart keeps it)."""
        if self.stopped.pop(unit, None) is None:
            return False
        self._published.pop(unit, None)
        if event_type:
            self._renames[unit] = event_type
        log.info("unit resumed", extra=logs.fields(unit=unit, event_type=event_type or ""))
        self._wake.set()
        return True

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
        await asyncio.to_thread(ensure_positions_topic, s.kafka_bootstrap, s.replication_factor)
        producer = await asyncio.to_thread(Transactions, s.kafka_bootstrap, s.name)
        store = Store(s.meta_dsn, pool_size=2)
        try:
            record = await asyncio.to_thread(load_position, s.kafka_bootstrap, s.name)
            self.position = Position.of(record)
            await asyncio.to_thread(pg.migrate, s.app_dsn, "outbox")
            # Stops not committed with a held position (the failed batch's) must not skip
            # anything now; the committed ones are retried, as after any restart.
            self.stopped.clear()
            self._published.clear()
            self._row_types.clear()
            await store.open()
            async with (
                await psycopg.AsyncConnection.connect(s.app_dsn, autocommit=True) as catalog,
                httpx.AsyncClient(base_url=s.broker_url, timeout=60) as broker,
                httpx.AsyncClient(base_url=s.changeserver_url, timeout=s.block + 60) as changes,
            ):
                self._catalog = catalog
                self._event_types = EventTypes(store, broker)
                log.info(
                    "bridge resuming",
                    extra=logs.fields(since=str(self.position.since), held=len(self.position.held)),
                )
                self.ready.set()
                while True:
                    await self._step(changes, producer)
        finally:
            if self._prefetch is not None:
                self._prefetch[1].cancel()
                self._prefetch = None
            self._catalog = self._event_types = None
            await asyncio.to_thread(producer.close)
            await store.close()

    def _read_from(self) -> Sequence:
        resumed = [seq for unit, seq in self.position.held.items() if unit not in self.stopped]
        return min([self.position.since, *resumed])

    async def _step(self, changes: httpx.AsyncClient, producer: Transactions) -> None:
        since = self._read_from()
        self._wake.clear()
        poll = self._poll(changes, since)
        woken: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait([poll, woken], return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
        if not poll.done():
            # An operator resumed a unit while we waited: read again from its held position.
            poll.cancel()
            return
        response = poll.result()
        response.raise_for_status()
        body = response.json()
        last = Sequence.parse(body["lastSequence"])
        if body["changes"]:
            # Read on while this batch is turned into events and committed.
            self._prefetch = (last, self._poll(changes, last))
        self.changeserver_last = max(self.changeserver_last, last)
        position = self.position.copy()
        position.renamed.update(self._renames)
        messages: list[Message] = []
        received_at = received_now()
        # Read from before ``since`` (a resumed unit): only then may a change be one that a
        # unit published already, so only then is each change's sequence parsed and compared.
        rewound = since < self.position.since
        for change in body["changes"]:
            published = await self._publish(change, position, rewound, received_at)
            if published is None:
                continue
            unit, event_type, produced = published
            messages.extend(produced)
            progress = position.progress.setdefault(unit, Progress())
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
        if position.as_json() != self.position.as_json():
            await asyncio.to_thread(producer.commit, messages, position.as_json())
            self.position = position
            for unit, name in position.renamed.items():
                if self._renames.get(unit) == name:
                    del self._renames[unit]

    def _poll(self, changes: httpx.AsyncClient, since: Sequence) -> asyncio.Future[httpx.Response]:
        """The read of changes after ``since``: the one prefetched if it starts there."""
        prefetched, self._prefetch = self._prefetch, None
        if prefetched is not None:
            if prefetched[0] == since:
                return prefetched[1]
            prefetched[1].cancel()  # a resumed unit moved the read back
        s = self.settings
        params: list[tuple[str, str | int | float | bool | None]] = [
            *(("selector", selector) for selector in s.selectors),
            ("since", str(since)),
            ("limit", str(s.limit)),
            ("block", str(s.block)),
        ]
        return asyncio.ensure_future(changes.get("/changes", params=params))

    async def _publish(
        self, change: Mapping[str, Any], position: Position, rewound: bool, received_at: str
    ) -> tuple[str, str, list[Message]] | None:
        """(unit, event type, messages) of one change; ``None`` when it publishes nothing."""
        table = change["table"]
        if self.settings.tables and table not in self.settings.tables:
            return None
        outbox = table == self.settings.outbox_table
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
        try:
            if outbox:
                event_type, messages = await self._outbox_event(change, received_at)
            else:
                event_type, messages = await self._data_events(change, received_at)
        except (UnitStopped, SchemaRefused, ItemFailure) as exc:
            reason = exc.detail if isinstance(exc, ItemFailure) else str(exc)
            self.stopped[unit] = reason
            seq = Sequence.parse(change["sequence"])
            position.held[unit] = before(seq)
            log.error(
                "unit stopped: its changes wait until an operator acts",
                extra=logs.fields(unit=unit, sequence=str(seq), reason=reason),
            )
            return None
        return unit, event_type, messages

    # -- data change events -------------------------------------------------------------

    async def _data_events(
        self, change: Mapping[str, Any], received_at: str
    ) -> tuple[str, list[Message]]:
        table = change["table"]
        row = change.get("newRow") or change.get("oldRow") or {}
        target = (await self._evolved(table, {n: c["type"] for n, c in row.items()})).target
        op = _OPS[change["operation"]]
        seq = change["sequence"]
        when = occurred_at(change)

        def event(eid_name: str, op: str, data: dict[str, Any]) -> Message:
            return _prepare(target, table, eid_name, op, data, when, received_at)

        if op == "D":
            return target.name, [event(seq, "D", row_values(change["oldRow"]))]
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

    async def _evolved(self, table: str, row_types: dict[str, int]) -> Published:
        """The table's event type, its schema evolved first when this row brings columns or
        types the bridge has not seen."""
        known = self._row_types.get(table, {})
        published = self._published.get(table)
        if published is not None and all(known.get(n) == oid for n, oid in row_types.items()):
            return published
        assert self._catalog is not None and self._event_types is not None
        described = await tables.describe(self._catalog, table)
        if described is None:
            # Dropped since: the change's own columns are all there is to go by.
            key = published.target.key_fields if published else ()
            described = tables.Table(table, (), tuple(key))
        if published is None and not described.full_identity:
            log.warning(
                "table is not REPLICA IDENTITY FULL: its deletes carry no selector and never"
                " reach the bridge",
                extra=logs.fields(table=table),
            )
        schema = tables.json_schema(described, row_types, published.schema if published else None)
        if published is None or tables.canonical(schema) != tables.canonical(published.schema):
            name = self._renames.get(table) or self.position.renamed.get(
                table, event_type_name(self.settings.pattern, self.settings.prefix, table)
            )
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
        event = row["payload"]
        if not isinstance(event, dict):
            raise UnitStopped(f"outbox row {row.get('id')}: payload must be a JSON object")
        key = row.get("partition_key")
        chosen = None
        if key is not None and target.partition_strategy == "random":
            chosen = abs(java_string_hash(str(key))) % target.partitions
        if target.category != "undefined":
            metadata = dict(event.get("metadata") or {})
            eid = uuid.uuid5(EID_NAMESPACE, f"outbox:{name}/{change['sequence']}")
            metadata.setdefault("eid", str(eid))
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
    target: Target,
    table: str,
    eid_name: str,
    op: str,
    data: dict[str, Any],
    when: str,
    received_at: str,
) -> Message:
    event = {
        "metadata": {
            "eid": str(uuid.uuid5(EID_NAMESPACE, f"{table}/{eid_name}")),
            "occurred_at": when,
        },
        "data_op": op,
        "data_type": table,
        "data": data,
    }
    return prepare(target, event, 0, received_at)
