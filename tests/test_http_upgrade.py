"""Every service answers the JDK's ``Upgrade: h2c`` requests as HTTP/1.1, body and all.

Each service runs as ``changebroker <service>`` does (a real process, its real HTTP
stack); the bridge's case is in ``tests/bridge/test_http_upgrade.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from changebroker.stack.processes import free_port
from changebroker.stack.run import CliProcess
from tests.support.event_types import business_event_type
from tests.support.raw_http import jdk_exchange


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[..., str]]:
    started: list[CliProcess] = []

    def start(
        args: list[str], ready_path: str, port: int, env: dict[str, str] | None = None
    ) -> str:
        url = f"http://127.0.0.1:{port}"
        process = CliProcess(args, f"{url}{ready_path}", tmp_path / f"{args[0]}.log", env)
        started.append(process.start())
        return url

    yield start
    for process in started:
        process.stop()


def test_registry(run, pg_dsn: str) -> None:
    port = free_port()
    url = run(
        ["registry", "--port", str(port), "--pg-url", pg_dsn],
        "/health",
        port,
        {"CHANGEBROKER_REGISTRY_AUTH_TOKEN": ""},
    )
    schema = {"serialization": "json", "schemaDefinition": {"type": "string"}}
    first, after, again, after_again = jdk_exchange(
        url, "POST", "/subjects/jdk/versions", schema, then="/subjects"
    )
    assert first.status == 200, first
    assert again.status == 200 and again.json()["id"] == first.json()["id"], again
    for listing in (after, after_again):
        assert listing.status == 200 and listing.json() == {"name": ["jdk"]}, listing


def test_broker(run, pg_dsn: str, kafka_bootstrap: str, unique_name) -> None:
    port = free_port()
    url = run(
        ["broker", "--port", str(port), "--pg-url", pg_dsn],
        "/health",
        port,
        {"CHANGEBROKER_KAFKA_BOOTSTRAP": kafka_bootstrap},
    )
    name = unique_name("jdk")
    first, after, again, after_again = jdk_exchange(
        url, "POST", "/event-types", business_event_type(name), then=f"/event-types/{name}"
    )
    assert first.status == 201, first
    # The name is in the body: only a body that arrived makes this a conflict.
    assert again.status == 409 and name in again.json()["detail"], again
    for read in (after, after_again):
        assert read.status == 200 and read.json()["name"] == name, read


def test_changeserver(run, pg_dsn: str, tmp_path: Path, unique_name) -> None:
    port, mgmt = free_port(), free_port()
    args = [
        "changeserver", "--pg-url", pg_dsn, "--slot", unique_name("jdk"),
        "--db-dir", str(tmp_path / "log"), "--port", str(port), "--mgmt-port", str(mgmt),
    ]  # fmt: skip
    url = run(args, "/ready", mgmt)
    api = f"http://127.0.0.1:{port}"
    changes = "/changes?scope=jdk&limit=0"
    # A GET as the JDK sends it (no body), and a POST whose body must not become a request.
    first, after, again, after_again = jdk_exchange(api, "GET", changes, None, then=changes)
    assert first.status == 200 and "lastSequence" in first.json(), first
    assert again.status == 200 and after.status == 200 and after_again.status == 200
    refused, after, again, after_again = jdk_exchange(
        api, "POST", "/changes", {"scope": "jdk"}, then=changes
    )
    assert refused.status == 405 and again.status == 405, (refused, again)
    assert after.status == 200 and after_again.status == 200, (after, after_again)
    for path in ("/health", "/ready"):
        health = jdk_exchange(url, "GET", path, None, then=path)
        assert [r.status for r in health] == [200, 200, 200, 200], health
