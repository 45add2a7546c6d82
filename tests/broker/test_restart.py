"""A killed broker process loses nothing; two processes on one Postgres and Kafka act as one."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from broker.app import create_app
from broker.settings import Settings
from changebroker.stack.processes import free_port
from tests.broker.conftest import business_event_type
from tests.broker.kafka_read import read_all, topic_of
from tests.support.apps import CliProcess, serve_in_thread


def _event(order_number: str) -> dict[str, object]:
    return {
        "order_number": order_number,
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00Z"},
    }


def test_sigkill_and_restart_lose_no_event_type_schema_or_event(
    pg_dsn: str, kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    broker = CliProcess(
        # As `changebroker up` starts it, registry URL included.
        [
            "broker",
            "--port",
            str(port),
            "--pg-url",
            pg_dsn,
            "--registry-url",
            "http://127.0.0.1:1",
        ],
        ready_url=f"{url}/health",
        log_path=tmp_path / "broker.log",
        env={"CHANGEBROKER_KAFKA_BOOTSTRAP": kafka_bootstrap},
    )
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
