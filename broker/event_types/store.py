"""Event types in Postgres (``sql/broker``), their schemas in the registry's tables.

Each event type's schema versions are registry subjects: its ``json_schema`` versions the
subject of the event type's name in tenant ``changebroker``, namespace ``event-types``, its
``avro_schema`` versions the one in namespace ``event-types-avro`` (:func:`subject_key`; a
subject has one format), so the registry API (``GET /subjects/{name}/versions``) shows them. The
broker registers through :mod:`changebroker.registry.store` on its own connection, in the
transaction that changes the event type: both live in one metadata database,
so a crash never leaves one without the other. Nakadi's semantic version of
each schema ("1.0.0", "1.1.0", ...) is the broker's: ``broker_schema_versions``
maps it to the registry schema id. The subject's mode is ``NONE`` because the
broker checks Nakadi's modes itself (``compatible`` is none of OpenSchema's).

Nothing here is cached: each broker process asks Postgres, so several
processes behind one load balancer always agree. Callers that cache (the
publisher's compiled validators) key their cache by :class:`Revision`: the
topic, new each time a name is created, and the count every change bumps.
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

from changebroker.broker.errors import Conflict
from changebroker.broker.event_types.rules import AVRO_SCHEMA, JSON_SCHEMA
from changebroker.broker.subscriptions.coordination import notify_sql
from changebroker.notified import NotifiedCache
from changebroker.registry import store as registry
from changebroker.registry.errors import RegistryError

FIRST_VERSION = "1.0.0"
SUBJECT_TENANT = registry.BROKER_TENANT
SUBJECT_NAMESPACE = registry.BROKER_NAMESPACE
AVRO_SUBJECT_NAMESPACE = registry.BROKER_AVRO_NAMESPACE
# Each schema type's subject: its namespace, the registry's format and serialization.
_SUBJECTS = {
    JSON_SCHEMA: (SUBJECT_NAMESPACE, "JSON", "json"),
    AVRO_SCHEMA: (AVRO_SUBJECT_NAMESPACE, "AVRO", "avro"),
}
# What the broker keeps saying about its subjects; NONE: see the module docstring.
SUBJECT_METADATA = {
    "app": "changebroker-broker",
    "description": "schemas of the broker's Nakadi event type of this name; the broker checks"
    " its compatibility_mode and owns the subject (delete the event type to delete it)",
    "status": "released",
    "compatibility": "NONE",
    "format": "JSON",
}


def subject_key(event_type: str, schema_type: str = JSON_SCHEMA) -> registry.SubjectKey:
    return registry.SubjectKey(event_type, SUBJECT_TENANT, _SUBJECTS[schema_type][0])


class AlreadyExists(Exception):
    """An event type of that name exists."""


class SubjectConflict(Conflict):
    """The registry subject an event type's schemas go to is someone else's."""


def _utc(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, as Nakadi writes ``created_at``."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Revision:
    """One state of an event type. ``number`` starts at 1 again when a deleted type is
    created anew, so only with the topic (new on every creation) does it never repeat."""

    topic: str
    number: int


@dataclass(frozen=True)
class StoredEventType:
    name: str
    body: dict[str, Any]  # the EventType as GET returns it, schema and timestamps included
    topic: str  # the active timeline's
    partitions: int
    revision: int
    # The active timeline's storage and its kafka_configuration (None: the process's own).
    storage: str
    kafka_configuration: dict[str, Any] | None
    # The newest json_schema version (the schema itself unless it is an avro_schema): what
    # JSON events are validated against, as Nakadi does once an event type moved to Avro.
    json_schema: dict[str, Any] | None = None

    @property
    def stamp(self) -> Revision:
        return Revision(self.topic, self.revision)

    @property
    def schema_version(self) -> str:
        return str(self.body["schema"]["version"])


# A Nakadi schema version and its text: the registry stores the schema string as sent.
_VERSION_COLUMNS = "v.version, r.definition #>> '{}' AS schema, r.serialization, v.created_at"
_VERSIONS_FROM = "FROM broker_schema_versions v JOIN registry_schemas r ON r.id = v.schema_id"
_VERSIONS = f"SELECT {_VERSION_COLUMNS} {_VERSIONS_FROM}"

_SELECT = f"""
SELECT e.name, e.body, e.topic, e.partitions, e.revision, e.created_at, e.updated_at,
       s.version, s.schema, s.serialization, s.created_at AS schema_created_at,
       j.version AS json_version, j.schema AS json_schema, j.created_at AS json_created_at,
       st.id AS storage, st.kafka_configuration
FROM broker_event_types e
JOIN LATERAL ({_VERSIONS} WHERE v.event_type = e.name ORDER BY v.seq DESC LIMIT 1) s ON true
LEFT JOIN LATERAL ({_VERSIONS} WHERE v.event_type = e.name
    AND r.serialization IS DISTINCT FROM 'avro' ORDER BY v.seq DESC LIMIT 1) j ON true
