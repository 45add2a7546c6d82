"""Schema evolution per compatibility mode, and ``/event-types/{name}/schemas``."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from tests.broker.kafka_read import read_all, topic_of
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type

BASE: dict[str, Any] = {
    "properties": {"order_number": {"type": "string"}, "note": {"type": "string"}},
    "required": ["order_number"],
}
WITH_AMOUNT = {**BASE["properties"], "amount": {"type": "number"}}

CHANGES: dict[str, dict[str, Any]] = {
    "title": {**BASE, "title": "Orders"},
    "description": {
        **BASE,
        "properties": {**BASE["properties"], "note": {"type": "string", "description": "text"}},
    },
    # The annotation keyword the bridge names a column's Postgres type in.
    "x-pg-type": {
        **BASE,
        "properties": {**BASE["properties"], "note": {"type": "string", "x-pg-type": "text"}},
    },
    "add optional": {**BASE, "properties": WITH_AMOUNT},
    "add required": {**BASE, "properties": WITH_AMOUNT, "required": ["order_number", "amount"]},
    "mark required": {**BASE, "required": ["order_number", "note"]},
    "remove optional": {
        "properties": {"order_number": {"type": "string"}},
        "required": ["order_number"],
    },
    "change type": {
        **BASE,
        "properties": {**BASE["properties"], "order_number": {"type": "integer"}},
    },
}

# (mode, change) -> the new version, or the (JSON path, rule) the 422 names. The manual:
# PATCH for title/description (and the bridge's x-pg-type annotation), MINOR for added
# properties (forward: also required ones and marking required), MAJOR otherwise; compatible
# and forward refuse MAJOR, none takes it.
MATRIX: list[tuple[str, str, str | tuple[str, str]]] = [
    ("forward", "title", "1.0.1"),
    ("forward", "description", "1.0.1"),
    ("forward", "x-pg-type", "1.0.1"),
    ("forward", "add optional", "1.1.0"),
    ("forward", "add required", "1.1.0"),
    ("forward", "mark required", "1.1.0"),
    ("forward", "remove optional", ("#/properties/note", "property-constrained")),
    ("forward", "change type", ("#/properties/order_number/type", "type-narrowed")),
    ("compatible", "title", "1.0.1"),
    ("compatible", "description", "1.0.1"),
    ("compatible", "x-pg-type", "1.0.1"),
    ("compatible", "add optional", "1.1.0"),
    ("compatible", "add required", ("#/required", "required-added")),
    ("compatible", "mark required", ("#/required", "required-added")),
    ("compatible", "remove optional", ("#/properties/note", "property-rejected")),
    ("compatible", "change type", ("#/properties/order_number/type", "type-narrowed")),
    ("none", "title", "1.0.1"),
    ("none", "x-pg-type", "1.0.1"),
    ("none", "add optional", "1.1.0"),
    ("none", "add required", "2.0.0"),
    ("none", "remove optional", "2.0.0"),
    ("none", "change type", "2.0.0"),
]


def _event_type(name: str, mode: str, schema: dict[str, Any]) -> dict[str, Any]:
    body = business_event_type(
        name,
        compatibility_mode=mode,
        partition_strategy="random",
        schema={"type": "json_schema", "schema": json.dumps(schema)},
    )
    del body["partition_key_fields"]
    return body


@pytest.mark.parametrize(
    ("mode", "change", "expected"), MATRIX, ids=[f"{m}-{c}" for m, c, _ in MATRIX]
)
def test_evolution_matrix(
    client: httpx.Client, unique_name, mode: str, change: str, expected: str | tuple[str, str]
) -> None:
    name = unique_name("evo")
    assert client.post("/event-types", json=_event_type(name, mode, BASE)).status_code == 201
    response = client.put(f"/event-types/{name}", json=_event_type(name, mode, CHANGES[change]))
    if isinstance(expected, str):
        assert response.status_code == 200, response.text
        schema = client.get(f"/event-types/{name}").json()["schema"]
        assert schema["version"] == expected
        assert json.loads(schema["schema"]) == CHANGES[change]
    else:
        path, rule = expected
        detail = assert_problem(response, 422, path)
        assert f"[{rule}]" in detail
        assert client.get(f"/event-types/{name}").json()["schema"]["version"] == "1.0.0"


def test_unchanged_schema_keeps_its_version(client: httpx.Client, unique_name) -> None:
    name = unique_name("same")
    assert client.post("/event-types", json=_event_type(name, "forward", BASE)).status_code == 201
    # Clients PUT back what they GET, read-only fields (versions, timestamps) included.
    fetched = client.get(f"/event-types/{name}").json()
    response = client.put(f"/event-types/{name}", json={**fetched, "owning_application": "b"})
    assert response.status_code == 200, response.text
    assert client.get(f"/event-types/{name}").json()["owning_application"] == "b"
    listed = client.get(f"/event-types/{name}/schemas").json()
    assert [s["version"] for s in listed["items"]] == ["1.0.0"]


def test_schema_versions_listing_and_lookup(client: httpx.Client, unique_name) -> None:
    name = unique_name("versions")
    assert client.post("/event-types", json=_event_type(name, "none", BASE)).status_code == 201
    for change in ("title", "add optional", "change type"):
        response = client.put(
            f"/event-types/{name}", json=_event_type(name, "none", CHANGES[change])
        )
        assert response.status_code == 200, response.text
    listed = client.get(f"/event-types/{name}/schemas")
    assert listed.status_code == 200
    body = listed.json()
    validate("EventTypeSchema", body["items"], array=True)
    validate("PaginationLinks", body["_links"])
    assert [s["version"] for s in body["items"]] == ["2.0.0", "1.1.0", "1.0.1", "1.0.0"]
    assert body["_links"] == {}

    page = client.get(f"/event-types/{name}/schemas", params={"limit": 2, "offset": 1}).json()
    assert [s["version"] for s in page["items"]] == ["1.1.0", "1.0.1"]
    assert page["_links"]["next"]["href"] == f"/event-types/{name}/schemas?offset=3&limit=2"
    assert page["_links"]["prev"]["href"] == f"/event-types/{name}/schemas?offset=0&limit=2"

    latest = client.get(f"/event-types/{name}/schemas/latest")
    assert latest.status_code == 200
    validate("EventTypeSchema", latest.json())
    assert latest.json()["version"] == "2.0.0"
    first = client.get(f"/event-types/{name}/schemas/1.0.0").json()
    assert json.loads(first["schema"]) == BASE

    assert_problem(client.get(f"/event-types/{name}/schemas/9.9.9"), 404, "9.9.9")
    assert_problem(client.get(f"/event-types/{name}/schemas", params={"limit": 0}), 400, "limit")
    assert_problem(client.get(f"/event-types/{name}/schemas", params={"offset": -1}), 400, "offset")
    missing = unique_name("missing")
    assert_problem(client.get(f"/event-types/{missing}/schemas"), 404, missing)
    assert_problem(client.get(f"/event-types/{missing}/schemas/latest"), 404, missing)


def test_events_validate_against_the_new_schema_and_carry_its_version(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("evolving")
    assert (
        client.post("/event-types", json=_event_type(name, "compatible", BASE)).status_code == 201
    )

    def publish(**fields: Any) -> httpx.Response:
        metadata = {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00Z"}
        return client.post(f"/event-types/{name}/events", json=[{**fields, "metadata": metadata}])

    assert publish(order_number="1", amount=3).status_code == 422  # undeclared in compatible mode
    assert publish(order_number="1").status_code == 200
    evolved = client.put(
        f"/event-types/{name}", json=_event_type(name, "compatible", CHANGES["add optional"])
    )
    assert evolved.status_code == 200
    assert publish(order_number="2", amount=3).status_code == 200
    topic, partitions = topic_of(broker_dsn, name)
    versions = [
        s.event["metadata"]["version"] for s in read_all(kafka_bootstrap, topic, partitions)
    ]
    assert versions == ["1.0.0", "1.1.0"]
