"""The broker's administration (administrators, blacklist, features) kept in Postgres
(``sql/broker/004_settings.sql``): a store that answers with an ``Administration``, the plain
data the access policy decides from (broker/authorization.py), and writes what
``/settings`` changes (broker/settings_api.py).

Every broker process reads the settings again when its copy is older than ``REFRESH``
(one query a second at most, whatever the request rate), and at once after it changed them
itself; a blocked application or event type is so refused on its next publish and its open
streams close within a second.

Features are Nakadi's, those the broker honours (:class:`Feature`), named in any case on input
and written lower-case, as Nakadi does. ``disable_db_write_operations`` makes the metadata
read-only for everyone (:meth:`AdminSettings.check_writable`, 503), as Nakadi's: event types,
subscriptions being created or deleted, the administrators.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from changebroker.auth import admin_attribute
from changebroker.broker.authorization import Administration
from changebroker.broker.errors import Unavailable

REFRESH = 1.0  # seconds a process trusts its copy of the settings

BLACKLIST_TYPES = ("CONSUMER_APP", "CONSUMER_ET", "PRODUCER_APP", "PRODUCER_ET")


class Feature(StrEnum):
    """Nakadi's features the broker honours, in Nakadi's order and words."""

    DISABLE_EVENT_TYPE_CREATION = "disable_event_type_creation"
    DISABLE_EVENT_TYPE_DELETION = "disable_event_type_deletion"
    DELETE_EVENT_TYPE_WITH_SUBSCRIPTIONS = "delete_event_type_with_subscriptions"
    DISABLE_SUBSCRIPTION_CREATION = "disable_subscription_creation"
    DISABLE_DB_WRITE_OPERATIONS = "disable_db_write_operations"


FEATURE_NAMES = ", ".join(Feature)


def initial_admins(entries: tuple[str, ...]) -> dict[str, list[dict[str, str]]]:
    """The administrators before the first POST: the ``--admins`` callers."""
    attributes = [
        {"data_type": data_type, "value": value}
        for data_type, value in map(admin_attribute, entries)
    ]
    return {"admins": attributes, "readers": attributes, "writers": attributes}


@dataclass
class AdminSettings:
    pool: AsyncConnectionPool
    default_admins: dict[str, Any]
    _snapshot: Administration | None = None
    _loaded: float = 0.0

    async def current(self) -> Administration:
        if self._snapshot is None or time.monotonic() - self._loaded > REFRESH:
            await self.reload()
        assert self._snapshot is not None
        return self._snapshot

    async def reload(self) -> Administration:
        async with self.pool.connection() as conn:
            admins_row = await (await conn.execute("SELECT authz FROM broker_admins")).fetchone()
            blacklist = await (
                await conn.execute("SELECT type, name FROM broker_blacklist")
            ).fetchall()
            features = await (
                await conn.execute("SELECT feature, enabled FROM broker_features")
            ).fetchall()
        self._snapshot = Administration(
            admins=admins_row[0] if admins_row else self.default_admins,
            blacklist=frozenset((kind, name) for kind, name in blacklist),
            features={feature: bool(enabled) for feature, enabled in features},
        )
        self._loaded = time.monotonic()
        return self._snapshot

    async def feature(self, feature: Feature) -> bool:
        return (await self.current()).features.get(feature, False)

    async def check_writable(self) -> None:
        """503, in Nakadi's words, while ``disable_db_write_operations`` is on."""
        if await self.feature(Feature.DISABLE_DB_WRITE_OPERATIONS):
            raise Unavailable("Database is currently in read-only mode")

    # -- what /settings changes --------------------------------------------------------------

    async def set_admins(self, admins: dict[str, Any]) -> Administration:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO broker_admins (authz) VALUES (%s)"
                " ON CONFLICT (singleton) DO UPDATE SET authz = excluded.authz, updated_at = now()",
                (Jsonb(admins),),
            )
        return await self.reload()

    async def set_blocked(self, kind: str, name: str, *, block: bool) -> None:
        async with self.pool.connection() as conn:
            if block:
                await conn.execute(
                    "INSERT INTO broker_blacklist (type, name) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING",
                    (kind, name),
                )
            else:
                await conn.execute(
                    "DELETE FROM broker_blacklist WHERE type = %s AND name = %s", (kind, name)
                )
        await self.reload()

    async def set_feature(self, feature: Feature, enabled: bool) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO broker_features (feature, enabled) VALUES (%s, %s)"
                " ON CONFLICT (feature) DO UPDATE SET enabled = excluded.enabled,"
                " updated_at = now()",
                (feature.value, enabled),
            )
        await self.reload()
