"""Subject, tenant and namespace names the registry refuses with its own 42201 on every
endpoint that takes one (authentication on): a NUL, which Postgres text cannot hold, any other
control character, and more than 255 characters. Nothing is stored for them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import psycopg
import pytest

from changebroker.auth import AuthSettings
from changebroker.registry.app import MAX_NAME_LENGTH, create_app
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import tokens_file

SCHEMA = {"serialization": "json", "schemaDefinition": {"type": "object"}}
SUBJECT = {"tenant": "t", "namespace": "n", "status": "released"}
CONFIG = {"compatibility": "NONE"}


@pytest.fixture(scope="module")
def registry(registry_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    path = tokens_file(
        tmp_path_factory.mktemp("auth") / "tokens.json",
        {"writer": ("schemas", ["registry.read", "registry.write"])},
    )
    authenticator = AuthSettings(mode="tokens", tokens_file=Path(path)).authenticator()
    with (
        serve_in_thread(create_app(registry_dsn, authenticator=authenticator)) as url,
        httpx.Client(
            base_url=url, timeout=30, headers={"authorization": "Bearer writer"}
        ) as client,
    ):
        yield client


def stored(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM registry_subjects), (SELECT count(*) FROM"
            " registry_schemas)"
        ).fetchone()
    assert row is not None
    return row


def every_call(client: httpx.Client, name: str) -> dict[str, httpx.Response]:
    """Each endpoint that names a subject, with ``name`` (percent-encoded) in the path."""
    subject = quote(name, safe="")
    return {
        "GET subject": client.get(f"/subjects/{subject}"),
        "POST subject": client.post(f"/subjects/{subject}", json=SUBJECT),
        "POST subject/": client.post(f"/subjects/{subject}/", json=SUBJECT),
        "DELETE subject": client.delete(f"/subjects/{subject}"),
        "GET versions": client.get(f"/subjects/{subject}/versions"),
        "POST versions": client.post(f"/subjects/{subject}/versions", json=SCHEMA),
        "GET version": client.get(f"/subjects/{subject}/versions/latest/schema"),
        "DELETE version": client.delete(f"/subjects/{subject}/versions/1"),
        "POST compatibility": client.post(
            f"/compatibility/subjects/{subject}/versions/latest", json={"schema": {}}
        ),
        "GET config": client.get(f"/config/{subject}"),
        "PUT config": client.put(f"/config/{subject}", json=CONFIG),
    }


@pytest.mark.parametrize(
    "name",
    [
        "a\x00b",
        "\x00",
        "a\x1bb",
        "a\rb",
        "a\x7fb",
        "a\x85b",
        "a\u2028b",
        "s" * (MAX_NAME_LENGTH + 1),
    ],
    ids=["nul", "only-nul", "esc", "cr", "del", "nel", "line-separator", "too-long"],
)
def test_a_subject_name_postgres_or_a_reader_cannot_take_is_42201_everywhere(
    registry: httpx.Client, registry_dsn: str, name: str
) -> None:
    before = stored(registry_dsn)
    for call, answer in every_call(registry, name).items():
        assert answer.status_code == 422, (call, answer.text)
        assert answer.json()["errorCode"] == 42201, call
    assert stored(registry_dsn) == before


@pytest.mark.parametrize("where", ["tenant", "namespace"])
def test_a_tenant_or_namespace_postgres_cannot_take_is_42201(
    registry: httpx.Client, registry_dsn: str, where: str
) -> None:
    before = stored(registry_dsn)
    for value in ("a\x00b", "\ud800", "t" * (MAX_NAME_LENGTH + 1)):
        if value != "\ud800":  # a query cannot carry a lone surrogate; a JSON body can
            for answer in (
                registry.get("/subjects", params={where: value}),
                registry.post("/subjects/named/versions", params={where: value}, json=SCHEMA),
            ):
                assert (answer.status_code, answer.json()["errorCode"]) == (422, 42201)
        body = json.dumps({**SUBJECT, where: value})  # as \ud800, which json= cannot encode
        answer = registry.post(
            "/subjects/named", content=body, headers={"content-type": "application/json"}
        )
        assert (answer.status_code, answer.json()["errorCode"]) == (422, 42201), answer.text
    assert stored(registry_dsn) == before


def test_the_longest_name_is_taken(registry: httpx.Client, unique_name) -> None:
    name = unique_name("long").ljust(MAX_NAME_LENGTH, "x")
    registered = registry.post(f"/subjects/{name}/versions", json=SCHEMA)
    assert registered.status_code == 200, registered.text
    assert registry.get(f"/subjects/{name}/versions").json() == {"version": [1]}
