"""The OpenSchema spec's request and response examples, replayed in the order a user sends them.

Where an example contradicts itself (the subject-update example posts to
``test-value`` with ``"subject": "test-topic"`` in the body) the URL names the
subject; times are the server's own. The registration example's ``PB`` definition is a
JSON list of fields, which no Protocol Buffers compiler takes: the replay sends the same
fields as the .proto text a ``PB`` definition is (registry/README.md, "Protocol Buffers").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

OPENSCHEMA = "application/vnd.openschema.v1+json"
HEADERS = {"content-type": OPENSCHEMA, "accept": OPENSCHEMA}

# 7.2.5 request
SUBJECT_UPDATE = {
    "subject": "test-topic",
    "namespace": "org.apache.rocketmq",
    "tenant": "messaging/rocketmq",
    "app": "rocketmq",
    "description": "rocketmq user information",
    "compatibility": "NONE",
    "status": "deprecated",
}


def payment(amount_type: str) -> str:
    """7.2.6's fields, id (string) and amount, as a .proto file."""
    return (
        'syntax = "proto3";\nmessage Payment {\n  string id = 1;\n'
        f"  {amount_type} amount = 2;\n}}\n"
    )


# 7.2.6 request
REGISTRATION = {"serialization": "PB", "schemaDefinition": payment("double")}
TIMESTAMP = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}$"


@pytest.fixture(scope="module")
def client(registry_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry_url, headers=HEADERS, timeout=30) as http:
        yield http


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(OPENSCHEMA)
    return response.json()


def test_replay(client: httpx.Client) -> None:
    # 7.2.5 create the subject (curl -X POST .../subjects/test-value/)
    created = ok(client.post("/subjects/test-value/", json=SUBJECT_UPDATE))
    expected = {k: v for k, v in SUBJECT_UPDATE.items() if k != "subject"}
    assert {k: created[k] for k in expected} == expected
    assert created["subject"] == "test-value"
    assert re.match(TIMESTAMP, created["createdTime"])
    assert re.match(TIMESTAMP, created["lastModifiedTime"])

    # 7.2.6 register a schema -> {"id": "10"}
    registered = ok(client.post("/subjects/test-value/versions", json=REGISTRATION))
    assert set(registered) == {"id"} and registered["id"].isdigit()
    schema_id = registered["id"]

    # 7.1.1 the schema by id (the example's curl says /schema/20; the URL table /schemas/{id})
    by_id = {"version": 1, "id": schema_id, **REGISTRATION}
    assert ok(client.get(f"/schemas/{schema_id}")) == by_id
    assert ok(client.get(f"/schema/{schema_id}")) == by_id

    # 7.1.2 -> {"subject":"test-topic","version":1}
    assert ok(client.get(f"/schemas/{schema_id}/subject")) == {
        "subject": "test-value",
        "version": 1,
    }

    # 7.2.1 -> {"name": ["subject1", "subject2"]}
    assert ok(client.get("/subjects")) == {"name": ["test-value"]}

    # 7.2.2 the subject's definition
    subject = ok(client.get("/subjects/test-value"))
    # The first schema's serialization, and the Buf category PB versions are checked with.
    assert subject == {**created, "format": "PB", "protobufCategory": "WIRE_JSON"}

    # 7.2.3 -> { "version": [1, 2, 3, 4] }
    assert ok(client.get("/subjects/test-value/versions")) == {"version": [1]}

    # 7.2.4 subject metadata with the schema, by version and as latest
    by_version = ok(client.get("/subjects/test-value/versions/1/schema"))
    assert by_version == {**subject, "schema": {"version": 1, "id": schema_id, **REGISTRATION}}
    assert ok(client.get("/subjects/test-value/versions/latest/schema")) == by_version

    # 7.3.1 -> {"isCompatible": true} (mode NONE; the spec's body, a JSON Schema, is no .proto)
    answer = ok(
        client.post(
            "/compatibility/subjects/test-value/versions/latest",
            json={"schema": payment("float")},
        )
    )
    assert answer["isCompatible"] is True

    # 7.3.2 / 7.3.3 -> {"compatibility": "NONE"}
    assert ok(client.get("/config/test-value")) == {"compatibility": "NONE"}
    assert ok(client.put("/config/test-value", json={"compatibility": "NONE"})) == {
        "compatibility": "NONE"
    }

    # 7.2.8 -> { "version": 1 }
    assert ok(client.delete("/subjects/test-value/versions/1")) == {"version": 1}


def test_delete_subject_answers_every_version(client: httpx.Client) -> None:
    # 7.2.7 -> { "version": [1, 2, 3, 4] }
    client.post("/subjects/test-delete", json={**SUBJECT_UPDATE, "subject": "test-delete"})
    for amount_type in ("double", "float", "int32", "int64"):
        ok(
            client.post(
                "/subjects/test-delete/versions",
                json={**REGISTRATION, "schemaDefinition": payment(amount_type)},
            )
        )
    assert ok(client.delete("/subjects/test-delete")) == {"version": [1, 2, 3, 4]}


def test_error_body_shape(client: httpx.Client) -> None:
    # Chapter 4: {"errorCode": ..., "errorMessage": "schema info cannot be empty"}
    response = client.post("/subjects/test-empty/versions", json={"serialization": "PB"})
    assert response.status_code == 422
    assert response.json() == {
        "errorCode": 42201,
        "errorMessage": "schema info cannot be empty: send schemaDefinition",
    }
