"""``/storages``, ``/event-types/{name}/timelines`` and ``/event-types/{name}/partition-count``:
Nakadi's administrators' endpoints for where events live, answered as Nakadi answers them.

Only the broker's administrators (``/settings/admins``) may use them: reads need the
administrators' ``readers``, changes their ``writers``, as Nakadi's AdminService decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker import logs
from changebroker.auth import audit
from changebroker.broker.access import Access
from changebroker.broker.bodies import json_body
from changebroker.broker.errors import NotFound, Unprocessable
from changebroker.broker.event_types.store import Store, _utc
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.model import Timeline
from changebroker.broker.timelines.repartition import Repartitioning
from changebroker.broker.timelines.storages import Storages, parse
from changebroker.broker.timelines.store import TimelineStore
from changebroker.broker.timelines.switch import Switcher

log = logging.getLogger(__name__)


def timeline_view(timeline: Timeline) -> dict[str, object]:
    """Nakadi's TimelineView; what is not set yet (an active timeline's end) left out, as the
    spec's types admit no null."""
    view: dict[str, object] = {
        "id": timeline.id,
        "event_type": timeline.event_type,
        "order": timeline.order,
        "storage_id": timeline.storage,
        "topic": timeline.topic,
        "created_at": _utc(timeline.created_at),
    }
    if timeline.switched_at is not None:
        view["switched_at"] = _utc(timeline.switched_at)
    if timeline.cleanup_at is not None:
        view["cleaned_up_at"] = _utc(timeline.cleanup_at)
    if timeline.latest is not None:
        view["latest_position"] = {"offsets": list(timeline.latest)}
    return view


@dataclass(frozen=True)
class TimelineApi:
    store: Store
    storages: Storages
    timelines: TimelineStore
    clusters: Clusters
    switcher: Switcher
    repartitioning: Repartitioning
    access: Access

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/storages", self.list_storages, methods=["GET"]),
            Route("/storages", self.create_storage, methods=["POST"]),
            Route("/storages/default/{id}", self.set_default, methods=["PUT"]),
            Route("/storages/{id}", self.get_storage, methods=["GET"]),
            Route("/storages/{id}", self.delete_storage, methods=["DELETE"]),
            Route("/event-types/{name}/timelines", self.list_timelines, methods=["GET"]),
            Route("/event-types/{name}/timelines", self.create_timeline, methods=["POST"]),
            Route("/event-types/{name}/partition-count", self.repartition, methods=["PUT"]),
        ]

    async def list_storages(self, request: Request) -> Response:
        await self.access.require_admin(request, "read")
        own = self.clusters.own
        return JSONResponse([storage.view(own) for storage in await self.storages.all()])

    async def get_storage(self, request: Request) -> Response:
        await self.access.require_admin(request, "read")
        storage_id = request.path_params["id"]
        found = await self.storages.get(storage_id)
        if found is None:
            raise NotFound(f"No storage with id {storage_id}")
        return JSONResponse(found.view(self.clusters.own))

    async def create_storage(self, request: Request) -> Response:
        principal = await self.access.require_admin(request, "write")
        await self.access.admin.check_writable()
        storage = parse(await json_body(request))
        await self.storages.create(storage)
        audit("storage created", principal, storage.id)
        # The spec's answer: the storage created (Nakadi's own sends no body).
        return JSONResponse(storage.view(self.clusters.own), status_code=201)

    async def delete_storage(self, request: Request) -> Response:
        principal = await self.access.require_admin(request, "write")
        await self.access.admin.check_writable()
        storage_id = request.path_params["id"]
        await self.storages.delete(storage_id)
        audit("storage deleted", principal, storage_id)
        return Response(status_code=204)

    async def set_default(self, request: Request) -> Response:
        principal = await self.access.require_admin(request, "write")
        await self.access.admin.check_writable()
        storage = await self.storages.set_default(request.path_params["id"])
        audit("default storage set", principal, storage.id)
        return JSONResponse(storage.view(self.clusters.own))

    async def list_timelines(self, request: Request) -> Response:
        await self.access.require_admin(request, "read")
        name = request.path_params["name"]
        found = await self.timelines.of(name, fresh=True)
        if found is None:
            raise NotFound(f'EventType "{name}" does not exist')
        return JSONResponse([timeline_view(timeline) for timeline in found.all])

    async def create_timeline(self, request: Request) -> Response:
        name = request.path_params["name"]
        stored = await self.store.get(name)
        if stored is None:
            raise NotFound(f'EventType "{name}" does not exist')
        principal = await self.access.require_admin(request, "write")
        await self.access.admin.check_writable()
        body = await json_body(request)
        if stored.body["cleanup_policy"] != "delete":
            raise Unprocessable(
                "It is not possible to create a timeline for event type with 'compact'"
                " cleanup_policy"
            )
        storage_id = body.get("storage_id") if isinstance(body, dict) else None
        storage = None if not isinstance(storage_id, str) else await self.storages.get(storage_id)
        if storage is None:
            raise Unprocessable(f"No storage with id: {storage_id}")
        order = await self.switcher.switch(name, storage)
        log.info(
            "timeline created", extra=logs.fields(event_type=name, order=order, storage=storage.id)
        )
        audit("timeline created", principal, name)
        return Response(status_code=201)

    async def repartition(self, request: Request) -> Response:
        name = request.path_params["name"]
        if await self.store.revision(name, fresh=True) is None:
            raise NotFound(f'EventType "{name}" does not exist')
        principal = await self.access.require_admin(request, "write")
        await self.access.admin.check_writable()
        body = await json_body(request)
        count = body.get("partition_count") if isinstance(body, dict) else None
        if not isinstance(count, int) or isinstance(count, bool):
            raise Unprocessable("partition_count is required: a whole number of partitions")
        await self.repartitioning.repartition(name, count)
        audit("event type repartitioned", principal, name)
        return Response(status_code=204)
