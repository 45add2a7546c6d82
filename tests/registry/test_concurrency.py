"""Many clients registering into one subject at once, through two registry instances."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from changebroker.registry.app import create_app
from changebroker.stack.run import serve_in_thread

CLIENTS = 12
DEFINITIONS = 30  # each sent twice, by different clients


@pytest.fixture(scope="module")
def second_instance(registry_dsn: str, registry_url: str) -> Iterator[str]:
    """Another registry on the same database, as behind a load balancer."""
    with serve_in_thread(create_app(registry_dsn)) as url:
        yield url


def definition(index: int) -> dict[str, Any]:
    # Compatible with one another under BACKWARD: only the annotation differs.
    return {"type": "object", "properties": {"id": {"type": "string"}}, "title": f"v{index}"}


def test_concurrent_registrations_give_versions_1_to_n_and_one_id_per_definition(
    registry_url: str, second_instance: str
) -> None:
    subject = "concurrent"
    jobs = [i for i in range(DEFINITIONS)] * 2
    start = threading.Barrier(CLIENTS)
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def client_work(client_index: int) -> None:
        base = registry_url if client_index % 2 == 0 else second_instance
        mine = jobs[client_index::CLIENTS]
        with httpx.Client(base_url=base, timeout=60) as http:
            start.wait()
            for index in mine:
                body = {"serialization": "json", "schemaDefinition": definition(index)}
                response = http.post(f"/subjects/{subject}/versions", json=body)
                assert response.status_code == 200, response.text
                with lock:
                    results.append((index, response.json()["id"]))

    with ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(client_work, c) for c in range(CLIENTS)]:
            future.result()

    ids_by_definition: dict[int, set[str]] = {}
    for index, schema_id in results:
        ids_by_definition.setdefault(index, set()).add(schema_id)
    assert all(len(ids) == 1 for ids in ids_by_definition.values()), ids_by_definition
    assert len(ids_by_definition) == DEFINITIONS

    with httpx.Client(base_url=registry_url) as http:
        versions = http.get(f"/subjects/{subject}/versions").json()["version"]
        assert versions == list(range(1, DEFINITIONS + 1))
        seen_ids = set()
        for version in versions:
            schema = http.get(f"/subjects/{subject}/versions/{version}/schema").json()["schema"]
            seen_ids.add(schema["id"])
            index = int(schema["schemaDefinition"]["title"][1:])
            assert ids_by_definition[index] == {schema["id"]}
        assert len(seen_ids) == DEFINITIONS
