"""Repartitioning: an event type gets more partitions, in every timeline, as Nakadi does it.

Under the event type's row lock: Kafka adds the partitions to each timeline's topic that still
exists (nothing where it has them already, so a repeated request finishes what a failed one
began); closed timelines hold no event in them (their last offsets there are -1); the event
type's partition count and ``default_statistic`` parallelism become the new count, and its
revision moves, so publishing everywhere spreads events over them. Each subscription of the
event type gets the new partitions at ``begin`` and they are rebalanced to its streams, which
take them up without restarting (a subscription read from ``cursors`` gets ``begin`` cursors
for them too).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from changebroker import logs
from changebroker.broker.errors import EventTypeNotFound, Unprocessable
from changebroker.broker.event_types.store import Store
from changebroker.broker.subscriptions.store import rebalance_partitions
from changebroker.broker.timelines import store as timeline_sql
from changebroker.broker.timelines.clusters import Clusters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repartitioning:
    store: Store
    clusters: Clusters
    max_partitions: int

    async def repartition(self, name: str, count: int) -> None:
        async with self.store.locked(name) as locked:
            if locked is None:
                raise EventTypeNotFound(name)
            if count > self.max_partitions:
                raise Unprocessable(
                    f"Number of partitions should not be more than {self.max_partitions}"
                )
            current = locked.current.partitions
            if count < current:
                raise Unprocessable("Number of partitions can not decrease")
            conn = locked.conn
            timelines = (await timeline_sql.load(conn, [name], self.clusters.own))[name]
            for timeline in timelines.readable:
                await self.clusters.topics(timeline.cluster).add_partitions(timeline.topic, count)
            if count == current:
                return
            await conn.execute(
                "UPDATE broker_timelines SET latest_offsets = latest_offsets"
                " || array_fill(-1::bigint, ARRAY[%s - cardinality(latest_offsets)])"
                " WHERE event_type = %s AND latest_offsets IS NOT NULL"
                " AND cardinality(latest_offsets) < %s",
                (count, name, count),
            )
            body = dict(locked.current.body)
            # Nakadi's statistic when none was given, then the parallelism of the new count.
            statistic = dict(body.get("default_statistic") or {})
            statistic.setdefault("messages_per_minute", 1)
            statistic.setdefault("message_size", 1)
            statistic.update(read_parallelism=count, write_parallelism=count)
            await conn.execute(
                "UPDATE broker_event_types SET partitions = %s, revision = revision + 1,"
                " body = jsonb_set(body, '{default_statistic}', %s), updated_at = now()"
                " WHERE name = %s",
                (count, Jsonb(statistic), name),
            )
            await self._subscriptions(locked.conn, name, current, count)
        log.info(
            "event type repartitioned",
            extra=logs.fields(event_type=name, partitions_before=current, partitions=count),
        )

    @staticmethod
    async def _subscriptions(
        conn: psycopg.AsyncConnection[Any], name: str, before: int, count: int
    ) -> None:
        cur = await conn.execute(
            "SELECT id::text, initialised, read_from, initial_cursors FROM broker_subscriptions"
            " WHERE %s = ANY(event_types) ORDER BY id FOR UPDATE",
            (name,),
        )
        added = range(before, count)
        for subscription_id, initialised, read_from, initial_cursors in await cur.fetchall():
            if read_from == "cursors":
                cursors = list(initial_cursors or [])
                named = {(c.get("event_type"), c.get("partition")) for c in cursors}
                cursors += [
                    {"event_type": name, "partition": str(p), "offset": "begin"}
                    for p in added
                    if (name, str(p)) not in named
                ]
                await conn.execute(
                    "UPDATE broker_subscriptions SET initial_cursors = %s WHERE id = %s",
                    (Jsonb(cursors), subscription_id),
                )
            if initialised:
                # Position -1: before the first event, which no timeline before has.
                for partition in added:
                    await conn.execute(
                        "INSERT INTO broker_subscription_partitions"
                        " (subscription_id, event_type, partition, committed)"
                        " VALUES (%s, %s, %s, -1) ON CONFLICT DO NOTHING",
                        (subscription_id, name, partition),
                    )
                await rebalance_partitions(conn, subscription_id)