JOIN broker_timelines tl ON tl.event_type = e.name AND tl.topic = e.topic
JOIN broker_storages st ON st.id = tl.storage_id
"""


def _stored(row: dict[str, Any]) -> StoredEventType:
    body = dict(row["body"])
    body["schema"] = _schema({**row, "created_at": row["schema_created_at"]})
    body["created_at"] = _utc(row["created_at"])
    body["updated_at"] = _utc(row["updated_at"])
    json_schema = None
    if row["json_version"] is not None:
        json_schema = _schema(
            {
                "version": row["json_version"],
                "schema": row["json_schema"],
                "serialization": "json",
                "created_at": row["json_created_at"],
            }
        )
    return StoredEventType(
        row["name"],
        body,
        row["topic"],
        row["partitions"],
        row["revision"],
        row["storage"],
        row["kafka_configuration"],
        json_schema,
    )


def _without_schema(event_type: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event_type.items() if k not in ("schema", "created_at", "updated_at")}


# What sql/broker/005's trigger notifies on every write to broker_event_types.
CHANGES_CHANNEL = "broker_event_types_changed"


class Store:
    def __init__(self, dsn: str, pool_size: int = 10) -> None:
        self.pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            open=False,
            kwargs={"autocommit": True, "application_name": "changebroker-broker"},
        )
        # Revisions publishing asks about on every request, kept until an event type changes.
        self._revisions = NotifiedCache(dsn, CHANGES_CHANNEL)

    async def open(self) -> None:
        await self.pool.open(wait=True)
        await self._revisions.start()

    async def close(self) -> None:
        await self._revisions.close()
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

    async def revision(self, name: str, *, fresh: bool = False) -> Revision | None:
        """The cheap question a cache asks before trusting its copy: from memory until any
        event type changes (Postgres notifies every process), else one SELECT; ``fresh``:
        the SELECT in any case (a change's notification may still be on its way)."""
        kept: Revision | None = None if fresh else self._revisions.get(name)
        if kept is not None:
            return kept
        generation = self._revisions.generation
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT topic, revision FROM broker_event_types WHERE name = %s", (name,)
            )
            row = await cur.fetchone()
        if row is None:
            return None
        revision = Revision(row[0], int(row[1]))
        self._revisions.put(name, revision, 1, generation)
        return revision

    async def create(
        self,
        event_type: dict[str, Any],
        topic: str,
        partitions: int,
        create_topic: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]],
    ) -> None:
        """Insert, create the topic (and its timeline, on the connection given), commit: a
        failed topic leaves no event type behind."""
        async with self._changing(), self.pool.connection() as conn, conn.transaction():
            try:
                await conn.execute(
                    "INSERT INTO broker_event_types (name, body, topic, partitions)"
                    " VALUES (%s, %s, %s, %s)",
                    (event_type["name"], Jsonb(_without_schema(event_type)), topic, partitions),
                )
            except psycopg.errors.UniqueViolation:
                raise AlreadyExists(event_type["name"]) from None
            registered = await _register(conn, event_type)
            if not (registered.new and registered.version == 1):
                namespace = _SUBJECTS[event_type["schema"]["type"]][0]
                raise SubjectConflict(
                    f"the registry subject {event_type['name']!r} (tenant {SUBJECT_TENANT},"
                    f" namespace {namespace}) already has schemas; delete it there first"
                )
            await _add_version(conn, event_type["name"], FIRST_VERSION, registered.id)
            await create_topic(conn)

    @contextlib.asynccontextmanager
    async def locked(self, name: str) -> AsyncIterator[Locked | None]:
        """The event type, locked against concurrent change until the block ends (commits)."""
        async with self._changing(), self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(_SELECT + " WHERE e.name = %s FOR UPDATE OF e", (name,))
                row = await cur.fetchone()
            yield Locked(conn, _stored(row)) if row else None

    def forget_revisions(self) -> None:
        """Read every event type's revision from Postgres again: a change (a timeline switch)
        is known to have committed, its notification may not be here yet."""
        self._revisions.invalidate()

    @contextlib.asynccontextmanager
    async def _changing(self) -> AsyncIterator[None]:
        """Around a write: once it committed (or not), this process forgets the revisions it
        kept, so its next publish sees the change at once."""
        try:
            yield
        finally:
            self._revisions.invalidate()

    async def schemas(self, name: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of schema versions, newest first, and how many there are in all."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"SELECT {_VERSION_COLUMNS}, count(*) OVER () AS total {_VERSIONS_FROM}"
                " WHERE v.event_type = %s ORDER BY v.seq DESC LIMIT %s OFFSET %s",
                (name, limit, offset),
            )
            rows = await cur.fetchall()
            if not rows:
                await cur.execute(
                    "SELECT count(*) AS total FROM broker_schema_versions WHERE event_type = %s",
                    (name,),
                )
                counted = await cur.fetchone()
                return [], int(counted["total"]) if counted else 0
        return [_schema(r) for r in rows], int(rows[0]["total"])

    async def schema(self, name: str, version: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                _VERSIONS + " WHERE v.event_type = %s AND v.version = %s", (name, version)
            )
            row = await cur.fetchone()
        return _schema(row) if row else None

    async def all_schemas(self, name: str, schema_type: str) -> list[dict[str, Any]]:
        """Every version of ``schema_type`` (``json_schema``, ``avro_schema``), newest first."""
        serialization = _SUBJECTS[schema_type][2]
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                _VERSIONS + " WHERE v.event_type = %s AND r.serialization = %s ORDER BY v.seq DESC",
                (name, serialization),
            )
            return [_schema(row) for row in await cur.fetchall()]


