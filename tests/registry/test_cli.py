"""``changebroker registry`` as a user (and ``changebroker up``) starts it."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from changebroker.stack.processes import wait_until
from changebroker.stack.run import registry_process


def test_registry_command_serves_and_stops_cleanly(pg_dsn: str, tmp_path: Path) -> None:
    process, url = registry_process(pg_dsn, tmp_path / "registry.log")
    process.start()
    try:
        body = {"serialization": "json", "schemaDefinition": {"type": "string"}}
        response = httpx.post(f"{url}/subjects/cli/versions", json=body)
        assert response.status_code == 200, response.text
        assert httpx.get(f"{url}/subjects").json() == {"name": ["cli"]}
    finally:
        code = process.stop()
    log = (tmp_path / "registry.log").read_text()
    # uvicorn finishes open work, then re-raises SIGTERM: the exit says how it was stopped.
    assert code in (0, -signal.SIGTERM), log
    assert "Finished server process" in log
    assert "migration applied" in log and "component=registry" in log


def test_workers_share_the_port_and_see_each_others_writes(pg_dsn: str, tmp_path: Path) -> None:
    process, url = registry_process(pg_dsn, tmp_path / "registry.log", "--workers", "2")
    process.start()
    try:
        body = {"serialization": "json", "schemaDefinition": {"type": "string"}}
        # A connection each: the kernel spreads them over both workers.
        for _ in range(8):
            assert httpx.get(f"{url}/subjects").json() == {"name": []}
        assert httpx.post(f"{url}/subjects/workers/versions", json=body).status_code == 200
        wait_until(
            lambda: all(
                httpx.get(f"{url}/subjects").json() == {"name": ["workers"]} for _ in range(8)
            ),
            timeout=10,
            what="every worker to answer the new subject",
        )
    finally:
        code = process.stop()
    log = (tmp_path / "registry.log").read_text()
    assert code in (0, -signal.SIGTERM), log
    assert log.count("Started server process") == 2
