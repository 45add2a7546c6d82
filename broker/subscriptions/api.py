"""Nakadi subscriptions over HTTP: ``/subscriptions`` and ``/subscriptions/{id}`` (create, list,
get, update, delete); the subscriptions themselves are in
:mod:`changebroker.broker.subscriptions.store`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker.auth import audit, principal_of
from changebroker.broker import authorization, bodies
from changebroker.broker.access import Access
from changebroker.broker.admin_settings import Feature
from changebroker.broker.errors import BadRequest, SubscriptionNotFound, Unavailable
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.subscriptions.store import (
    DEFAULT_PAGE,
    MAX_PAGE,
    Subscription,
    SubscriptionError,
    Subscriptions,
    storable,
)
from changebroker.numerals import whole_number

# What ``show_status`` adds to a listed subscription (served by the streams module).
StatusSource = Callable[["Subscription"], Awaitable[list[dict[str, Any]]]]


def _page_number(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not whole_number(text) or not low <= int(text) <= high:
        raise SubscriptionError(400, f"{name} must be a whole number from {low} to {high}")
    return int(text)


class SubscriptionApi:
    def __init__(
        self,
        subscriptions: Subscriptions,
        status: StatusSource,
        access: Access,
        own: OwnEvents,
    ) -> None:
        self._subscriptions = subscriptions
        self._status = status
        self._access = access
        self._own = own

    async def _administered(self, request: Request) -> Subscription:
        """The subscription the path names (else 404) if the caller is one of its admins
        (else 403)."""
        subscription_id = request.path_params["id"]
        subscription = await self._subscriptions.get(subscription_id)
        if subscription is None:
            raise SubscriptionNotFound(subscription_id)
        await self._access.require(
            principal_of(request),
            subscription.authorization,
            "admin",
            f"subscription {subscription_id}",
        )
        return subscription

    async def create(self, request: Request) -> Response:
        principal = principal_of(request)
        admin = self._access.admin
        body = await bodies.json_body(request)
        # Only readers of every event type may subscribe to them.
        names = body.get("event_types") if isinstance(body, dict) else None
        for name in names if isinstance(names, list) else ():
            if isinstance(name, str):
                await self._access.require_event_type(principal, name, "read")

        async def may_create() -> None:
            if await admin.feature(Feature.DISABLE_SUBSCRIPTION_CREATION):
                raise Unavailable("Subscription creation is temporarily unavailable")
            await admin.check_writable()

        subscription, created = await self._subscriptions.create(body, may_create)
        location = f"/subscriptions/{subscription.id}"
        headers = {"Location": location}
        if created:
            headers["Content-Location"] = location
            audit("subscription created", principal, subscription.id)
            self._own.subscription_log(subscription.id, "created")
        return JSONResponse(
            subscription.body(), status_code=201 if created else 200, headers=headers
        )

    async def index(self, request: Request) -> Response:
        query = request.query_params
        limit = _page_number(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        offset = _page_number(request, "offset", 0, 0, 2**62)
        owner = query.get("owning_application")
        event_types = query.getlist("event_type")
        reader = query.get("reader")
        if not storable([owner, reader, *event_types]):
            raise BadRequest("owning_application, event_type and reader must not contain NUL")
        named = None if reader is None else authorization.attribute_query(reader)
        found = await self._subscriptions.page(owner, event_types, limit, offset, named)
        items = [s.body() for s in found]
        show_status = query.get("show_status", "false").lower() == "true"
        if show_status:
            for item, subscription in zip(items, found, strict=True):
                item["status"] = await self._status(subscription)
        # Nakadi's link: its parameters in its order, ":" of a reader left as it is.
        filters: list[tuple[str, str]] = [("event_type", name) for name in event_types]
        if reader is not None:
            filters.append(("reader", reader))
        if owner is not None:
            filters.append(("owning_application", owner))
        if show_status:
            filters.append(("show_status", "true"))

        def link(at: int) -> dict[str, str]:
            params = [*filters, ("offset", str(at)), ("limit", str(limit))]
            return {"href": f"/subscriptions?{urlencode(params, safe=':')}"}

        links: dict[str, Any] = {}
        if offset > 0:
            links["prev"] = link(max(offset - limit, 0))
        # As Nakadi: a full page has a next one, which may be empty.
        if len(found) >= limit:
            links["next"] = link(offset + len(found))
        return JSONResponse({"items": items, "_links": links})

    async def get(self, request: Request) -> Response:
        subscription_id = request.path_params["id"]
        subscription = await self._subscriptions.get(subscription_id)
        if subscription is None:
            raise SubscriptionNotFound(subscription_id)
        return JSONResponse(subscription.body())

    async def update(self, request: Request) -> Response:
        subscription_id = request.path_params["id"]
        await self._administered(request)
        body = await bodies.json_body(request)
        if not await self._subscriptions.update(subscription_id, body):
            raise SubscriptionNotFound(subscription_id)
        # Streams of readers this change removed end at their next batch.
        self._access.sections.forget_subscription(subscription_id)
        audit("subscription changed", principal_of(request), subscription_id)
        return Response(status_code=204)

    async def delete(self, request: Request) -> Response:
        subscription_id = request.path_params["id"]
        await self._access.admin.check_writable()
        await self._administered(request)
        if not await self._subscriptions.delete(subscription_id):
            raise SubscriptionNotFound(subscription_id)
        audit("subscription deleted", principal_of(request), subscription_id)
        self._own.subscription_log(subscription_id, "deleted")
        return Response(status_code=204)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/subscriptions", self.create, methods=["POST"]),
            Route("/subscriptions", self.index, methods=["GET"]),
            Route("/subscriptions/{id}", self.get, methods=["GET"]),
            Route("/subscriptions/{id}", self.update, methods=["PUT"]),
            Route("/subscriptions/{id}", self.delete, methods=["DELETE"]),
        ]
