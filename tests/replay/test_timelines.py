"""The replay reads every timeline its range spans: an event type whose events moved to
another Kafka cluster and back is replayed through all of them, one key's events in order,
in full and onto a base snapshot whose cursors are in an older timeline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyspark.sql import SparkSession

from changebroker.replay import run_replay
from tests.broker.test_storages import storage
from tests.broker.test_timelines import switch
from tests.replay.test_keyed import EXPECTED_FIRST, EXPECTED_SECOND, FIRST, SECOND, produce
from tests.replay.test_keyed import event_type as keyed_event_type
from tests.support.bridge_stack import Stack
from tests.support.replay_snapshots import snapshot_tables
from tests.support.second_kafka import second_kafka

pytestmark = pytest.mark.spark

TABLE = "public.moved"


@pytest.fixture(scope="module")
def second_bootstrap() -> Iterator[str]:
    with second_kafka() as bootstrap:
        yield bootstrap


def _topic(client: httpx.Client, name: str) -> str:
    return str(client.get(f"/event-types/{name}/timelines").json()[-1]["topic"])


def test_a_replay_reads_through_timelines_on_two_clusters(
    stack: Stack, spark: SparkSession, second_bootstrap: str, tmp_path: Path, unique_name
) -> None:
    with httpx.Client(base_url=stack.broker_url, timeout=60) as client:
        other = unique_name("other")
        assert client.post("/storages", json=storage(other, second_bootstrap)).status_code == 201
        name, first_topic = keyed_event_type(stack, TABLE)
        # Half of the history in the first timeline, the rest in one on the other cluster:
        # several keys' events (3's updates, 6 -> 7's key change) span the two.
        half = len(FIRST) // 2
        produce(stack, first_topic, TABLE, FIRST[:half], keys=True)
        switch(client, name, other)
        produce(stack, _topic(client, name), TABLE, FIRST[half:], True, second_bootstrap)
        options = stack.replay_options(tmp_path / "snapshots", event_types=(name,))
        first = run_replay(options, spark)
        assert snapshot_tables(spark, first) == {TABLE: EXPECTED_FIRST}
        assert {c["offset"][:8] for c in first.cursors[name]} == {"001-0002"}
        # Back on the first cluster: the next run goes on from the first one's cursors.
        switch(client, name, "default")
        produce(stack, _topic(client, name), TABLE, SECOND, keys=True)
        second = run_replay(options, spark)
        assert second.base_snapshot_id == first.snapshot_id
        assert snapshot_tables(spark, second) == {TABLE: EXPECTED_SECOND}
        assert {c["offset"][:8] for c in second.cursors[name]} == {"001-0003"}
        # In full, from the first timeline's start, the same.
        full = run_replay(
            stack.replay_options(tmp_path / "full", event_types=(name,), full=True), spark
        )
        assert snapshot_tables(spark, full) == {TABLE: EXPECTED_SECOND}
