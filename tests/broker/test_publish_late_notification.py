"""A process that hears late that another one deleted an event type (Postgres's notification
still on its way) still answers a publish as if it had heard: 404 once the type is gone, into
the new type once it was created again. Never a 207 after Kafka's 30 s timeout, which a
Nakadi client retries in vain."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.types import Message as AsgiMessage

from changebroker import kafka
from changebroker.auth import ANONYMOUS
from changebroker.broker.access import Access
from changebroker.broker.admin_settings import AdminSettings, initial_admins
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.errors import EventTypeNotFound
from changebroker.broker.event_types.store import Revision, Store
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.publishing.api import Publisher
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.writers import Writer
from tests.broker.kafka_read import read_all, topic_of
from tests.support.event_types import business_event_type


class LateStore(Store):
    """The store of a process whose notifications have not arrived: until ``hears`` is set, it
    answers what it knew before, except when asked fresh (``Store.revision``'s contract)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, pool_size=2)
        self.kept: dict[str, Revision | None] = {}
        self.hears = True

    async def revision(self, name: str, *, fresh: bool = False) -> Revision | None:
        if not self.hears and not fresh and name in self.kept:
            return self.kept[name]
        revision = await super().revision(name, fresh=fresh)
        self.kept[name] = revision
        return revision


def _publish_request(name: str, order_number: str) -> Request:
    event = {
        "order_number": order_number,
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00Z"},
    }
    body = json.dumps([event]).encode()

    async def receive() -> AsgiMessage:
        return {"type": "http.request", "body": body, "more_body": False}

    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": f"/event-types/{name}/events",
        "path_params": {"name": name},
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
        "state": {"principal": ANONYMOUS},
    }
    return Request(scope, receive)


def _with_late_publisher(
    broker_dsn: str,
    kafka_bootstrap: str,
    scenario: Callable[[Publisher, LateStore], Awaitable[None]],
) -> None:
    async def run() -> None:
        store = LateStore(broker_dsn)
        await store.open()
        clusters = Clusters(kafka.Cluster(kafka_bootstrap))
        writer = Writer(
            broker_dsn, store.pool, "broker", wait_timeout=40, on_resume=store.forget_revisions
        )
        await writer.start()
        try:
            access = Access(store.pool, AdminSettings(store.pool, initial_admins(())))
            publisher = Publisher(
                store, clusters, writer, access, AvroSchemas(store), OwnEvents(False, "")
            )
            await scenario(publisher, store)
        finally:
            await writer.stop()
            await clusters.close()
            await store.close()

    asyncio.run(run())


def test_a_publish_to_a_type_deleted_elsewhere_is_not_found(
    broker_url: str, broker_dsn: str, kafka_bootstrap: str, unique_name
) -> None:
    name = unique_name("deleted_elsewhere")
    admin = httpx.Client(base_url=broker_url, timeout=30)
    assert admin.post("/event-types", json=business_event_type(name)).status_code == 201

    async def scenario(publisher: Publisher, store: LateStore) -> None:
        # Published once: the process keeps the type's topic and validator.
        assert (await publisher.publish(_publish_request(name, "1"))).status_code == 200
        store.hears = False
        assert (await asyncio.to_thread(admin.delete, f"/event-types/{name}")).status_code == 200
        with pytest.raises(EventTypeNotFound):
            await publisher.publish(_publish_request(name, "2"))

    try:
        _with_late_publisher(broker_dsn, kafka_bootstrap, scenario)
    finally:
        admin.close()


def test_a_publish_to_a_type_deleted_and_created_again_elsewhere_lands_in_the_new_one(
    broker_url: str, broker_dsn: str, kafka_bootstrap: str, unique_name
) -> None:
    name = unique_name("recreated_elsewhere")
    body = business_event_type(name)
    admin = httpx.Client(base_url=broker_url, timeout=30)
    assert admin.post("/event-types", json=body).status_code == 201
    old_topic, _ = topic_of(broker_dsn, name)

    async def scenario(publisher: Publisher, store: LateStore) -> None:
        assert (await publisher.publish(_publish_request(name, "1"))).status_code == 200
        store.hears = False
        assert (await asyncio.to_thread(admin.delete, f"/event-types/{name}")).status_code == 200
        assert (await asyncio.to_thread(admin.post, "/event-types", json=body)).status_code == 201
        assert (await publisher.publish(_publish_request(name, "2"))).status_code == 200

    try:
        _with_late_publisher(broker_dsn, kafka_bootstrap, scenario)
    finally:
        admin.close()
    topic, partitions = topic_of(broker_dsn, name)
    assert topic != old_topic
    assert [s.event["order_number"] for s in read_all(kafka_bootstrap, topic, partitions)] == ["2"]
