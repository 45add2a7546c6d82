"""A killed broker process loses nothing; two processes on one Postgres and Kafka act as one."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
from pathlib import Path

import httpx

from changebroker import kafka
from changebroker.bridge.event_types import EventTypes
from changebroker.broker.app import create_app
from changebroker.broker.event_types.store import Store
from changebroker.broker.settings import Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import broker_process, serve_in_thread
from tests.broker.kafka_read import read_all, topic_of
from tests.support.event_types import business_event_type


def _event(order_number: str) -> dict[str, object]:
    return {
        "order_number": order_number,
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00Z"},
    }


def test_sigkill_and_restart_lose_no_event_type_schema_or_event(
    pg_dsn: str, kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    broker, url = broker_process(pg_dsn, kafka_bootstrap, tmp_path / "broker.log")
    name = unique_name("durable")
    created = business_event_type(name)
    evolved_schema = {
        "properties": {"order_number": {"type": "string"}, "amount": {"type": "number"}}
    }
    evolved = {**created, "schema": {"type": "json_schema", "schema": json.dumps(evolved_schema)}}
    broker.start()
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/event-types", json=created).status_code == 201
            assert client.put(f"/event-types/{name}", json=evolved).status_code == 200
            assert (
                client.post(
                    f"/event-types/{name}/events", json=[_event("1"), _event("2")]
                ).status_code
                == 200
            )
            before = client.get(f"/event-types/{name}").json()
            schemas_before = client.get(f"/event-types/{name}/schemas").json()
        broker.kill()
        broker.start()
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get(f"/event-types/{name}").json() == before
            assert client.get(f"/event-types/{name}/schemas").json() == schemas_before
            assert client.post(f"/event-types/{name}/events", json=[_event("3")]).status_code == 200
    finally:
        broker.stop()
    topic, partitions = topic_of(pg_dsn, name)
    stored = read_all(kafka_bootstrap, topic, partitions)
    assert [s.event["order_number"] for s in stored] == ["1", "2", "3"]
    assert [s.event["metadata"]["version"] for s in stored] == ["1.1.0", "1.1.0", "1.1.0"]


def test_two_brokers_on_one_database_behave_as_one(
    broker_dsn: str, kafka_bootstrap: str, unique_name
) -> None:
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap)
    with (
        serve_in_thread(create_app(settings)) as first,
        serve_in_thread(create_app(settings)) as second,
    ):
        a = httpx.Client(base_url=first, timeout=30)
        b = httpx.Client(base_url=second, timeout=30)
        name = unique_name("shared")
        body = business_event_type(name, compatibility_mode="compatible")
        assert a.post("/event-types", json=body).status_code == 201
        assert b.post("/event-types", json=body).status_code == 409
        extra = {**_event("1"), "amount": 1}
        # b compiles and caches the 1.0.0 validator; a's schema change must reach it.
        assert b.post(f"/event-types/{name}/events", json=[extra]).status_code == 422
        schema = {"properties": {"order_number": {"type": "string"}, "amount": {"type": "number"}}}
        evolved = {**body, "schema": {"type": "json_schema", "schema": json.dumps(schema)}}
        assert a.put(f"/event-types/{name}", json=evolved).status_code == 200
        assert b.post(f"/event-types/{name}/events", json=[extra]).status_code == 200
        assert a.delete(f"/event-types/{name}").status_code == 200
        assert b.post(f"/event-types/{name}/events", json=[extra]).status_code == 404
        a.close()
        b.close()


def test_a_type_deleted_and_created_again_takes_events_on_a_process_that_kept_publishing(
    broker_url: str, broker_dsn: str, kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    other, other_url = broker_process(broker_dsn, kafka_bootstrap, tmp_path / "broker.log")
    other.start()
    name = unique_name("recreated")
    body = business_event_type(name)
    admin = httpx.Client(base_url=broker_url, timeout=30)
    publisher = httpx.Client(base_url=other_url, timeout=60)
    # What the other process answered: (phase when the request started, status, order number);
    # phase 0 before the delete, 1 once created again.
    results: list[tuple[int, int, str]] = []
    phase = 0
    go, idle, stop = threading.Event(), threading.Event(), threading.Event()
    go.set()

    def keep_publishing() -> None:
        for number in itertools.count():
            if not go.is_set():
                idle.set()
                go.wait()
            if stop.is_set():
                return
            started_in = phase
            response = publisher.post(f"/event-types/{name}/events", json=[_event(str(number))])
            results.append((started_in, response.status_code, str(number)))

    def answered(wanted_phase: int, status: int) -> int:
        return sum(1 for p, s, _ in results if p == wanted_phase and s == status)

    thread = threading.Thread(target=keep_publishing, daemon=True)
    try:
        assert admin.post("/event-types", json=body).status_code == 201
        thread.start()
        wait_until(lambda: answered(0, 200) >= 3, timeout=30, what="publishing to start")
        # Between two of its requests, as a client that deletes and creates at once: the
        # other process never sees the type missing, only the new one.
        go.clear()
        assert idle.wait(30)
        assert admin.delete(f"/event-types/{name}").status_code == 200
        assert admin.post("/event-types", json=body).status_code == 201
        phase = 1
        go.set()
        # Well within Kafka's 30 s delivery timeout: events sent to the deleted topic would
        # only fail (207) after it.
        wait_until(lambda: answered(1, 200) >= 5, timeout=20, what="events in the new type")
    finally:
        stop.set()
        go.set()
        thread.join(timeout=60)
        other.stop()
        admin.close()
        publisher.close()
    assert {s for p, s, _ in results if p == 1} == {200}, results
    topic, partitions = topic_of(broker_dsn, name)
    stored = read_all(kafka_bootstrap, topic, partitions)
    # The new topic holds exactly what was accepted once the old type was gone.
    accepted = [n for p, s, n in results if p == 1]
    assert sorted(s.event["order_number"] for s in stored) == sorted(accepted)


def test_the_bridges_target_follows_a_type_deleted_and_created_again(
    broker_url: str, broker_dsn: str, kafka_bootstrap: str, unique_name
) -> None:
    """The bridge caches publishing targets as the publisher does: by revision and topic."""
    name = unique_name("bridged")
    body = business_event_type(name)

    async def scenario() -> tuple[str, str]:
        store = Store(broker_dsn, pool_size=2)
        await store.open()
        try:
            async with httpx.AsyncClient(base_url=broker_url, timeout=30) as http:
                targets = EventTypes(store, http, kafka.Cluster(kafka_bootstrap))
                assert (await http.post("/event-types", json=body)).status_code == 201
                before = await targets.target(name)
                assert (await http.delete(f"/event-types/{name}")).status_code == 200
                assert (await http.post("/event-types", json=body)).status_code == 201
                after = await targets.target(name)
        finally:
            await store.close()
        assert before is not None and after is not None
        return before.topic, after.topic

    old, new = asyncio.run(scenario())
    assert new != old
    assert new == topic_of(broker_dsn, name)[0]
