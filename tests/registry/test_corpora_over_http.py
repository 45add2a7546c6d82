"""Every schema of the Avro and JSON Schema corpora through the real API on Postgres: register
and check answer a verdict or say what is wrong with the schema, never 500; what registers
comes back as it was sent."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.registry import avro_corpus, json_corpus

# (serialization, old, new) for every pair of both corpora.
PAIRS: list[tuple[str, Any, Any]] = [("avro", p.old, p.new) for p in avro_corpus.corpus()]
PAIRS += [("json", p.writer, p.reader) for p in json_corpus.corpus()]
CHUNK = 100


@pytest.fixture(scope="module")
def client(registry_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry_url, timeout=60) as http:
        yield http


def _answered(response: httpx.Response, *allowed: int) -> httpx.Response:
    assert response.status_code in allowed, response.text
    return response


def _round_trip(client: httpx.Client, registered: httpx.Response, definition: Any) -> None:
    stored = client.get(f"/schemas/{registered.json()['id']}").json()["schemaDefinition"]
    assert json.dumps(stored) == json.dumps(definition)


def _pair_through_the_api(client: httpx.Client, subject: str, pair: tuple[str, Any, Any]) -> None:
    serialization, old, new = pair
    meta = {"tenant": "t", "namespace": "n", "status": "released", "compatibility": "FULL"}
    _answered(client.post(f"/subjects/{subject}", json=meta), 200)
    versions = f"/subjects/{subject}/versions"
    first = _answered(
        client.post(versions, json={"serialization": serialization, "schemaDefinition": old}),
        200,
        422,
    )
    if first.status_code != 200:
        return
    _round_trip(client, first, old)
    check = f"/compatibility/subjects/{subject}/versions/latest"
    verdict = _answered(client.post(check, json={"schema": new}), 200, 422)
    second = _answered(
        client.post(versions, json={"serialization": serialization, "schemaDefinition": new}),
        200,
        409,
        422,
    )
    if verdict.status_code == 200:
        # The check and the registration agree: compatible exactly when it registers.
        assert verdict.json()["isCompatible"] == (second.status_code == 200), new
    if second.status_code == 200:
        _round_trip(client, second, new)


@pytest.mark.parametrize("start", range(0, len(PAIRS), CHUNK))
def test_register_and_check_never_fail(
    client: httpx.Client, unique_name: Callable[[str], str], start: int
) -> None:
    chunk = PAIRS[start : start + CHUNK]
    subjects = [unique_name(f"corpus{start + offset}") for offset in range(len(chunk))]
    # Several at once: each pair is its own subject, and the API waits mostly on Postgres.
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(_pair_through_the_api, [client] * len(chunk), subjects, chunk))
