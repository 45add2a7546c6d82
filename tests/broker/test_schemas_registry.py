"""Event type schemas are registry subjects: what the broker stores, the registry API serves.

The broker and the registry share one metadata database (as ``changebroker up``
runs them), so a registry app on the broker's database sees every subject the
broker writes, in the transaction that changed the event type.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from changebroker import pg
from changebroker.broker.app import create_app
from changebroker.broker.event_types.store import subject_key
from changebroker.broker.settings import Settings
from changebroker.registry.app import create_app as create_registry_app
from changebroker.registry.store import register_in
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.event_types import business_event_type

TENANT = {"tenant": "changebroker", "namespace": "event-types"}
FIRST = '{ "properties": { "order_number": { "type": "string" } } }'
SECOND = json.dumps(
    {"properties": {"order_number": {"type": "string"}, "amount": {"type": "number"}}}
)


@pytest.fixture(scope="module")
def registry(broker_dsn: str, broker_url: str) -> Iterator[httpx.Client]:
    """The registry API on the broker's metadata database (after the broker migrated it)."""
    with (
        serve_in_thread(create_registry_app(broker_dsn)) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        yield http


def _with_schema(name: str, schema: str) -> dict[str, object]:
    return business_event_type(name, schema={"type": "json_schema", "schema": schema})


def _created(client: httpx.Client, name: str, schema: str = FIRST) -> str:
    """``name``, created as an event type with ``schema``."""
    assert client.post("/event-types", json=_with_schema(name, schema)).status_code == 201
    return name


def test_event_type_schemas_are_a_registry_subject(
    client: httpx.Client, registry: httpx.Client, unique_name
) -> None:
    name = _created(client, unique_name("subject"))
    assert client.put(f"/event-types/{name}", json=_with_schema(name, SECOND)).status_code == 200

    assert name in registry.get("/subjects").json()["name"]
    assert name in registry.get("/subjects", params=TENANT).json()["name"]
    subject = registry.get(f"/subjects/{name}").json()
    assert {k: subject[k] for k in ("tenant", "namespace", "compatibility", "format")} == {
        **TENANT,
        "compatibility": "NONE",
        "format": "JSON",
    }
    assert registry.get(f"/subjects/{name}/versions").json() == {"version": [1, 2]}
    latest = registry.get(f"/subjects/{name}/versions/latest/schema").json()["schema"]
    first = registry.get(f"/subjects/{name}/versions/1/schema").json()["schema"]
    # The schema text exactly as the event type was given it, spacing included.
    assert (first["schemaDefinition"], latest["schemaDefinition"]) == (FIRST, SECOND)
    assert registry.get(f"/schemas/{latest['id']}/subject").json() == {
        "subject": name,
        "version": 2,
    }

    # The Nakadi side keeps its shape: semantic versions, the text as a string.
    listed = client.get(f"/event-types/{name}/schemas").json()["items"]
    assert [(s["version"], s["schema"], s["type"]) for s in listed] == [
        ("1.1.0", SECOND, "json_schema"),
        ("1.0.0", FIRST, "json_schema"),
    ]
    assert client.get(f"/event-types/{name}/schemas/1.0.0").json()["schema"] == FIRST
    assert client.get(f"/event-types/{name}").json()["schema"]["version"] == "1.1.0"


def test_a_change_without_a_new_schema_registers_nothing(
    client: httpx.Client, registry: httpx.Client, unique_name
) -> None:
    name = _created(client, unique_name("same"))
    renamed = {**_with_schema(name, FIRST), "owning_application": "another-app"}
    assert client.put(f"/event-types/{name}", json=renamed).status_code == 200
    assert registry.get(f"/subjects/{name}/versions").json() == {"version": [1]}


def test_deleting_an_event_type_deletes_its_subject(
    client: httpx.Client, registry: httpx.Client, unique_name
) -> None:
    name = _created(client, unique_name("gone"))
    assert registry.get(f"/subjects/{name}").status_code == 200
    assert client.delete(f"/event-types/{name}").status_code == 200
    # The registry drops what it kept when the delete's notification arrives (registry
    # README "Answers from memory"): another process may answer from memory until then.
    wait_until(
        lambda: registry.get(f"/subjects/{name}").status_code == 404,
        timeout=10,
        what="the registry to hear of the delete",
    )
    missing = registry.get(f"/subjects/{name}")
    assert (missing.status_code, missing.json()["errorCode"]) == (404, 40401)
    # The name is free again, in both.
    _created(client, name, SECOND)
    assert registry.get(f"/subjects/{name}/versions").json() == {"version": [1]}


def test_the_registry_refuses_to_delete_what_an_event_type_uses(
    client: httpx.Client, registry: httpx.Client, unique_name
) -> None:
    name = _created(client, unique_name("kept"))
    for path in (f"/subjects/{name}/versions/1", f"/subjects/{name}"):
        refused = registry.delete(path)
        assert refused.status_code == 409, refused.text
        assert refused.json()["errorCode"] == 40902
        assert "DELETE /event-types" in refused.json()["errorMessage"]
    assert client.get(f"/event-types/{name}/schemas/1.0.0").json()["schema"] == FIRST


def test_a_foreign_subject_of_the_same_name_is_a_conflict(
    client: httpx.Client, registry: httpx.Client, broker_dsn: str, unique_name
) -> None:
    name = unique_name("taken")
    # The registry API creates nothing in the broker's namespace: such a subject is one written
    # before it refused that.
    schema = {"serialization": "json", "schemaDefinition": {"type": "object"}}
    refused = registry.post(f"/subjects/{name}/versions", params=TENANT, json=schema)
    assert (refused.status_code, refused.json()["errorCode"]) == (409, 40902)
    asyncio.run(_registered_in_the_brokers_namespace(broker_dsn, name, schema))
    refused = client.post("/event-types", json=_with_schema(name, FIRST))
    assert refused.status_code == 409, refused.text
    assert "already has schemas" in refused.json()["detail"]
    # Nothing of the event type was stored, the subject is as it was.
    assert client.get(f"/event-types/{name}").status_code == 404
    assert registry.get(f"/subjects/{name}/versions").json() == {"version": [1]}


async def _registered_in_the_brokers_namespace(
    dsn: str, name: str, schema: Mapping[str, Any]
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, row_factory=dict_row) as conn:
        await register_in(conn, subject_key(name), schema)


def test_migration_moves_schema_rows_into_the_registry(
    pg_server_dsn: str, kafka_bootstrap: str, unique_name
) -> None:
    database = f"t_broker_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    dsn = pg.with_database(pg_server_dsn, database)
    try:
        # An event type with three versions, stored as the broker did before migration 003.
        pg.migrate(dsn, "registry")
        pg.migrate(dsn, "broker", until=2)
        name = unique_name("migrated")
        texts = [FIRST, SECOND, '{"title": "orders", "properties": {"é": {"type": "string"}}}']
        with psycopg.connect(dsn) as conn:
            stored = business_event_type(name, compatibility_mode="none")
            del stored["schema"]
            conn.execute(
                "INSERT INTO broker_event_types (name, body, topic, partitions)"
                " VALUES (%s, %s, %s, 1)",
                (name, json.dumps(stored), f"t-{name}"),
            )
            for seq, (version, text) in enumerate(
                zip(("1.0.0", "1.1.0", "2.0.0"), texts, strict=True), 1
            ):
                conn.execute(
                    "INSERT INTO broker_schemas (event_type, seq, version, type, schema)"
                    " VALUES (%s, %s, %s, 'json_schema', %s)",
                    (name, seq, version, text),
                )

        settings = Settings(pg_dsn=dsn, kafka_bootstrap=kafka_bootstrap)
        with (
            serve_in_thread(create_app(settings)) as broker_url,
            serve_in_thread(create_registry_app(dsn)) as registry_url,
            httpx.Client(base_url=broker_url) as broker,
            httpx.Client(base_url=registry_url) as registry,
        ):
            items = broker.get(f"/event-types/{name}/schemas").json()["items"]
            assert [(s["version"], s["schema"]) for s in items] == [
                ("2.0.0", texts[2]),
                ("1.1.0", texts[1]),
                ("1.0.0", texts[0]),
            ]
            assert broker.get(f"/event-types/{name}").json()["schema"]["version"] == "2.0.0"
            assert registry.get(f"/subjects/{name}/versions").json() == {"version": [1, 2, 3]}
            # Moved definitions are recognised: registering one again gives its id back.
            for number, text in enumerate(texts, 1):
                again = registry.post(
                    f"/subjects/{name}/versions",
                    json={"serialization": "json", "schemaDefinition": json.loads(text)},
                )
                moved = registry.get(f"/subjects/{name}/versions/{number}/schema").json()
                assert again.json() == {"id": moved["schema"]["id"]}
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
