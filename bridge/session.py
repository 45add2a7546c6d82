"""A session of the bridge: the connections and the transactional producer it works with,
opened from the newest committed position record. A failed session (Kafka, HTTP or Postgres
trouble) closes them all; the next one opens them anew, and ``init_transactions`` fences
whatever the failed one left open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
from psycopg import sql as psql

from changebroker import auth, kafka, logs, pg
from changebroker.bridge import tables
from changebroker.bridge.changes_client import ChangesClient
from changebroker.bridge.commits import Commits
from changebroker.bridge.event_types import EventTypes
from changebroker.bridge.position import Position
from changebroker.bridge.settings import Settings
from changebroker.bridge.snapshots import WATERMARKS
from changebroker.bridge.transactions import (
    Transactions,
    ensure_positions_topic,
    load_position,
)
from changebroker.broker.event_types.store import Store
from changebroker.broker.settings import TIMELINE_WAIT_TIMEOUT
from changebroker.broker.timelines.writers import Writer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Session:
    record: Mapping[str, Any] | None  # the newest committed position record
    commits: Commits[Position]  # batches committed in order, in Kafka transactions
    writer: Writer  # the bridge's part in timeline switches
    catalog: psycopg.AsyncConnection[Any]  # the application database's
    event_types: EventTypes  # through the broker's API and store
    changes: ChangesClient  # the reads of /changes


@contextlib.asynccontextmanager
async def opened(
    s: Settings, cluster: kafka.Cluster, on_committed: Callable[[Position], None]
) -> AsyncIterator[Session]:
    """``cluster``: the bridge's Kafka; ``on_committed``: told of each position in Kafka."""
    await asyncio.to_thread(
        ensure_positions_topic, s.kafka_bootstrap, s.replication_factor, s.min_insync_replicas
    )
    producer = await asyncio.to_thread(Transactions, s.kafka_bootstrap, s.name)
    # The next batches are read and turned into events while a transaction is under way.
    commits = Commits(producer, on_committed, s.limit, s.commit_interval_ms / 1000)
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
        await asyncio.to_thread(pg.migrate, s.app_dsn, "outbox")
        await asyncio.to_thread(pg.migrate, s.app_dsn, "bridge")
        await store.open()
        await writer.start()
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
            await _publish_watermarks(catalog, s.publication)
            yield Session(
                record, commits, writer, catalog, EventTypes(store, broker, cluster), changes
            )
    finally:
        await commits.close()
        await asyncio.to_thread(producer.close)
        await writer.stop()
        await store.close()


async def _publish_watermarks(catalog: psycopg.AsyncConnection[Any], publication: str) -> None:
    """The watermark table must reach the stream: a publication of named tables (not FOR
    ALL TABLES) gets it added."""
    row = await (
        await catalog.execute(
            "SELECT puballtables, EXISTS (SELECT 1 FROM pg_publication_tables t"
            " WHERE t.pubname = p.pubname AND t.schemaname || '.' || t.tablename = %s)"
            " FROM pg_publication p WHERE pubname = %s",
            (WATERMARKS, publication),
        )
    ).fetchone()
    if row is None or row[0] or row[1]:
        return
    schema, name = tables.split_name(WATERMARKS)
    await catalog.execute(
        psql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
            psql.Identifier(publication), psql.Identifier(schema, name)
        )
    )
    log.info(
        "watermark table added to the publication",
        extra=logs.fields(publication=publication),
    )
