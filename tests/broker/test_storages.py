"""``/storages``: the Kafka clusters timelines live in, as Nakadi's StoragesController answers,
with bootstrap servers and client settings where Nakadi has a ZooKeeper connection."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from tests.broker.test_admin_settings import bearer, problem
from tests.support.event_types import business_event_type


def storage(storage_id: str, bootstrap: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": storage_id,
        "storage_type": "kafka",
        "kafka_configuration": {"bootstrap_servers": bootstrap},
        **fields,
    }


def test_the_brokers_own_kafka_is_the_default_storage(
    client: httpx.Client, kafka_bootstrap: str
) -> None:
    listed = client.get("/storages")
    assert listed.status_code == 200, listed.text
    (own,) = [s for s in listed.json() if s["id"] == "default"]
    assert own == {
        "id": "default",
        "storage_type": "kafka",
        "kafka_configuration": {"bootstrap_servers": kafka_bootstrap, "client_settings": []},
        "default": True,
    }
    assert client.get("/storages/default").json() == own


def test_create_get_list_and_delete(client: httpx.Client, unique_name) -> None:
    storage_id = unique_name("kafka-b")
    body = storage(
        storage_id,
        "broker-b1:9092,broker-b2:9092",
        kafka_configuration={
            "bootstrap_servers": "broker-b1:9092,broker-b2:9092",
            "client_settings": {"security.protocol": "SSL", "ssl.key.password": "secret"},
        },
    )
    created = client.post("/storages", json=body)
    assert created.status_code == 201, created.text
    found = client.get(f"/storages/{storage_id}")
    assert found.status_code == 200
    assert created.json() == found.json()
    # Client settings carry secrets: their names are shown, not their values.
    assert found.json() == {
        "id": storage_id,
        "storage_type": "kafka",
        "kafka_configuration": {
            "bootstrap_servers": "broker-b1:9092,broker-b2:9092",
            "client_settings": ["security.protocol", "ssl.key.password"],
        },
        "default": False,
    }
    ids = [s["id"] for s in client.get("/storages").json()]
    assert storage_id in ids and ids == sorted(ids)
    problem(client.post("/storages", json=body), 409)
    assert client.delete(f"/storages/{storage_id}").status_code == 204
    problem(client.get(f"/storages/{storage_id}"), 404)
    detail = problem(client.delete(f"/storages/{storage_id}"), 404)["detail"]
    assert detail == f"Tried to remove storage that doesn't exist, id: {storage_id}"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (["not", "an", "object"], "Storage object"),
        ({"storage_type": "kafka", "kafka_configuration": {}}, 'JSONObject["id"] not found'),
        (storage("x", "h:1", storage_type="cassandra"), "Type 'cassandra' is not a valid"),
        ({"id": "x", "storage_type": "kafka"}, 'JSONObject["kafka_configuration"] not found'),
        (storage("x", "no-port"), "bootstrap_servers must be host:port"),
        (storage("x" * 37, "h:1"), "at most 36 characters"),
        (storage("a/b", "h:1"), "without '/'"),
        (storage("x", "h:1", default="yes"), "default must be true or false"),
        (
            storage(
                "x",
                "h:1",
                kafka_configuration={"bootstrap_servers": "h:1", "client_settings": {"a": 1}},
            ),
            "client_settings must map",
        ),
    ],
)
def test_bad_storages_are_422_and_stored_nowhere(
    client: httpx.Client, broker_dsn: str, body: Any, says: str
) -> None:
    before = client.get("/storages").json()
    assert says in str(problem(client.post("/storages", json=body), 422)["detail"])
    assert client.get("/storages").json() == before
    with psycopg.connect(broker_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM broker_storages").fetchone() == (len(before),)


def test_the_default_storage_takes_new_event_types_and_cannot_be_deleted(
    client: httpx.Client, kafka_bootstrap: str, unique_name
) -> None:
    # The same cluster under another name: new event types must then name that storage.
    other = unique_name("same-cluster")
    assert client.post("/storages", json=storage(other, kafka_bootstrap)).status_code == 201
    try:
        moved = client.put(f"/storages/default/{other}")
        assert moved.status_code == 200, moved.text
        assert moved.json()["id"] == other and moved.json()["default"] is True
        defaults = [s["id"] for s in client.get("/storages").json() if s["default"]]
        assert defaults == [other]
        name = unique_name("on_other")
        assert client.post("/event-types", json=business_event_type(name)).status_code == 201
        (timeline,) = client.get(f"/event-types/{name}/timelines").json()
        assert timeline["storage_id"] == other
        assert "is the default" in str(problem(client.delete(f"/storages/{other}"), 403)["detail"])
        assert client.put("/storages/default/default").status_code == 200
        detail = problem(client.delete(f"/storages/{other}"), 403)["detail"]
        assert detail == f"Can't delete storage as it is still used, id: {other}"
        assert client.delete(f"/event-types/{name}").status_code == 200
        assert client.delete(f"/storages/{other}").status_code == 204
    finally:
        client.put("/storages/default/default")
    problem(client.put("/storages/default/nowhere"), 404)
    defaults = [s["id"] for s in client.get("/storages").json() if s["default"]]
    assert defaults == ["default"]


def test_a_new_storage_marked_default_takes_the_mark(
    client: httpx.Client, kafka_bootstrap: str, unique_name
) -> None:
    other = unique_name("marked")
    body = storage(other, kafka_bootstrap, default=True)
    try:
        assert client.post("/storages", json=body).status_code == 201
        defaults = [s["id"] for s in client.get("/storages").json() if s["default"]]
        assert defaults == [other]
    finally:
        assert client.put("/storages/default/default").status_code == 200
        assert client.delete(f"/storages/{other}").status_code == 204


def test_only_administrators_may_see_or_change_storages(
    administered: httpx.Client, kafka_bootstrap: str, unique_name
) -> None:
    secured = administered
    storage_id = unique_name("guarded")
    body = storage(storage_id, kafka_bootstrap)
    for method, path, json in [
        ("GET", "/storages", None),
        ("POST", "/storages", body),
        ("GET", "/storages/default", None),
        ("DELETE", "/storages/default", None),
        ("PUT", "/storages/default/default", None),
    ]:
        refused = secured.request(method, path, json=json, headers=bearer("shop"))
        assert "not one of the broker's administrators" in str(problem(refused, 403)["detail"])
    assert secured.get(f"/storages/{storage_id}", headers=bearer("ops")).status_code == 404
    created = secured.post("/storages", json=body, headers=bearer("ops"))
    assert created.status_code == 201, created.text
    assert secured.delete(f"/storages/{storage_id}", headers=bearer("ops")).status_code == 204
