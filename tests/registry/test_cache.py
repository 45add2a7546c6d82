"""Answers from memory: by id cacheable for good, dropped whenever any writer changes a row."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from changebroker.registry.app import create_app
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.metrics import scrape

SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}}


@pytest.fixture(scope="module")
def client(registry_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry_url, timeout=30) as http:
        yield http


@pytest.fixture
def subject(unique_name: Callable[[str], str]) -> str:
    return unique_name("cached")


def _register(client: httpx.Client, subject: str, definition: dict[str, Any]) -> str:
    body = {"serialization": "json", "schemaDefinition": definition}
    response = client.post(f"/subjects/{subject}/versions", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def test_an_answer_by_id_is_immutable_and_revalidates_to_304(
    client: httpx.Client, subject: str
) -> None:
    schema_id = _register(client, subject, SCHEMA)
    first = client.get(f"/schemas/{schema_id}")
    again = client.get(f"/schemas/{schema_id}")
    assert first.content == again.content and first.json()["schemaDefinition"] == SCHEMA
    assert first.headers["etag"] == again.headers["etag"]
    assert first.headers["cache-control"] == "max-age=31536000, immutable"
    etag = first.headers["etag"]
    unchanged = client.get(f"/schemas/{schema_id}", headers={"if-none-match": etag})
    assert (unchanged.status_code, unchanged.content) == (304, b"")
    assert unchanged.headers["etag"] == first.headers["etag"]
    other = client.get(f"/schemas/{schema_id}", headers={"if-none-match": '"other"'})
    assert other.status_code == 200 and other.content == first.content
    # Answers by subject may change: an ETag to revalidate, never "immutable".
    latest = client.get(f"/subjects/{subject}/versions/latest/schema")
    assert "etag" in latest.headers and "cache-control" not in latest.headers


def test_a_write_of_another_process_is_seen(
    client: httpx.Client, registry_dsn: str, subject: str
) -> None:
    """The broker writes subjects on its own connection; the registry must not answer past it."""
    _register(client, subject, SCHEMA)
    assert client.get(f"/subjects/{subject}").json()["compatibility"] == "BACKWARD"
    with psycopg.connect(registry_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE registry_subjects SET compatibility = 'NONE' WHERE subject = %s", (subject,)
        )
    wait_until(
        lambda: client.get(f"/subjects/{subject}").json()["compatibility"] == "NONE",
        timeout=10,
        what="the registry to drop its answer",
    )
    with psycopg.connect(registry_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM registry_subjects WHERE subject = %s", (subject,))
    wait_until(
        lambda: client.get(f"/subjects/{subject}/versions/1/schema").status_code == 404,
        timeout=10,
        what="the registry to forget the deleted subject",
    )


def test_another_registry_process_reads_this_ones_writes(
    client: httpx.Client, registry_dsn: str, subject: str
) -> None:
    _register(client, subject, SCHEMA)
    with (
        serve_in_thread(create_app(registry_dsn)) as url,
        httpx.Client(base_url=url, timeout=30) as other,
    ):
        assert other.get(f"/subjects/{subject}/versions").json() == {"version": [1]}
        assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}
        _register(other, subject, {**SCHEMA, "title": "v2"})
        # The writer's own answers at once; the other process's once the notification is in.
        assert other.get(f"/subjects/{subject}/versions").json() == {"version": [1, 2]}
        wait_until(
            lambda: client.get(f"/subjects/{subject}/versions").json() == {"version": [1, 2]},
            timeout=10,
            what="the first registry to see the second's registration",
        )
        check = {"schema": {**SCHEMA, "title": "v3"}}
        verdict = client.post(f"/compatibility/subjects/{subject}/versions/latest", json=check)
        assert verdict.json() == {"isCompatible": True, "violations": []}


def test_a_kept_verdict_goes_when_the_subject_changes(client: httpx.Client, subject: str) -> None:
    _register(client, subject, SCHEMA)
    narrower = {"schema": {**SCHEMA, "required": ["id"]}}  # BACKWARD: old data may lack "id"
    path = f"/compatibility/subjects/{subject}/versions/latest"

    def verdict() -> bool:
        answer = client.post(path, json=narrower)
        assert answer.status_code == 200, answer.text
        return bool(answer.json()["isCompatible"])

    assert verdict() is False
    assert verdict() is False  # kept
    assert client.put(f"/config/{subject}", json={"compatibility": "NONE"}).status_code == 200
    assert verdict() is True
    assert client.put(f"/config/{subject}", json={"compatibility": "BACKWARD"}).status_code == 200
    assert verdict() is False


def test_a_compatibility_check_keeps_what_was_kept(
    client: httpx.Client, registry_url: str, subject: str
) -> None:
    """A check writes nothing: the answers kept before it are still served from memory."""
    _register(client, subject, SCHEMA)
    versions = f"/subjects/{subject}/versions"
    hits = "changebroker_registry_cache_requests_total"
    client.get(versions)  # kept now
    before = scrape(f"{registry_url}/metrics").total(hits, result="hit")
    check = {"schema": {**SCHEMA, "title": "checked"}}
    assert client.post(f"/compatibility/subjects/{subject}/versions/latest", json=check).json()[
        "isCompatible"
    ]
    assert client.get(versions).json() == {"version": [1]}
    assert scrape(f"{registry_url}/metrics").total(hits, result="hit") == before + 1
