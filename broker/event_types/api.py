"""``/event-types`` and ``/event-types/{name}/schemas``: the schema registry half of Nakadi.

Creating an event type creates its topic; deleting it deletes the topic; a
schema change on PUT gets the next semantic version (PATCH / MINOR / MAJOR) or,
when the compatibility mode forbids it, a 422 naming each violation's JSON path
and rule. A request that fails changes nothing: the Postgres transaction spans
the Kafka call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from fastavro.schema import to_parsing_canonical_form
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker import logs
from changebroker.auth import audit, principal_of
from changebroker.broker import authorization
from changebroker.broker.access import Access
from changebroker.broker.admin_settings import Feature
from changebroker.broker.bodies import json_body
from changebroker.broker.errors import (
    BadRequest,
    Conflict,
    EventTypeNotFound,
    FeatureNotAvailable,
    NotFound,
    Unavailable,
)
from changebroker.broker.event_types import evolution, rules
from changebroker.broker.event_types.store import AlreadyExists, Store, SubscriptionKey
from changebroker.broker.event_types.topics import TopicError, topic_config, topic_name
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.settings import Settings
from changebroker.broker.timelines import store as timeline_sql
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.storages import cluster_of, default_in

log = logging.getLogger(__name__)

SCHEMAS_DEFAULT_LIMIT = 20
SCHEMAS_MAX_LIMIT = 1000


class EventTypeApi:
    def __init__(
        self,
        store: Store,
        clusters: Clusters,
        settings: Settings,
        access: Access,
        own: OwnEvents,
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.settings = settings
        self.access = access
        self.own = own

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/event-types", self.list, methods=["GET"]),
            Route("/event-types", self.create, methods=["POST"]),
            Route("/event-types/{name}", self.get, methods=["GET"]),
            Route("/event-types/{name}", self.update, methods=["PUT"]),
            Route("/event-types/{name}", self.delete, methods=["DELETE"]),
            Route("/event-types/{name}/schemas", self.schemas, methods=["GET"]),
            Route("/event-types/{name}/schemas", self.add_schema, methods=["POST"]),
            Route("/event-types/{name}/schemas/{version}", self.schema, methods=["GET"]),
        ]

    async def list(self, request: Request) -> Response:
        """Every event type, as Nakadi lists them to any caller; ``writer=<data_type>:<value>``
        keeps those whose writers name it (by name or by a wildcard), ``owning_application``
        those it owns."""
        writer = request.query_params.get("writer")
        owner = request.query_params.get("owning_application")
        named = None if writer is None else authorization.attribute_query(writer)
        return JSONResponse(
            [
                stored.body
                for stored in await self.store.all()
                if (owner is None or stored.body.get("owning_application") == owner)
                and (
                    named is None
                    or authorization.lists(stored.body.get("authorization"), "write", named)
                )
            ]
        )

    async def get(self, request: Request) -> Response:
        name = request.path_params["name"]
        stored = await self.store.get(name)
        if stored is None:
            raise EventTypeNotFound(name)
        return JSONResponse(stored.body)

    async def create(self, request: Request) -> Response:
        principal = principal_of(request)
        admin = self.access.admin
        if await admin.feature(Feature.DISABLE_EVENT_TYPE_CREATION):
            raise FeatureNotAvailable("Event Type creation is disabled")
        body = await json_body(request)
        event_type = rules.validate_new(body)
        await admin.check_writable()
        try:
            await self._create(event_type)
        except AlreadyExists:
            raise Conflict(f"EventType with name {event_type['name']} already exists") from None
        audit("event type created", principal, event_type["name"])
        return Response(status_code=201)

    async def ensure(self, body: dict[str, Any]) -> bool:
        """Create the event type ``body`` describes unless one of its name exists (the broker's
        own, at start; several processes may be starting at once); whether it did."""
        try:
            await self._create(rules.validate_new(body))
        except AlreadyExists:
            return False
        return True

    async def _create(self, event_type: dict[str, Any]) -> None:
        """A valid new event type and its topic; AlreadyExists when the name is taken."""
        name = event_type["name"]
        partitions = rules.partition_count(
            event_type,
            default=self.settings.default_partitions,
            maximum=self.settings.max_partitions,
        )
        topic = topic_name(name)
        config = topic_config(event_type, self.settings.default_retention_ms)

        async def create_topic(conn: psycopg.AsyncConnection[Any]) -> None:
            # The first timeline, on the default storage.
            storage = await default_in(conn)
            await self.clusters.topics(storage.cluster(self.clusters.own)).create(
                topic, partitions, config
            )
            await timeline_sql.insert_first(conn, name, storage.id, topic)

        try:
            await self.store.create(event_type, topic, partitions, create_topic)
        except TopicError as exc:
            raise Unavailable(f"{exc}; nothing was created, try again") from None
        log.info(
            "event type created",
            extra=logs.fields(event_type=name, topic=topic, partitions=partitions),
        )
        self.own.event_type_log(event_type, "created")

    async def update(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await json_body(request)
        await self._change(request, name, lambda current: rules.validate_update(body, current))
        return Response(status_code=200)

    async def add_schema(self, request: Request) -> Response:
        """Nakadi's way to change the schema alone, by the event type's compatibility mode;
        ``fetch=true``: the stored version of the schema sent, if there is one (404)."""
        name = request.path_params["name"]
        fetch = request.query_params.get("fetch", "false").lower()
        if fetch not in ("true", "false"):
            raise BadRequest(f"'fetch' must be true or false, got {fetch!r}")
        schema = rules.schema_wrapper(await json_body(request))
        if fetch == "true":
            if await self.store.revision(name) is None:
                raise EventTypeNotFound(name)
            for stored in await self.store.all_schemas(name, schema["type"]):
                if _same_schema(schema["type"], stored["schema"], schema["schema"]):
                    return JSONResponse(stored)
            raise NotFound(f"schema is not found for {name}")

        def with_schema(current: dict[str, Any]) -> dict[str, Any]:
            kept = {k: v for k, v in current.items() if k not in rules.READ_ONLY}
            return rules.validate_update({**kept, "schema": schema}, current)

        await self._change(request, name, with_schema)
        return Response(status_code=200)

    async def _change(
        self,
        request: Request,
        name: str,
        updated_from: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        """The event type as ``updated_from`` its current body makes it, by its administrators,
        its schema versioned by its compatibility mode."""
        principal = principal_of(request)
        await self.access.admin.check_writable()
        try:
            async with self.store.locked(name) as locked:
                if locked is None:
                    raise EventTypeNotFound(name)
                current = locked.current
                # Refused before anything is read from the body: 403 whatever it says.
                await self.access.require(
                    principal, current.body.get("authorization"), "admin", f"event type {name}"
                )
                updated = updated_from(current.body)
                new_version = evolution.new_version(current.body, updated)
                before = current.body
                await locked.update(updated, new_version)
                config = topic_config(updated, self.settings.default_retention_ms)
                before_config = topic_config(current.body, self.settings.default_retention_ms)
                retention_change = int(config["retention.ms"]) - int(before_config["retention.ms"])
                if retention_change:
                    await timeline_sql.shift_cleanups(locked.conn, name, retention_change)
                if config != before_config:
                    # Raised inside the transaction: a refused topic change stores nothing.
                    topics = self.clusters.topics(
                        cluster_of(current.kafka_configuration, self.clusters.own)
                    )
                    await topics.set_config(current.topic, config)
        except TopicError as exc:
            raise Unavailable(f"{exc}; nothing was changed, try again") from None
        # Streams of readers this change removed end at their next batch.
        self.access.sections.forget(name)
        log.info(
            "event type updated",
            extra=logs.fields(event_type=name, schema_version=new_version or "unchanged"),
        )
        audit("event type updated", principal, name)
        self.own.event_type_log(before, "updated")

    async def delete(self, request: Request) -> Response:
        name = request.path_params["name"]
        principal = principal_of(request)
        admin = self.access.admin
        await admin.check_writable()
        try:
            async with self.store.locked(name) as locked:
                if locked is None:
                    raise EventTypeNotFound(name)
                await self.access.require(
                    principal,
                    locked.current.body.get("authorization"),
                    "admin",
                    f"event type {name}",
                )
                await self.access.require_deletable(principal, name)
                readers = await locked.subscriptions()
                if not (
                    await admin.feature(Feature.DELETE_EVENT_TYPE_WITH_SUBSCRIPTIONS)
                    or all(self._deletable(reader) for reader in readers)
                ):
                    raise Conflict(f"Can't remove event type {name}, as it has subscriptions")
                # Its subscriptions go with it (their streams end), as Nakadi deletes them.
                found = await timeline_sql.load(locked.conn, [name], self.clusters.own)
                await locked.delete()
                # Raised inside the transaction: a failed topic deletion keeps the event type.
                # Every timeline's topic that still exists goes, on its own cluster.
                for timeline in found[name].readable:
                    await self.clusters.topics(timeline.cluster).delete(timeline.topic)
        except TopicError as exc:
            raise Unavailable(f"{exc}; nothing was deleted, try again") from None
        self.access.sections.forget(name)
        log.info("event type deleted", extra=logs.fields(event_type=name))
        audit("event type deleted", principal, name)
        self.own.event_type_log(locked.current.body, "deleted")
        return Response(status_code=200)

    def _deletable(self, reader: SubscriptionKey) -> bool:
        """A subscription that does not keep its event type alive (Nakadi's archiver's)."""
        return (reader.owning_application, reader.consumer_group) == (
            self.settings.deletable_subscription_owning_application,
            self.settings.deletable_subscription_consumer_group,
        )

    async def schemas(self, request: Request) -> Response:
        name = request.path_params["name"]
        limit = _int_param(request, "limit", SCHEMAS_DEFAULT_LIMIT, 1, SCHEMAS_MAX_LIMIT)
        # Nakadi reads offset as a Java int; beyond it Postgres could not page either.
        offset = _int_param(request, "offset", 0, 0, 2**31 - 1)
        if await self.store.revision(name) is None:
            raise EventTypeNotFound(name)
        items, total = await self.store.schemas(name, limit, offset)
        base = f"/event-types/{name}/schemas"
        links: dict[str, Any] = {}
        # As Nakadi: a page past the last version links nowhere, not even back.
        if offset > 0 and items:
            links["prev"] = {"href": f"{base}?offset={max(0, offset - limit)}&limit={limit}"}
        if offset + limit < total:
            links["next"] = {"href": f"{base}?offset={offset + limit}&limit={limit}"}
        return JSONResponse({"_links": links, "items": items})

    async def schema(self, request: Request) -> Response:
        name = request.path_params["name"]
        version = request.path_params["version"]
        if version == "latest":
            stored = await self.store.get(name)
            if stored is None:
                raise EventTypeNotFound(name)
            return JSONResponse(stored.body["schema"])
        found = await self.store.schema(name, version)
        if found is not None:
            return JSONResponse(found)
        if await self.store.revision(name) is None:
            raise EventTypeNotFound(name)
        raise NotFound(f'EventType "{name}" has no schema version "{version}"')


def _same_schema(schema_type: str, stored: str, sent: str) -> bool:
    """Whether ``sent`` is the stored schema: the same JSON, or for Avro the same parsing
    canonical form (what Nakadi compares by fingerprint)."""
    old, new = json.loads(stored), json.loads(sent)
    if schema_type == rules.AVRO_SCHEMA:
        return bool(to_parsing_canonical_form(old) == to_parsing_canonical_form(new))
    return bool(old == new)


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"'{name}' must be {bounds}, got {value}")
    return value
