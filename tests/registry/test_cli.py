"""``changebroker registry`` as a user (and ``changebroker up``) starts it; one process or
several workers, SIGTERM drains it: a request under way is answered, then it exits."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import psycopg

from changebroker.stack.processes import answers, wait_until
from changebroker.stack.run import CliProcess, registry_process

DRAIN_BOUND = 15.0  # seconds: the graceful shutdown's 10, and some


def drain_with_a_request_under_way(process: CliProcess, url: str, pg_dsn: str) -> int | None:
    """SIGTERM while a registration waits on a table lock this test holds; the lock is let go
    only once the registry stopped taking connections. The registration must be answered and
    the process gone within the bound; returns its exit status."""
    body = {"serialization": "json", "schemaDefinition": {"type": "integer"}}
    answered: list[httpx.Response | BaseException] = []

    def register() -> None:
        try:
            answered.append(httpx.post(f"{url}/subjects/drain/versions", json=body, timeout=60))
        except BaseException as error:
            answered.append(error)

    assert process.process is not None
    with psycopg.connect(pg_dsn) as holder:
        holder.execute("LOCK TABLE registry_subjects IN EXCLUSIVE MODE")  # reads still pass
        request = threading.Thread(target=register)
        request.start()
        with psycopg.connect(pg_dsn) as watcher:
            wait_until(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%FROM registry_subjects%'"
                    ).fetchone()
                    == (1,)
                ),
                timeout=30,
                what="the registration to wait on the lock",
            )
        started = time.monotonic()
        process.process.send_signal(signal.SIGTERM)
        wait_until(lambda: not answers(f"{url}/health"), timeout=DRAIN_BOUND, what="draining")
        holder.rollback()  # the registration goes on
    request.join(timeout=60)
    code = process.process.wait(timeout=DRAIN_BOUND + 10)
    took = time.monotonic() - started
    assert len(answered) == 1 and isinstance(answered[0], httpx.Response), answered
    assert answered[0].status_code == 200, answered[0].text
    assert took < DRAIN_BOUND, f"the registry took {took:.1f}s to drain"
    return code


def test_registry_command_serves_and_stops_cleanly(pg_dsn: str, tmp_path: Path) -> None:
    process, url = registry_process(pg_dsn, tmp_path / "registry.log")
    process.start()
    try:
        body = {"serialization": "json", "schemaDefinition": {"type": "string"}}
        response = httpx.post(f"{url}/subjects/cli/versions", json=body)
        assert response.status_code == 200, response.text
        assert httpx.get(f"{url}/subjects").json() == {"name": ["cli"]}
        code = drain_with_a_request_under_way(process, url, pg_dsn)
    finally:
        process.stop()  # a no-op once it exited
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
        code = drain_with_a_request_under_way(process, url, pg_dsn)
    finally:
        process.stop()  # a no-op once it exited
    log = (tmp_path / "registry.log").read_text()
    assert code in (0, -signal.SIGTERM), log
    assert log.count("Started server process") == 2
