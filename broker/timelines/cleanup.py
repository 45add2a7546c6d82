"""Closed timelines whose retention is over lose their topic, as Nakadi's cleanup job does.

Every broker process looks every ``CHECK_SECONDS``; each expired timeline is taken under its
row lock (``SKIP LOCKED``: processes share the work), its topic deleted on its cluster and the
timeline marked deleted, which moves the event type's revision: readers then know its
offsets are gone (a cursor in it is "unavailable as retention time of data elapsed").
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from changebroker import logs
from changebroker.broker.event_types.store import Store
from changebroker.broker.event_types.topics import TopicError
from changebroker.broker.timelines import store as timeline_sql
from changebroker.broker.timelines.clusters import Clusters

log = logging.getLogger(__name__)

CHECK_SECONDS = 5.0


async def clean_expired(store: Store, clusters: Clusters) -> int:
    """Delete the topics of every timeline whose retention is over; how many."""
    deleted = 0
    while True:
        async with store.pool.connection() as conn, conn.transaction():
            expired = await timeline_sql.next_expired(conn, clusters.own)
            if expired is None:
                return deleted
            await clusters.topics(expired.cluster).delete(expired.topic)
            await timeline_sql.mark_deleted(conn, expired)
        deleted += 1
        log.info(
            "timeline cleaned up",
            extra=logs.fields(event_type=expired.event_type, topic=expired.topic),
        )


async def cleaning(store: Store, clusters: Clusters) -> None:
    """:func:`clean_expired` every ``CHECK_SECONDS``, for as long as the process runs (as a
    ``changebroker.tasks.running`` task)."""
    while True:
        await asyncio.sleep(CHECK_SECONDS)
        try:
            await clean_expired(store, clusters)
        except (psycopg.Error, TopicError) as error:
            log.warning("timeline cleanup failed", extra=logs.fields(error=str(error)))
