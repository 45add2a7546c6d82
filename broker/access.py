"""Per-resource authorization against what is stored: may this caller publish to, read from
or administer this event type or subscription, now?

Open streams ask again before each batch they send (``guarded``): a reader removed from an
event type's or subscription's ``readers`` gets no further batch and its stream ends. A blocked
application or event type ends a stream within the settings' refresh, whoever reads it: the
streams ask ``consumption_blocked_check`` between their polls, batches or none. An event
type's ``authorization`` is read at most once a ``AUTHORIZATION_TTL`` per process (and at once
after this process changed it), so a change made through another broker process reaches open
streams within that time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from psycopg_pool import AsyncConnectionPool

from changebroker.auth import Principal, audit
from changebroker.broker import authorization
from changebroker.broker.admin_settings import EVENT_TYPE_BLOCKED, AdminSettings
from changebroker.broker.authorization import Operation

AUTHORIZATION_TTL = 1.0


class Access:
    def __init__(self, pool: AsyncConnectionPool, admin: AdminSettings) -> None:
        self.pool = pool
        self.admin = admin
        self._event_types: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._subscriptions: dict[str, tuple[float, dict[str, Any] | None]] = {}

    async def event_type_authorization(self, name: str) -> dict[str, Any] | None:
        query = "SELECT body->'authorization' FROM broker_event_types WHERE name = %s"
        return await self._section(self._event_types, query, name)

    async def subscription_authorization(self, subscription_id: str) -> dict[str, Any] | None:
        query = "SELECT authz FROM broker_subscriptions WHERE id = %s"
        return await self._section(self._subscriptions, query, subscription_id)

    async def _section(
        self, cache: dict[str, tuple[float, dict[str, Any] | None]], query: str, key: str
    ) -> dict[str, Any] | None:
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

    async def require(
        self,
        principal: Principal,
        authorization_section: Mapping[str, Any] | None,
        operation: Operation,
        resource: str,
    ) -> None:
        """403 unless ``principal`` may do ``operation`` on the resource (administrators may)."""
        if principal.unrestricted or authorization.allowed(
            principal, authorization_section, operation
        ):
            return
        admin = await self.admin.is_admin(principal, "read" if operation == "read" else "admin")
        authorization.require(principal, authorization_section, operation, resource, admin=admin)

    async def require_event_type(
        self, principal: Principal, name: str, operation: Operation
    ) -> None:
        if principal.unrestricted:
            return
        section = await self.event_type_authorization(name)
        await self.require(principal, section, operation, f"event type {name}")

    async def require_publish(
        self, principal: Principal, name: str, section: Mapping[str, Any] | None
    ) -> None:
        """Writers of the event type, not blocked from producing."""
        await self.admin.check_producer(principal, name)
        if not principal.unrestricted:
            await self.require(principal, section, "write", f"event type {name}")

    async def require_consume(
        self,
        principal: Principal,
        event_types: Sequence[str],
        subscription: Mapping[str, Any] | None = None,
        subscription_id: str | None = None,
        *,
        blocked_detail: str = EVENT_TYPE_BLOCKED,
    ) -> None:
        """Readers of every event type (and of the subscription), not blocked from consuming
        (else 403 saying ``blocked_detail``)."""
        await self.admin.check_consumer(principal, list(event_types), blocked_detail)
        if principal.unrestricted:
            return
        if subscription_id is not None:
            await self.require(principal, subscription, "read", f"subscription {subscription_id}")
        for name in event_types:
            await self.require_event_type(principal, name, "read")

    async def _lost_access(
        self,
        principal: Principal,
        event_types: Sequence[str],
        subscription_id: str | None,
    ) -> str | None:
        """Why ``principal`` may no longer read, or None."""
        if await self.admin.is_admin(principal, "read"):
            return None
        if subscription_id is not None:
            section = await self.subscription_authorization(subscription_id)
            if not authorization.allowed(principal, section, "read"):
                return "no longer one of the subscription's readers"
        for name in event_types:
            section = await self.event_type_authorization(name)
            if not authorization.allowed(principal, section, "read"):
                return f"no longer one of the readers of {name}"
        return None

    def consumption_blocked_check(
        self, principal: Principal, event_types: Sequence[str]
    ) -> Callable[[], Awaitable[bool]]:
        """What a stream asks between polls: is ``principal`` now blocked from consuming the
        event types? The first yes is audited; the stream then ends."""
        names = list(event_types)

        async def blocked() -> bool:
            if not await self.admin.consumer_blocked(principal, names):
                return False
            audit("stream closed", principal, ",".join(names), status=403, reason="blocked")
            return True

        return blocked

    def guarded(
        self,
        chunks: AsyncIterator[bytes],
        principal: Principal,
        event_types: Sequence[str],
        subscription_id: str | None = None,
    ) -> AsyncIterator[bytes]:
        """``chunks`` while ``principal`` may read them (the event types, and the subscription
        when a stream is one's): checked before each batch is sent."""
        if principal.unrestricted:
            return chunks

        async def checked() -> AsyncIterator[bytes]:
            try:
                async for chunk in chunks:
                    reason = await self._lost_access(principal, event_types, subscription_id)
                    if reason is not None:
                        audit(
                            "stream closed",
                            principal,
                            ",".join(event_types),
                            status=403,
                            reason=reason,
                        )
                        return
                    yield chunk
            finally:
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()

        return checked()
