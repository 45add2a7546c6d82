"""The ``authorization`` sections of event types and subscriptions, as the gate asks for them.

A section is read at most once an ``AUTHORIZATION_TTL`` per process (and at once after this
process changed it): a change made through another broker process reaches the open streams,
which ask before each batch, within that time.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg_pool import AsyncConnectionPool

AUTHORIZATION_TTL = 1.0

Section = dict[str, Any] | None
_Cache = dict[str, tuple[float, Section]]


class Sections:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self._event_types: _Cache = {}
        self._subscriptions: _Cache = {}

    async def event_type(self, name: str) -> Section:
        """The event type's section; None when it has none, or when there is no such event
        type (the route answers 404 for that)."""
        query = "SELECT body->'authorization' FROM broker_event_types WHERE name = %s"
        return await self._section(self._event_types, query, name)

    async def subscription(self, subscription_id: str) -> Section:
        query = "SELECT authz FROM broker_subscriptions WHERE id = %s"
        return await self._section(self._subscriptions, query, subscription_id)

    async def _section(self, cache: _Cache, query: str, key: str) -> Section:
        cached = cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < AUTHORIZATION_TTL:
            return cached[1]
        async with self.pool.connection() as conn:
            row = await (await conn.execute(query, (key,))).fetchone()
        found = row[0] if row else None
        cache[key] = (time.monotonic(), found)
        return found

    def forget(self, name: str) -> None:
        """This process changed the event type: its streams see the change at once."""
        self._event_types.pop(name, None)

    def forget_subscription(self, subscription_id: str) -> None:
        """This process changed the subscription's authorization: the same for its streams."""
        self._subscriptions.pop(subscription_id, None)