def _schema(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": AVRO_SCHEMA if row["serialization"] == "avro" else JSON_SCHEMA,
        "schema": row["schema"],
        "version": row["version"],
        "created_at": _utc(row["created_at"]),
    }


@dataclass(frozen=True)
class SubscriptionKey:
    """Whose a subscription of an event type is: what decides whether it may go with it."""

    id: str
    owning_application: str
    consumer_group: str


class Locked:
    """An event type under ``SELECT ... FOR UPDATE``: change it or delete it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], current: StoredEventType) -> None:
        self._conn = conn
        self.current = current

    @property
    def conn(self) -> psycopg.AsyncConnection[Any]:
        """The transaction holding the lock, for the event type's other rows (timelines)."""
        return self._conn

    async def update(self, event_type: dict[str, Any], new_version: str | None) -> None:
        name = self.current.name
        await self._conn.execute(
            "UPDATE broker_event_types SET body = %s, revision = revision + 1, updated_at = now()"
            " WHERE name = %s",
            (Jsonb(_without_schema(event_type)), name),
        )
        if new_version is not None:
            registered = await _register(self._conn, event_type)
            await _add_version(self._conn, name, new_version, registered.id)

    async def subscriptions(self) -> list[SubscriptionKey]:
        """The subscriptions that read this event type (alone or with others)."""
        async with self._conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT id::text, owning_application, consumer_group FROM broker_subscriptions"
                " WHERE %s = ANY(event_types) FOR UPDATE",
                (self.current.name,),
            )
            return [SubscriptionKey(**row) for row in await cur.fetchall()]

    async def delete(self) -> None:
        """The event type, its version mapping (cascade), its subscriptions (their streams are
        told and end) and then its subjects."""
        cur = await self._conn.execute(
            f"SELECT DISTINCT r.serialization {_VERSIONS_FROM} WHERE v.event_type = %s",
            (self.current.name,),
        )
        stored = {serialization for (serialization,) in await cur.fetchall()}
        types = [t for t, (_, _, serialization) in _SUBJECTS.items() if serialization in stored]
        await self._conn.execute(
            "DELETE FROM broker_event_types WHERE name = %s", (self.current.name,)
        )
        gone = await self._conn.execute(
            "DELETE FROM broker_subscriptions WHERE %s = ANY(event_types) RETURNING id::text",
            (self.current.name,),
        )
        for (subscription_id,) in await gone.fetchall():
            await self._conn.execute(*notify_sql(subscription_id))
        async with self._conn.cursor(row_factory=dict_row) as cur:
            for schema_type in types:
                await registry.delete_subject_in(cur, subject_key(self.current.name, schema_type))


async def _register(
    conn: psycopg.AsyncConnection[Any], event_type: dict[str, Any]
) -> registry.Registered:
    """The event type's schema in its type's subject (the same id when the subject has it
    already)."""
    schema_type = event_type["schema"]["type"]
    _, subject_format, serialization = _SUBJECTS[schema_type]
    key = subject_key(event_type["name"], schema_type)
    async with conn.cursor(row_factory=dict_row) as cur:
        try:
            await registry.put_subject_in(cur, key, {**SUBJECT_METADATA, "format": subject_format})
            # The text as sent, a JSON string: Nakadi answers schema.schema exactly as given.
            body = {
                "serialization": serialization,
                "schemaDefinition": event_type["schema"]["schema"],
            }
            return await registry.register_in(cur, key, body)
        except RegistryError as error:
            raise SubjectConflict(
                f"the registry refused the schema of {event_type['name']!r}: {error.message}"
            ) from None


async def _add_version(
    conn: psycopg.AsyncConnection[Any], name: str, version: str, schema_id: int
) -> None:
    await conn.execute(
        "INSERT INTO broker_schema_versions (event_type, seq, version, schema_id)"
        " SELECT %s, coalesce(max(seq), 0) + 1, %s, %s"
        " FROM broker_schema_versions WHERE event_type = %s",
        (name, version, schema_id, name),
    )
