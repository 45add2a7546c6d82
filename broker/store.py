"""Event types and schema versions in Postgres (``sql/broker``), shared by every broker process.

Nothing here is cached: each broker process asks Postgres, so several
processes behind one load balancer always agree. Callers that cache (the
publisher's compiled validators) key their cache by ``revision``, which every
change bumps.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from broker.topics import EventTypeTopic

FIRST_VERSION = "1.0.0"


class AlreadyExists(Exception):
    """An event type of that name exists."""


def _utc(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, as Nakadi writes ``created_at``."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class StoredEventType:
    name: str
    body: dict[str, Any]  # the EventType as GET returns it, schema and timestamps included
    topic: str
    partitions: int
    revision: int

    @property
    def schema_version(self) -> str:
        return str(self.body["schema"]["version"])


_SELECT = """
SELECT e.name, e.body, e.topic, e.partitions, e.revision, e.created_at, e.updated_at,
       s.version, s.type, s.schema, s.created_at AS schema_created_at
FROM broker_event_types e
JOIN LATERAL (
    SELECT version, type, schema, created_at FROM broker_schemas
    WHERE event_type = e.name ORDER BY seq DESC LIMIT 1
) s ON true
"""


def _stored(row: dict[str, Any]) -> StoredEventType:
    body = dict(row["body"])
    body["schema"] = {
        "type": row["type"],
        "schema": row["schema"],
        "version": row["version"],
        "created_at": _utc(row["schema_created_at"]),
    }
    body["created_at"] = _utc(row["created_at"])
    body["updated_at"] = _utc(row["updated_at"])
    return StoredEventType(row["name"], body, row["topic"], row["partitions"], row["revision"])


def _without_schema(event_type: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event_type.items() if k not in ("schema", "created_at", "updated_at")}


class Store:
    def __init__(self, dsn: str, pool_size: int = 10) -> None:
        self.pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            open=False,
            kwargs={"autocommit": True, "application_name": "changebroker-broker"},
        )

    async def open(self) -> None:
        await self.pool.open(wait=True)

    async def close(self) -> None:
        await self.pool.close()

    async def get(self, name: str) -> StoredEventType | None:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_SELECT + " WHERE e.name = %s", (name,))
            row = await cur.fetchone()
        return _stored(row) if row else None

    async def all(self) -> list[StoredEventType]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_SELECT + " ORDER BY e.name")
            return [_stored(row) for row in await cur.fetchall()]

    async def revision(self, name: str) -> int | None:
        """The cheap question a cache asks before trusting its copy."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT revision FROM broker_event_types WHERE name = %s", (name,)
            )
            row = await cur.fetchone()
        return int(row[0]) if row else None

    async def create(
        self,
        event_type: dict[str, Any],
        topic: str,
        partitions: int,
        create_topic: Callable[[], Awaitable[None]],
    ) -> None:
        """Insert, create the topic, commit: a failed topic leaves no event type behind."""
        async with self.pool.connection() as conn, conn.transaction():
            try:
                await conn.execute(
                    "INSERT INTO broker_event_types (name, body, topic, partitions)"
                    " VALUES (%s, %s, %s, %s)",
                    (event_type["name"], Jsonb(_without_schema(event_type)), topic, partitions),
                )
            except psycopg.errors.UniqueViolation:
                raise AlreadyExists(event_type["name"]) from None
            await conn.execute(
                "INSERT INTO broker_schemas (event_type, seq, version, type, schema)"
                " VALUES (%s, 1, %s, %s, %s)",
                (
                    event_type["name"],
                    FIRST_VERSION,
                    event_type["schema"]["type"],
                    event_type["schema"]["schema"],
                ),
            )
            await create_topic()

    @contextlib.asynccontextmanager
    async def locked(self, name: str) -> AsyncIterator[Locked | None]:
        """The event type, locked against concurrent change until the block ends (commits)."""
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(_SELECT + " WHERE e.name = %s FOR UPDATE OF e", (name,))
                row = await cur.fetchone()
            yield Locked(conn, _stored(row)) if row else None

    async def schemas(self, name: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of schema versions, newest first, and how many there are in all."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT version, type, schema, created_at, count(*) OVER () AS total"
                " FROM broker_schemas WHERE event_type = %s ORDER BY seq DESC LIMIT %s OFFSET %s",
                (name, limit, offset),
            )
            rows = await cur.fetchall()
            if not rows:
                await cur.execute(
                    "SELECT count(*) AS total FROM broker_schemas WHERE event_type = %s", (name,)
                )
                counted = await cur.fetchone()
                return [], int(counted["total"]) if counted else 0
        return [_schema(r) for r in rows], int(rows[0]["total"])

    async def schema(self, name: str, version: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT version, type, schema, created_at FROM broker_schemas"
                " WHERE event_type = %s AND version = %s",
                (name, version),
            )
            row = await cur.fetchone()
        return _schema(row) if row else None


def _schema(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": row["type"],
        "schema": row["schema"],
        "version": row["version"],
        "created_at": _utc(row["created_at"]),
    }


class Locked:
    """An event type under ``SELECT ... FOR UPDATE``: change it or delete it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], current: StoredEventType) -> None:
        self._conn = conn
        self.current = current

    async def update(self, event_type: dict[str, Any], new_version: str | None) -> None:
        name = self.current.name
        await self._conn.execute(
            "UPDATE broker_event_types SET body = %s, revision = revision + 1, updated_at = now()"
            " WHERE name = %s",
            (Jsonb(_without_schema(event_type)), name),
        )
        if new_version is not None:
            await self._conn.execute(
                "INSERT INTO broker_schemas (event_type, seq, version, type, schema)"
                " SELECT %s, coalesce(max(seq), 0) + 1, %s, %s, %s"
                " FROM broker_schemas WHERE event_type = %s",
                (
                    name,
                    new_version,
                    event_type["schema"]["type"],
                    event_type["schema"]["schema"],
                    name,
                ),
            )

    async def delete(self) -> None:
        await self._conn.execute(
            "DELETE FROM broker_event_types WHERE name = %s", (self.current.name,)
        )


class StoreResolver:
    """The :class:`broker.topics.TopicResolver` the reading endpoints use."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def __call__(self, event_type: str) -> EventTypeTopic | None:
        async with self._store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT topic, partitions FROM broker_event_types WHERE name = %s", (event_type,)
            )
            row = await cur.fetchone()
        return EventTypeTopic(event_type, row[0], row[1]) if row else None
