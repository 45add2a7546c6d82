"""Timelines in Postgres (``sql/broker/009_storages_and_timelines.sql``): read, kept per event
type revision, and the statements that switch, clean up and widen them.

Every change to an event type's timelines also bumps the event type's revision (and its topic,
on a switch), so each broker process notices it through the notification every change to
``broker_event_types`` sends (``changebroker.broker.event_types.store``), and reads them again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from changebroker import kafka
from changebroker.broker.event_types.store import Revision, Store
from changebroker.broker.timelines.model import Timeline, Timelines, timelines_of
from changebroker.broker.timelines.storages import cluster_of

_SELECT = """
SELECT e.name AS event_type, e.partitions, t.id::text, t.timeline_order, t.storage_id,
       s.kafka_configuration, t.topic, t.created_at, t.switched_at, t.latest_offsets,
       t.cleanup_at, t.deleted
FROM broker_event_types e
JOIN broker_timelines t ON t.event_type = e.name
JOIN broker_storages s ON s.id = t.storage_id
"""


def _timeline(row: Mapping[str, Any], own: kafka.Cluster) -> Timeline:
    latest = row["latest_offsets"]
    return Timeline(
        id=row["id"],
        event_type=row["event_type"],
        order=row["timeline_order"],
        storage=row["storage_id"],
        cluster=cluster_of(row["kafka_configuration"], own),
        topic=row["topic"],
        created_at=row["created_at"],
        switched_at=row["switched_at"],
        latest=None if latest is None else tuple(int(o) for o in latest),
        cleanup_at=row["cleanup_at"],
        deleted=row["deleted"],
    )


def _grouped(rows: Sequence[Mapping[str, Any]], own: kafka.Cluster) -> dict[str, Timelines]:
    found: dict[str, tuple[int, list[Timeline]]] = {}
    for row in rows:
        found.setdefault(row["event_type"], (row["partitions"], []))[1].append(_timeline(row, own))
    return {name: timelines_of(name, count, rows) for name, (count, rows) in found.items()}


async def load(
    conn: psycopg.AsyncConnection[Any], names: Sequence[str], own: kafka.Cluster
) -> dict[str, Timelines]:
    """The timelines of those of ``names`` that exist, on ``conn`` (inside its transaction)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_SELECT + " WHERE e.name = ANY(%s)", (list(names),))
        return _grouped(await cur.fetchall(), own)


class TimelineStore:
    """Each event type's :class:`Timelines`, kept in this process while its revision is."""

    def __init__(self, store: Store, own: kafka.Cluster) -> None:
        self.store = store
        self.own = own
        self._kept: dict[str, tuple[Revision, Timelines]] = {}

    async def of(self, name: str, *, fresh: bool = False) -> Timelines | None:
        """The event type's timelines, None when it does not exist; ``fresh``: as Postgres has
        them now, whatever this process was told."""
        revision = await self.store.revision(name, fresh=fresh)
        if revision is None:
            self._kept.pop(name, None)
            return None
        kept = self._kept.get(name)
        if kept is not None and kept[0] == revision:
            return kept[1]
        async with self.store.pool.connection() as conn:
            found = (await load(conn, [name], self.own)).get(name)
        if found is not None:
            self._kept[name] = (revision, found)
        return found

    async def of_all(self) -> dict[str, Timelines]:
        """Every event type's timelines, read now."""
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_SELECT)
            return _grouped(await cur.fetchall(), self.own)


async def insert_first(
    conn: psycopg.AsyncConnection[Any], event_type: str, storage: str, topic: str
) -> None:
    """A new event type's first timeline, active from now."""
    await conn.execute(
        "INSERT INTO broker_timelines"
        " (id, event_type, timeline_order, storage_id, topic, switched_at)"
        " VALUES (%s, %s, 1, %s, %s, now())",
        (str(uuid.uuid4()), event_type, storage, topic),
    )


@dataclass(frozen=True)
class Switch:
    """What a switch writes: the next timeline, and where the active one ends."""

    event_type: str
    closing: Timeline
    latest: Sequence[int]
    retention_ms: int
    storage: str
    topic: str


async def shift_cleanups(conn: psycopg.AsyncConnection[Any], event_type: str, by_ms: int) -> None:
    """The event type's retention changed by ``by_ms``: its closed timelines' topics are
    deleted that much later (or sooner), as Nakadi moves their ``cleaned_up_at``."""
    await conn.execute(
        "UPDATE broker_timelines SET cleanup_at = cleanup_at + make_interval(secs => %s)"
        " WHERE event_type = %s AND cleanup_at IS NOT NULL AND NOT deleted",
        (by_ms / 1000, event_type),
    )


async def switch(conn: psycopg.AsyncConnection[Any], change: Switch) -> None:
    """Close the active timeline at ``latest`` (its topic deleted after ``retention_ms``), make
    the next one active on ``topic``, and point publishing at it."""
    await conn.execute(
        "UPDATE broker_timelines SET latest_offsets = %s,"
        " cleanup_at = now() + make_interval(secs => %s) WHERE id = %s",
        (list(change.latest), change.retention_ms / 1000, change.closing.id),
    )
    await conn.execute(
        "INSERT INTO broker_timelines"
        " (id, event_type, timeline_order, storage_id, topic, switched_at)"
        " VALUES (%s, %s, %s, %s, %s, now())",
        (
            str(uuid.uuid4()),
            change.event_type,
            change.closing.order + 1,
            change.storage,
            change.topic,
        ),
    )
    await conn.execute(
        "UPDATE broker_event_types SET topic = %s, revision = revision + 1 WHERE name = %s",
        (change.topic, change.event_type),
    )


@dataclass(frozen=True)
class Expired:
    id: str
    event_type: str
    topic: str
    cluster: kafka.Cluster
    cleanup_at: datetime


async def next_expired(conn: psycopg.AsyncConnection[Any], own: kafka.Cluster) -> Expired | None:
    """A closed timeline whose retention is over, locked (another process's cleanup skips it)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT t.id::text, t.event_type, t.topic, s.kafka_configuration, t.cleanup_at"
            " FROM broker_timelines t JOIN broker_storages s ON s.id = t.storage_id"
            " WHERE NOT t.deleted AND t.cleanup_at <= now()"
            " ORDER BY t.cleanup_at LIMIT 1 FOR UPDATE OF t SKIP LOCKED"
        )
        row = await cur.fetchone()
    if row is None:
        return None
    return Expired(
        row["id"],
        row["event_type"],
        row["topic"],
        cluster_of(row["kafka_configuration"], own),
        row["cleanup_at"],
    )


async def mark_deleted(conn: psycopg.AsyncConnection[Any], expired: Expired) -> None:
    await conn.execute("UPDATE broker_timelines SET deleted = true WHERE id = %s", (expired.id,))
    await conn.execute(
        "UPDATE broker_event_types SET revision = revision + 1 WHERE name = %s",
        (expired.event_type,),
    )
