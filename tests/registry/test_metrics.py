"""The registry's /metrics: registrations, lookups, compatibility verdicts, refusals."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from changebroker.stack.processes import wait_until
from tests.support.metrics import scrape

P = "changebroker_registry"
OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}}
# BACKWARD: a reader of the new schema must read every old document; "a" as a number cannot.
NARROWED = {"type": "object", "properties": {"a": {"type": "number"}}}


def test_metrics_count_what_the_registry_did(
    registry_url: str, unique_name: Callable[[str], str]
) -> None:
    subject = unique_name("metrics")

    def listening() -> bool:
        # Answers are kept (and counted as hits or misses) once the registry listens for
        # changes, which a loaded machine can delay past the registry's start.
        httpx.get(f"{registry_url}/subjects", timeout=30)
        return scrape(f"{registry_url}/metrics").total(f"{P}_cache_requests_total") > 0

    wait_until(listening, timeout=30, what="the registry to listen for changes")
    before = scrape(f"{registry_url}/metrics")
    with httpx.Client(base_url=registry_url, timeout=30) as client:

        def register(definition: object) -> httpx.Response:
            body = {"serialization": "json", "schemaDefinition": definition}
            return client.post(f"/subjects/{subject}/versions", json=body)

        assert register(OBJECT).status_code == 200
        assert register(OBJECT).status_code == 200  # the same definition: its id again
        assert register(NARROWED).status_code == 409
        check = client.post(
            f"/compatibility/subjects/{subject}/versions/latest", json={"schema": NARROWED}
        )
        assert check.json()["isCompatible"] is False
        assert client.get(f"/subjects/{subject}/versions").status_code == 200
        # The same read again: from memory, counted as a lookup and a cache hit.
        assert client.get(f"/subjects/{subject}/versions").status_code == 200
        assert client.get("/subjects/no-such-subject/versions").status_code == 404
    after = scrape(f"{registry_url}/metrics")

    def grew(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    assert grew(f"{P}_registrations_total", result="new") == 1
    assert grew(f"{P}_registrations_total", result="existing") == 1
    assert grew(f"{P}_compatibility_checks_total", verdict="incompatible") == 2
    assert grew(f"{P}_lookups_total", kind="versions") == 3
    assert grew(f"{P}_cache_requests_total", result="hit") >= 1
    assert grew(f"{P}_refusals_total", code="40901") == 1
    assert grew(f"{P}_refusals_total", code="40401") == 1
    # Request durations by route template (never the raw path) and status.
    route = "/subjects/{subject}/versions"
    duration = "http_server_request_duration_seconds_count"
    assert grew(duration, route=route, method="POST", status="200") == 2
    assert grew(duration, route=route, method="POST", status="409") == 1
    assert not any(subject in dict(labels).get("route", "") for _, labels in after.samples)
    assert "process_cpu_seconds" in after.families
