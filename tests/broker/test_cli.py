"""``changebroker broker``: its flags, and several worker processes as one broker to its clients."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import httpx
import pytest

from changebroker import config
from changebroker.broker import main
from changebroker.broker.settings import Settings
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


def test_consumption_settings_are_flags_and_variables_with_nakadis_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nakadi's commit timeout (60 s), stream memory limit (50 MB) and partitions per
    subscription (100) are the defaults; each has a flag and an environment variable."""

    def settings(*flags: str) -> tuple[float, int, int]:
        parser = argparse.ArgumentParser()
        main.configure(parser)
        args = parser.parse_args(["--pg-url", "postgresql://x", *flags])
        made = config.from_args(Settings, args, pg_dsn=args.pg_url)
        return made.max_commit_timeout, made.stream_memory_limit, made.subscription_max_partitions

    assert settings() == (60.0, 50_000_000, 100)
    assert settings("--max-commit-timeout", "10")[0] == 10.0
    monkeypatch.setenv("CHANGEBROKER_BROKER_MAX_COMMIT_TIMEOUT", "5s")
    monkeypatch.setenv("CHANGEBROKER_BROKER_STREAM_MEMORY_LIMIT", "10000")
    monkeypatch.setenv("CHANGEBROKER_BROKER_SUBSCRIPTION_MAX_PARTITIONS", "30")
    assert settings() == (5.0, 10_000, 30)


def test_timeline_wait_timeout_is_nakadis_40_seconds_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def wait_timeout(*flags: str) -> float:
        parser = argparse.ArgumentParser()
        main.configure(parser)
        args = parser.parse_args(["--pg-url", "postgresql://x", *flags])
        return config.from_args(Settings, args, pg_dsn=args.pg_url).timeline_wait_timeout

    assert wait_timeout() == 40.0
    assert wait_timeout("--timeline-wait-timeout", "2m") == 120.0
    monkeypatch.setenv("CHANGEBROKER_BROKER_TIMELINE_WAIT_TIMEOUT", "5s")
    assert wait_timeout() == 5.0
