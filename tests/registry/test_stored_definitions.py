"""Definitions come back as they were registered, U+0000 included, and old rows survive the
migration that made that possible."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest

from changebroker import pg
from changebroker.registry.app import create_app
from changebroker.stack.run import serve_in_thread

# The specification's way to write four zero bytes as a fixed default.
ZEROS: dict[str, Any] = {
    "type": "record",
    "name": "Frame",
    "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 4},
         "default": "\u0000\u0000\u0000\u0000"},
        {"name": "tag", "type": "bytes", "default": "\u0000\u00ff"},
    ],
}  # fmt: skip


@pytest.fixture
def subject(unique_name: Callable[[str], str]) -> str:
    return unique_name("stored")


def register(client: httpx.Client, subject: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(f"/subjects/{subject}/versions", json=body)


def test_zero_bytes_in_a_default_round_trip(client: httpx.Client, subject: str) -> None:
    as_object = register(client, subject, {"serialization": "avro", "schemaDefinition": ZEROS})
    assert as_object.status_code == 200, as_object.text
    stored = client.get(f"/schemas/{as_object.json()['id']}").json()["schemaDefinition"]
    assert json.dumps(stored) == json.dumps(ZEROS)  # same keys in the same order, same bytes

    # Sent as text: the very same string comes back, and it is the same definition.
    text = json.dumps(ZEROS, indent=1)
    again = register(client, subject, {"serialization": "avro", "schemaDefinition": text})
    assert again.json() == as_object.json()
    other = f"{subject}_text"
    as_text = register(client, other, {"serialization": "avro", "schemaDefinition": text})
    assert client.get(f"/schemas/{as_text.json()['id']}").json()["schemaDefinition"] == text

    # A later version that still reads them is checked against the stored one.
    evolved = {**ZEROS, "fields": [*ZEROS["fields"], {"name": "n", "type": "int", "default": 0}]}
    assert register(client, subject, {"serialization": "avro", "schemaDefinition": evolved}).json()
    latest = client.get(f"/subjects/{subject}/versions/latest/schema").json()
    assert latest["schema"]["version"] == 2


def test_unchecked_formats_keep_any_text(client: httpx.Client, subject: str) -> None:
    body = {"serialization": "user-defined", "schemaDefinition": "struct A {\u0000 b: bytes }"}
    registered = register(client, subject, body)
    assert registered.status_code == 200, registered.text
    schema = client.get(f"/schemas/{registered.json()['id']}").json()
    assert schema["schemaDefinition"] == body["schemaDefinition"]


@pytest.mark.parametrize(
    "body, said",
    [
        (
            {"serialization": "user-defined", "schemaDefinition": "a", "comment": "x\u0000"},
            "U+0000",
        ),
        ({"serialization": "json", "schemaDefinition": {"title": "\ud800"}}, "surrogate"),
    ],
)
def test_text_postgres_cannot_hold_is_refused(
    client: httpx.Client, subject: str, body: dict[str, Any], said: str
) -> None:
    refused = client.post(
        f"/subjects/{subject}/versions",
        content=json.dumps(body),  # ASCII escapes: the lone surrogate travels as \ud800
        headers={"Content-Type": "application/json"},
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errorCode"] == 42201
    assert said in refused.json()["errorMessage"]


@pytest.mark.parametrize(
    "body, said",
    [
        ({"serialization": "json", "schemaDefinition": {"$schema": 5}}, "$schema"),
        (
            {
                "serialization": "avro",
                "schemaDefinition": {
                    "type": "record",
                    "name": "R",
                    "fields": [{"name": "a", "type": "int", "order": {"by": "a"}}],
                },
            },
            "#/fields/0/order",
        ),
    ],
)
def test_values_of_the_wrong_kind_are_refused_not_crashed(
    client: httpx.Client, subject: str, body: dict[str, Any], said: str
) -> None:
    refused = client.post(f"/subjects/{subject}/versions", json=body)
    assert refused.status_code == 422, refused.text
    assert said in refused.json()["errorMessage"]


def test_a_version_invalid_by_todays_rules_is_a_409_not_a_500(
    client: httpx.Client, registry_dsn: str, subject: str
) -> None:
    first = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    second = {**first, "fields": [{"name": "a", "type": "int", "default": 1}]}
    ids = []
    for definition in (first, second):
        body = {"serialization": "avro", "schemaDefinition": definition}
        registered = register(client, subject, body)
        assert registered.status_code == 200, registered.text
        ids.append(int(registered.json()["id"]))
    # As registered before int defaults were held to 32 bits.
    stale = {**first, "fields": [{"name": "a", "type": "int", "default": 2**40}]}
    with psycopg.connect(registry_dsn) as conn:
        conn.execute(
            "UPDATE registry_schemas SET definition = %s::json, canonical = %s WHERE id = %s",
            (json.dumps(stale), json.dumps(stale), ids[1]),
        )
    third = {**first, "fields": [{"name": "a", "type": "long"}]}
    refused = register(client, subject, {"serialization": "avro", "schemaDefinition": third})
    assert refused.status_code == 409, refused.text
    assert [v["rule"] for v in refused.json()["violations"]] == ["schema-invalid"]
    # Replaying the history for a new mode meets it as the newer schema of a pair.
    changed = client.put(f"/config/{subject}", json={"compatibility": "FORWARD"})
    assert changed.status_code == 409, changed.text
    assert [v["rule"] for v in changed.json()["violations"]] == ["schema-invalid"]
    assert client.put(f"/config/{subject}", json={"compatibility": "NONE"}).status_code == 200
    assert register(client, subject, {"serialization": "avro", "schemaDefinition": third}).json()


def test_migration_keeps_definitions_stored_as_jsonb(pg_server_dsn: str) -> None:
    with pg.scratch_database(pg_server_dsn, "t_registry_migration") as dsn:
        pg.migrate(dsn, "registry", until=1)
        definitions: list[Any] = ['{"type": "string"}', {"type": "object", "title": "é"}]
        with psycopg.connect(dsn) as conn:
            subject_id = conn.execute(
                "INSERT INTO registry_subjects (subject, format, compatibility)"
                " VALUES ('old', 'JSON', 'NONE') RETURNING id"
            ).fetchone()
            assert subject_id is not None
            for version, definition in enumerate(definitions, 1):
                conn.execute(
                    "INSERT INTO registry_schemas (subject_id, version, serialization,"
                    " definition, canonical) VALUES (%s, %s, 'json', %s::jsonb, %s)",
                    (subject_id[0], version, json.dumps(definition), json.dumps(definition)),
                )
        with (
            serve_in_thread(create_app(dsn)) as url,
            httpx.Client(base_url=url, timeout=30) as client,
        ):
            for version, definition in enumerate(definitions, 1):
                answer = client.get(f"/subjects/old/versions/{version}/schema").json()
                assert answer["schema"]["schemaDefinition"] == definition
            zeros = {"serialization": "avro", "schemaDefinition": ZEROS}
            assert register(client, "new", zeros).status_code == 200
