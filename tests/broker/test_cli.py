"""``changebroker broker`` with several worker processes: one broker to its clients."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from changebroker.stack.run import broker_process
from tests.broker.kafka_read import read_all, topic_of
from tests.support.event_types import business_event_type


def test_workers_share_event_types_and_stop_on_sigterm(
    pg_dsn: str, kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    broker, url = broker_process(pg_dsn, kafka_bootstrap, tmp_path / "broker.log", "--workers", "2")
    broker.start()
    name = unique_name("workers")
    try:
        for _ in range(8):  # fresh connections: the kernel spreads them over the workers
            with httpx.Client(base_url=url, timeout=30) as client:
                if client.get(f"/event-types/{name}").status_code == 404:
                    assert (
                        client.post("/event-types", json=business_event_type(name)).status_code
                        == 201
                    )
                event = {
                    "order_number": "1",
                    "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00Z"},
                }
                assert client.post(f"/event-types/{name}/events", json=[event]).status_code == 200
    finally:
        assert broker.stop() == 0
    topic, partitions = topic_of(pg_dsn, name)
    assert len(read_all(kafka_bootstrap, topic, partitions)) == 8
    # Every worker is gone with its parent: the port is free again.
    with httpx.Client(timeout=2) as probe:
        try:
            probe.get(f"{url}/health")
            raise AssertionError("a worker still answers after SIGTERM")
        except httpx.ConnectError:
            pass
