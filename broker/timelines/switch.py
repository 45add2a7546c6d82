"""Creating a timeline: a new topic on the chosen storage takes over an event type's events.

1. The next topic is created, with the event type's partitions and settings.
2. The event type is locked for writers (:mod:`changebroker.broker.timelines.writers`); once every
   writer has paused, no event can reach the active topic any more.
3. Where each of its partitions ends is read from Kafka and, in one transaction under the
   event type's row lock, becomes the closing timeline's ``latest_offsets``; the new timeline
   becomes active and publishing's topic.
4. The lock goes: writers read the event type again and write to the new topic.

Anything failing before the commit leaves the event type as it was (the new topic is
deleted). Readers move from the closing timeline to the next once they reach its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass

import psycopg

from changebroker import kafka, logs
from changebroker.broker.errors import BrokerError, Conflict, Unavailable, Unprocessable
from changebroker.broker.event_types.store import Store
from changebroker.broker.event_types.topics import TopicError, topic_config, topic_name
from changebroker.broker.timelines import store as timeline_sql
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.storages import Storage
from changebroker.broker.timelines.writers import LAPSE_GRACE_SECONDS, lock_seconds

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.02
# The commit must start this long before writers would take the lock for a dead switch's.
_COMMIT_MARGIN_SECONDS = 10.0


class TimelineUnavailable(BrokerError, status=503):
    """Nakadi's TimelineException: the switch could not be made now; nothing changed."""


@dataclass(frozen=True)
class Switcher:
    store: Store
    clusters: Clusters
    default_retention_ms: int
    wait_timeout: float

    async def switch(self, name: str, storage: Storage) -> int:
        """Make a new timeline of ``name`` on ``storage`` active; its order. The caller checked
        that the event type exists and may move."""
        lock_id = str(uuid.uuid4())
        started = time.monotonic()
        async with self.store.pool.connection() as conn:
            try:
                await conn.execute(
                    "INSERT INTO broker_write_locks (id, event_type, expires_at)"
                    " VALUES (%s, %s, now() + make_interval(secs => %s))",
                    (lock_id, name, lock_seconds(self.wait_timeout)),
                )
            except psycopg.errors.UniqueViolation:
                raise Conflict(f"Timeline is already being created for: {name}") from None
        created: tuple[kafka.Cluster, str] | None = None
        try:
            async with self.store.locked(name) as locked:
                if locked is None:
                    raise Unprocessable(f'EventType "{name}" does not exist')
                conn = locked.conn
                timelines = (await timeline_sql.load(conn, [name], self.clusters.own))[name]
                closing = timelines.active
                cluster = storage.cluster(self.clusters.own)
                topic = topic_name(name)
                body = locked.current.body
                config = topic_config(body, self.default_retention_ms)
                await self.clusters.topics(cluster).create(topic, timelines.partitions, config)
                created = (cluster, topic)
                await self._wait_paused(lock_id, started)
                await self._hold_lock(conn, lock_id, started)
                marks = await self.clusters.marks(closing, range(timelines.partitions))
                latest = [marks[p].newest_position for p in range(timelines.partitions)]
                retention = int(config["retention.ms"])
                await timeline_sql.switch(
                    conn,
                    timeline_sql.Switch(name, closing, latest, retention, storage.id, topic),
                )
            created = None
        except TopicError as error:
            raise TimelineUnavailable(f"{error}; nothing was changed, try again") from None
        finally:
            async with self.store.pool.connection() as conn:
                await conn.execute("DELETE FROM broker_write_locks WHERE id = %s", (lock_id,))
            if created is not None:
                with contextlib.suppress(TopicError):
                    await self.clusters.topics(created[0]).delete(created[1])
        log.info(
            "timeline switched",
            extra=logs.fields(
                event_type=name,
                order=closing.order + 1,
                storage=storage.id,
                topic=topic,
                latest=",".join(map(str, latest)),
            ),
        )
        return closing.order + 1

    async def _wait_paused(self, lock_id: str, started: float) -> None:
        """Until every writer that may still write has paused for the lock."""
        while True:
            async with self.store.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM broker_writers w"
                    " WHERE w.alive_until > now() - make_interval(secs => %s)"
                    " AND NOT EXISTS (SELECT 1 FROM broker_write_pauses p"
                    " WHERE p.lock_id = %s AND p.writer_id = w.id)",
                    (LAPSE_GRACE_SECONDS, lock_id),
                )
                row = await cur.fetchone()
            if row is not None and row[0] == 0:
                return
            if time.monotonic() - started > self.wait_timeout:
                raise TimelineUnavailable(
                    f"{row[0] if row else 'some'} event writer(s) did not pause within"
                    f" {self.wait_timeout:g} s; nothing was changed, try again"
                )
            await asyncio.sleep(_POLL_SECONDS)

    async def _hold_lock(
        self, conn: psycopg.AsyncConnection[object], lock_id: str, started: float
    ) -> None:
        """Lock the write lock's row until the commit: nobody may take it for a dead switch's
        meanwhile (writers would go on before the switch is in)."""
        if time.monotonic() - started > self.wait_timeout + _COMMIT_MARGIN_SECONDS:
            raise TimelineUnavailable("the switch took too long; nothing was changed, try again")
        cur = await conn.execute(
            "SELECT 1 FROM broker_write_locks WHERE id = %s FOR UPDATE", (lock_id,)
        )
        if await cur.fetchone() is None:
            raise Unavailable("the write lock of this switch is gone; nothing was changed")
