"""Storages: the Kafka clusters an event type's timelines may live in (Nakadi's ``/storages``).

A storage is a cluster's bootstrap servers and the librdkafka properties its clients need
(TLS, SASL), where Nakadi names a ZooKeeper connection. The storage ``default`` is each
broker process's own ``--kafka-bootstrap`` (and ``CHANGEBROKER_KAFKA_CLIENT_CONFIG``): its
configuration is not stored, so it follows the flag. One storage is *the* default (the first
timeline of a new event type goes there); ``PUT /storages/default/{id}`` moves that mark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from changebroker import kafka
from changebroker.broker.errors import BrokerError, Conflict, NotFound, Unprocessable

OWN_STORAGE = "default"
STORAGE_TYPE = "kafka"
MAX_ID_LENGTH = 36  # Nakadi's st_id VARCHAR(36)
_BOOTSTRAP = re.compile(r"[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*")


class StorageUsed(BrokerError, status=403):
    """Nakadi answers a storage that timelines use with 403."""


@dataclass(frozen=True)
class Storage:
    id: str
    # None: the process's own cluster (the storage ``default``).
    configuration: Mapping[str, Any] | None
    is_default: bool

    def cluster(self, own: kafka.Cluster) -> kafka.Cluster:
        return cluster_of(self.configuration, own)

    def view(self, own: kafka.Cluster) -> dict[str, Any]:
        """As Nakadi writes a Storage; client settings are not shown (they hold secrets)."""
        cluster = self.cluster(own)
        return {
            "id": self.id,
            "storage_type": STORAGE_TYPE,
            "kafka_configuration": {
                "bootstrap_servers": cluster.bootstrap,
                "client_settings": sorted(name for name, _ in cluster.properties),
            },
            "default": self.is_default,
        }


def cluster_of(configuration: Mapping[str, Any] | None, own: kafka.Cluster) -> kafka.Cluster:
    """The cluster a stored ``kafka_configuration`` names (None: ``own``)."""
    if configuration is None:
        return own
    settings = configuration.get("client_settings") or {}
    return kafka.Cluster(
        configuration["bootstrap_servers"], tuple(sorted((k, str(v)) for k, v in settings.items()))
    )


def parse(body: object) -> Storage:
    """A POST body: ``{"id", "storage_type": "kafka", "kafka_configuration":
    {"bootstrap_servers": "host:port,...", "client_settings": {...}}, "default": false}``;
    422 saying what is wrong."""
    if not isinstance(body, dict):
        raise Unprocessable("the body must be a Storage object")
    storage_id = body.get("id")
    if not isinstance(storage_id, str) or not storage_id:
        raise Unprocessable('JSONObject["id"] not found: the storage needs an id')
    if len(storage_id) > MAX_ID_LENGTH or "/" in storage_id:
        raise Unprocessable(
            f"storage id {storage_id!r} must be at most {MAX_ID_LENGTH} characters, without '/'"
        )
    storage_type = body.get("storage_type")
    if not isinstance(storage_type, str):
        raise Unprocessable('JSONObject["storage_type"] not found: the storage needs a type')
    if storage_type != STORAGE_TYPE:
        raise Unprocessable(f"Type '{storage_type}' is not a valid storage type")
    is_default = body.get("default", False)
    if not isinstance(is_default, bool):
        raise Unprocessable("default must be true or false")
    configuration = body.get("kafka_configuration")
    if not isinstance(configuration, dict):
        raise Unprocessable(
            'JSONObject["kafka_configuration"] not found: give {"bootstrap_servers":'
            ' "host:port,...", "client_settings": {...}}'
        )
    bootstrap = configuration.get("bootstrap_servers")
    if not isinstance(bootstrap, str) or not _BOOTSTRAP.fullmatch(bootstrap):
        raise Unprocessable(
            "kafka_configuration.bootstrap_servers must be host:port[,host:port...],"
            f" got {bootstrap!r}"
        )
    settings = configuration.get("client_settings", {})
    if not isinstance(settings, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in settings.items()
    ):
        raise Unprocessable(
            "kafka_configuration.client_settings must map librdkafka properties to strings,"
            ' e.g. {"security.protocol": "SSL"}'
        )
    if "bootstrap.servers" in settings:
        raise Unprocessable("give the servers as bootstrap_servers, not in client_settings")
    stored = {"bootstrap_servers": bootstrap, "client_settings": settings}
    return Storage(storage_id, stored, is_default)


def _storage(row: Mapping[str, Any]) -> Storage:
    return Storage(row["id"], row["kafka_configuration"], row["is_default"])


_COLUMNS = "id, kafka_configuration, is_default"


class Storages:
    """Storages in Postgres (``sql/broker/009_storages_and_timelines.sql``)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def all(self) -> list[Storage]:
        async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(f"SELECT {_COLUMNS} FROM broker_storages ORDER BY id")
            return [_storage(row) for row in await cur.fetchall()]

    async def get(self, storage_id: str) -> Storage | None:
        async with self._pool.connection() as conn:
            return await get_in(conn, storage_id)

    async def create(self, storage: Storage) -> None:
        """409 when a storage of that id exists; a new default takes the mark."""
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "INSERT INTO broker_storages (id, kafka_configuration, is_default)"
                " VALUES (%s, %s, false) ON CONFLICT (id) DO NOTHING",
                (storage.id, Jsonb(storage.configuration)),
            )
            if cur.rowcount == 0:
                raise Conflict(f"A storage with id '{storage.id}' already exists.")
            if storage.is_default:
                await _mark_default(conn, storage.id)

    async def delete(self, storage_id: str) -> None:
        """404 when there is none; 403 while timelines use it or it is the default."""
        async with self._pool.connection() as conn, conn.transaction():
            found = await get_in(conn, storage_id, lock=True)
            if found is None:
                raise NotFound(f"Tried to remove storage that doesn't exist, id: {storage_id}")
            if found.is_default:
                raise StorageUsed(
                    f"Can't delete storage as it is the default one, id: {storage_id};"
                    " make another storage the default first"
                )
            try:
                await conn.execute("DELETE FROM broker_storages WHERE id = %s", (storage_id,))
            except psycopg.errors.ForeignKeyViolation:
                raise StorageUsed(
                    f"Can't delete storage as it is still used, id: {storage_id}"
                ) from None

    async def set_default(self, storage_id: str) -> Storage:
        async with self._pool.connection() as conn, conn.transaction():
            found = await get_in(conn, storage_id, lock=True)
            if found is None:
                raise NotFound(f"Storage with id {storage_id} is not found")
            await _mark_default(conn, storage_id)
        return Storage(found.id, found.configuration, True)


async def _mark_default(conn: psycopg.AsyncConnection[Any], storage_id: str) -> None:
    # Two statements: at most one storage is the default at any moment (a unique index).
    await conn.execute(
        "UPDATE broker_storages SET is_default = false WHERE is_default AND id <> %s",
        (storage_id,),
    )
    await conn.execute("UPDATE broker_storages SET is_default = true WHERE id = %s", (storage_id,))


async def get_in(
    conn: psycopg.AsyncConnection[Any], storage_id: str, *, lock: bool = False
) -> Storage | None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_COLUMNS} FROM broker_storages WHERE id = %s"
            + (" FOR UPDATE" if lock else ""),
            (storage_id,),
        )
        row = await cur.fetchone()
    return None if row is None else _storage(row)


async def default_in(conn: psycopg.AsyncConnection[Any]) -> Storage:
    """The storage new event types start on."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"SELECT {_COLUMNS} FROM broker_storages WHERE is_default")
        row = await cur.fetchone()
    if row is None:
        raise BrokerError("Default storage is not set", status=503)
    return _storage(row)
