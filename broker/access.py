"""The broker's one gate: may this caller do this to this resource, now? Every route and
stream asks here, and only here is a request refused (``Forbidden``: a 403 Problem in
Nakadi's words) and the refusal audited.

The gate fetches what the answer needs from the stores, which only answer questions (the
sections of event types and subscriptions, ``changebroker.broker.sections``; the broker's
administration, ``changebroker.broker.admin_settings``), and asks the policy, which answers
from that plain data (``changebroker.broker.authorization``). The scope a route needs is asked
before any route runs, by ``AuthMiddleware`` with the policy's ``Scopes.table``.

Open streams ask again before each batch they send (``guarded``): a reader removed from an
event type's or subscription's ``readers`` gets no further batch and its stream ends. A blocked
application or event type ends a stream within the settings' refresh, whoever reads it: the
streams ask ``consumption_blocked_check`` between their polls, batches or none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request

from changebroker.auth import Principal, audit, principal_of
from changebroker.broker import authorization as policy
from changebroker.broker.admin_settings import AdminSettings, Feature
from changebroker.broker.authorization import EVENT_TYPE_BLOCKED, Operation, Refusal
from changebroker.broker.errors import Forbidden
from changebroker.broker.sections import Section, Sections


class Access:
    def __init__(self, pool: AsyncConnectionPool, admin: AdminSettings) -> None:
        self.admin = admin
        self.sections = Sections(pool)

    @staticmethod
    def refuse(principal: Principal, refusal: Refusal | None) -> None:
        """The one refusal: an audit line naming who, what and why, and a 403 (nothing when
        the policy said no refusal)."""
        if refusal is None:
            return
        audit("refused", principal, refusal.action, status=403, reason=refusal.reason)
        raise Forbidden(refusal.detail)

    async def require(
        self,
        principal: Principal,
        section: Mapping[str, Any] | None,
        operation: Operation,
        resource: str,
    ) -> None:
        """403 unless ``principal`` may do ``operation`` on the resource with this
        ``authorization`` section (administrators may)."""
        administration = await self.admin.current()
        self.refuse(
            principal,
            policy.resource_refusal(principal, section, operation, resource, administration),
        )

    async def require_event_type(
        self, principal: Principal, name: str, operation: Operation
    ) -> None:
        if principal.unrestricted:
            return
        section = await self.sections.event_type(name)
        await self.require(principal, section, operation, f"event type {name}")

    async def require_publish(
        self, principal: Principal, name: str, section: Mapping[str, Any] | None
    ) -> None:
        """Writers of the event type, not blocked from producing."""
        administration = await self.admin.current()
        self.refuse(principal, policy.publish_refusal(principal, name, section, administration))

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
        administration = await self.admin.current()
        sections = await self._event_type_sections(principal, event_types)
        subscribed = None if subscription_id is None else (subscription_id, subscription)
        refusal = policy.consume_refusal(
            principal, sections, administration, subscribed, words=blocked_detail
        )
        self.refuse(principal, refusal)

    async def require_unblocked_consumer(
        self, principal: Principal, event_types: Sequence[str], detail: str
    ) -> None:
        """403 saying ``detail`` when the application or an event type is blocked from
        consuming."""
        administration = await self.admin.current()
        refusal = policy.consumer_block_refusal(principal, event_types, administration, detail)
        self.refuse(principal, refusal)

    async def require_admin(self, request: Request, operation: Operation) -> Principal:
        """The caller, when the administrators' list for ``operation`` names it; else 403."""
        principal = principal_of(request)
        action = f"{request.method} {request.url.path}"
        administration = await self.admin.current()
        self.refuse(principal, policy.admin_refusal(principal, administration, operation, action))
        return principal

    async def require_deletable(self, principal: Principal, name: str) -> None:
        """While ``disable_event_type_deletion`` is on, the broker's administrators alone
        delete event types."""
        administration = await self.admin.current()
        disabled = administration.features.get(Feature.DISABLE_EVENT_TYPE_DELETION, False)
        refusal = policy.deletion_refusal(principal, name, administration, disabled=disabled)
        self.refuse(principal, refusal)

    async def _event_type_sections(
        self, principal: Principal, event_types: Sequence[str]
    ) -> dict[str, Section]:
        """Each event type's section; none read for an unrestricted caller, whom none
        refuses."""
        if principal.unrestricted:
            return dict.fromkeys(event_types)
        return {name: await self.sections.event_type(name) for name in event_types}

    # -- open streams ----------------------------------------------------------------------

    def consumption_blocked_check(
        self, principal: Principal, event_types: Sequence[str]
    ) -> Callable[[], Awaitable[bool]]:
        """What a stream asks between polls: is ``principal`` now blocked from consuming the
        event types? The first yes is audited; the stream then ends."""
        names = list(event_types)

        async def blocked() -> bool:
            administration = await self.admin.current()
            if not policy.consumer_blocked(principal, names, administration):
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
                    reason = await self._lost_read(principal, event_types, subscription_id)
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

    async def _lost_read(
        self, principal: Principal, event_types: Sequence[str], subscription_id: str | None
    ) -> str | None:
        administration = await self.admin.current()
        subscription = (
            None if subscription_id is None else await self.sections.subscription(subscription_id)
        )
        sections = await self._event_type_sections(principal, event_types)
        return policy.lost_read(principal, sections, administration, subscription)
