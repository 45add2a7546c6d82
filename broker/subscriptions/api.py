"""Nakadi subscriptions over HTTP: ``/subscriptions`` and ``/subscriptions/{id}`` (create, list,
get, update, delete); the subscriptions themselves are in :mod:`broker.subscriptions.store`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from broker import bodies
from broker.errors import BadRequest, SubscriptionNotFound
from broker.subscriptions.store import (
    DEFAULT_PAGE,
    MAX_PAGE,
    Subscription,
    SubscriptionError,
    Subscriptions,
    storable,
    whole_number,
)

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
    def __init__(self, subscriptions: Subscriptions, status: StatusSource) -> None:
        self._subscriptions = subscriptions
        self._status = status

    async def create(self, request: Request) -> Response:
        body = await bodies.json_body(request)
        subscription, created = await self._subscriptions.create(body)
        location = f"/subscriptions/{subscription.id}"
        headers = {"Location": location}
        if created:
            headers["Content-Location"] = location
        return JSONResponse(
            subscription.body(), status_code=201 if created else 200, headers=headers
        )

    async def index(self, request: Request) -> Response:
        query = request.query_params
        limit = _page_number(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        offset = _page_number(request, "offset", 0, 0, 2**62)
        owner = query.get("owning_application")
        event_types = query.getlist("event_type")
        if not storable([owner, *event_types]):
            raise BadRequest("owning_application and event_type must not contain NUL")
        found, more = await self._subscriptions.page(owner, event_types, limit, offset)
        items = [s.body() for s in found]
        if query.get("show_status", "false").lower() == "true":
            for item, subscription in zip(items, found, strict=True):
                item["status"] = await self._status(subscription)
        filters: list[tuple[str, str]] = []
        if owner is not None:
            filters.append(("owning_application", owner))
        filters += [("event_type", name) for name in event_types]

        def link(at: int) -> dict[str, str]:
            params = [*filters, ("offset", str(at)), ("limit", str(limit))]
            return {"href": f"/subscriptions?{urlencode(params)}"}

        links: dict[str, Any] = {}
        if offset > 0:
            links["prev"] = link(max(offset - limit, 0))
        if more:
            links["next"] = link(offset + limit)
        return JSONResponse({"items": items, "_links": links})

    async def get(self, request: Request) -> Response:
        subscription_id = request.path_params["id"]
        subscription = await self._subscriptions.get(subscription_id)
        if subscription is None:
            raise SubscriptionNotFound(subscription_id)
        return JSONResponse(subscription.body())

    async def update(self, request: Request) -> Response:
        subscription_id = request.path_params["id"]
        body = await bodies.json_body(request)
        if not await self._subscriptions.update_authorization(subscription_id, body):
            raise SubscriptionNotFound(subscription_id)
        return Response(status_code=204)

    async def delete(self, request: Request) -> Response:
        subscription_id = request.path_params["id"]
        if not await self._subscriptions.delete(subscription_id):
            raise SubscriptionNotFound(subscription_id)
        return Response(status_code=204)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/subscriptions", self.create, methods=["POST"]),
            Route("/subscriptions", self.index, methods=["GET"]),
            Route("/subscriptions/{id}", self.get, methods=["GET"]),
            Route("/subscriptions/{id}", self.update, methods=["PUT"]),
            Route("/subscriptions/{id}", self.delete, methods=["DELETE"]),
        ]
